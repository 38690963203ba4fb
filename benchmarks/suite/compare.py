"""Is each engine's output the independently computed one? Row for row, where the engines'
semantics coincide (``workloads.py`` says where they do not and how the check adapts).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from benchmarks.suite.workloads import Workload


def normalised(frame: pd.DataFrame, columns: list[str], times: list[str]) -> pd.DataFrame:
    """Rows in one order: times as naive UTC microsecond timestamps, integers as int64,
    decimals (Spark's ``DECIMAL``, as Python objects) as floats.
    """
    out = frame[columns].copy()
    for c in columns:
        s = out[c]
        if c in times:
            t = pd.to_datetime(s)
            s = (t.dt.tz_convert("UTC").dt.tz_localize(None) if t.dt.tz is not None
                 else t).astype("datetime64[us]")
        elif s.dtype == object and len(s) and not isinstance(s.iloc[0], str):
            s = pd.to_numeric(s).astype("float64")
        elif s.dtype.kind in "iu":
            s = s.astype("int64")
        out[c] = s
    keys = [c for c in columns if out[c].dtype.kind != "f"]
    return out.sort_values(keys + [c for c in columns if c not in keys]).reset_index(drop=True)


def leave_out_unemitted(engine: str, got: pd.DataFrame, expected: pd.DataFrame
                        ) -> tuple[pd.DataFrame, str]:
    """Expected rows without the windows Spark's append mode never emits (its final
    watermark, the last event minus the delay, never passes them), and a note saying how
    many; unchanged for other engines or outputs without a window end ``w``.
    """
    if engine != "spark" or "w" not in expected.columns:
        return expected, ""
    last = got["w"].max() if len(got) else pd.Timestamp.min
    dropped = int((expected["w"] > last).sum())
    kept = expected[expected["w"] <= last].reset_index(drop=True)
    return kept, f" (the last {dropped} rows are never emitted by append mode)"


def differences(got: pd.DataFrame, expected: pd.DataFrame, note: str = "") -> str:
    """``ok: N rows`` or what differs between two normalised frames. Floating columns
    compare with a relative tolerance of 1e-9 (engines add in different orders).
    """
    columns = list(expected.columns)
    if len(got) != len(expected):
        keys = [c for c in columns if expected[c].dtype.kind != "f"]
        missing = expected.merge(got[keys].drop_duplicates(), how="left", indicator=True)
        extra = got.merge(expected[keys].drop_duplicates(), how="left", indicator=True)
        examples = []
        for label, part in (("missing", missing), ("extra", extra)):
            rows = part[part["_merge"] == "left_only"].drop(columns="_merge").head(2)
            examples.append(f"{label} e.g. {rows.to_dict('records')}")
        return f"{len(got)} rows, expected {len(expected)}{note}; {', '.join(examples)}"
    differs = np.zeros(len(got), dtype=bool)
    for c in columns:
        if got[c].dtype.kind == "f" or expected[c].dtype.kind == "f":
            differs |= ~np.isclose(got[c].astype(float), expected[c].astype(float), rtol=1e-9,
                                   atol=1e-9, equal_nan=True)
        else:
            differs |= (got[c] != expected[c]).to_numpy()
    if differs.any():
        example = got[differs].head(1).to_dict("records")
        wanted = expected[differs].head(1).to_dict("records")
        return f"{int(differs.sum())} of {len(got)} rows differ, e.g. {example} vs {wanted}"
    return f"ok: {len(got)} rows{note}"


def check_output(engine: str, got: pd.DataFrame, expected: pd.DataFrame, wl: Workload,
                 events: dict[str, pd.DataFrame]) -> str:
    """``ok: N rows`` or what differs, after the adaptations ``workloads.py`` describes:
    one row per key and instant of a per-event window, Spark's never-emitted last windows
    left out (and said so).
    """
    columns, times = list(wl.columns), list(wl.times)
    g, e = normalised(got, columns, times), normalised(expected, columns, times)
    note = ""
    if wl.per_event:  # one row per event: events at one instant of a key have one value
        g = g.drop_duplicates(subset=[c for c in columns if c in times or c == "k"]
                              ).reset_index(drop=True)
    e, unemitted = leave_out_unemitted(engine, g, e)
    return differences(g, e, note + unemitted)
