"""Debian packages that some tests need: installed with apt-get when missing, if root.

tests/postgres_server.py and tests/browser.py each know their packages and how to tell
whether they are there; this module does the rest. ``make postgres-deps`` and ``make
browser-deps`` (prerequisites of ``make test``) run ``python3 tests/<module>.py install``,
which installs what is missing (``apt-get update && apt-get install -y
--no-install-recommends ...``) when it runs as root, and otherwise says what to install.
Under ``CI=true`` anything missing is an error: CI must run those tests, never skip them.
tests/conftest.py calls the same ``ensure_installed()`` of each module when a selected test
needs it. Standard library only: it runs before the project's virtual environment exists.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence

# wait for another apt-get or dpkg (another install target, unattended-upgrades) to finish
_APT_OPTIONS = ("-o", "DPkg::Lock::Timeout=600")


def in_ci() -> bool:
    """Whether this runs in CI (``CI=true``), where tests must not be skipped."""
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def install_command(packages: Sequence[str]) -> str:
    """The shell command that installs ``packages``, for messages."""
    return ("apt-get update && apt-get install -y --no-install-recommends "
            f"{' '.join(packages)}")


def apt_install(packages: Sequence[str]) -> str | None:
    """Run ``apt-get update`` and ``apt-get install`` (as root); None when it worked, else why.
    """
    print(f"installing {' '.join(packages)}", file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        subprocess.run(["apt-get", *_APT_OPTIONS, "update"], check=True, env=env)
        subprocess.run(["apt-get", *_APT_OPTIONS, "install", "-y", "--no-install-recommends",
                        *packages], check=True, env=env)
    except (OSError, subprocess.CalledProcessError) as e:
        return f"installing {' '.join(packages)} failed: {e}"
    return None


def ensure(purpose: str, missing: Callable[[], list[str]], packages: Sequence[str],
           make_target: str) -> str | None:
    """Install ``packages`` when ``missing()`` names any and this runs as root.

    None when nothing is missing (any more), else why not: a non-root user gets the
    command to run as root. ``purpose`` names the tests (``"PostgreSQL tests"``) and
    ``make_target`` the Makefile target that installs them, for messages.
    """
    need = missing()
    if not need:
        return None
    if os.geteuid() != 0:
        return (f"{purpose} need the Debian packages {', '.join(need)}; as root run: "
                f"{install_command(need)} (or: make {make_target})")
    print(f"{purpose} need {', '.join(need)}", file=sys.stderr, flush=True)
    failure = apt_install(packages)
    if failure is not None:
        return failure
    still = missing()
    return f"after installing, still missing: {', '.join(still)}" if still else None


def install_main(argv: list[str], script: str, purpose: str,
                 ensure_installed: Callable[[], str | None],
                 ready: str | Callable[[], str]) -> int:
    """The ``install`` command of ``script``. Exit status: 0 when all is there (after
    printing ``ready``) or, outside CI, when not (after a note that the ``purpose`` will be
    skipped); 1 when something is missing in CI; 2 on misuse.
    """
    if argv != ["install"]:
        print(f"usage: python3 {script} install", file=sys.stderr)
        return 2
    problem = ensure_installed()
    if problem is None:
        print(ready if isinstance(ready, str) else ready())
        return 0
    if in_ci():
        print(f"error: {problem}", file=sys.stderr)
        return 1
    print(f"note: {problem}; the {purpose} will be skipped", file=sys.stderr)
    return 0
