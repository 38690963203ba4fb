"""What a query's log says when it fails: one line a user can act on, and the frames of
the user's own code (a Python worker's traceback is a page of PySpark internals).
"""

from __future__ import annotations

import os
import re

# frames of PySpark's and sparkcq's own code (this file is sparkcq/runtime/failures.py)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_INTERNAL = (f"{os.sep}pyspark{os.sep}", _PACKAGE + os.sep)


def _user_frame(line: str) -> bool:
    return line.startswith("File ") and not any(part in line for part in _INTERNAL)


def describe_failure(error: BaseException) -> str:
    """One line from a Spark or Python failure (whose text may be a page).

    A Python worker's traceback yields its last line (``ValueError: ...``) and the user's
    frame (``File "mod.py", line 3, in fn``); a Spark error its first line.
    """
    text = str(error).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if "Traceback (most recent call last)" in text:
        errors = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception|Exit)\b", ln)]
        frames = [ln for ln in lines if _user_frame(ln)]
        where = f" ({frames[-1]})" if frames else ""
        return (errors[-1] if errors else lines[-1]) + where
    return lines[0] if lines else type(error).__name__


def user_traceback(error: BaseException) -> list[str]:
    """The frames of user code in a Python worker's traceback, each with its source line."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    out: list[str] = []
    for i, line in enumerate(lines):
        if _user_frame(line):
            code = lines[i + 1] if i + 1 < len(lines) and not lines[i + 1].startswith(
                ("File ", "Traceback")) else ""
            frame = f"  {line}" + (f"\n    {code}" if code else "")
            if frame not in out:
                out.append(frame)
    return out
