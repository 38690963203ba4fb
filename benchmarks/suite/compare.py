"""Is each engine's output the independently computed one? Row for row, where the engines'
semantics coincide.
"""

from __future__ import annotations

import pandas as pd

from benchmarks.suite.workloads import Workload


def normalised(frame: pd.DataFrame, wl: Workload) -> pd.DataFrame:
    """Rows in one order with times as naive UTC timestamps and sums rounded."""
    out = frame[list(wl.columns)].copy()
    w = pd.to_datetime(out["w"])
    out["w"] = (w.dt.tz_convert("UTC").dt.tz_localize(None) if w.dt.tz is not None else w
                ).astype("datetime64[ms]")
    for c in out.columns:
        if out[c].dtype.kind == "f":
            out[c] = out[c].round(6)
        elif out[c].dtype.kind in "iu":
            out[c] = out[c].astype("int64")
    return out.sort_values(list(wl.columns)).reset_index(drop=True)


def check_output(engine: str, got: pd.DataFrame, expected: pd.DataFrame,
                 wl: Workload) -> str:
    """``ok`` or what differs. Spark's append mode never emits the windows its final
    watermark has not passed (no more input advances it): those are left out for Spark
    and said so.
    """
    g, e = normalised(got, wl), normalised(expected, wl)
    note = ""
    if engine == "spark" and len(g):
        last = g["w"].max()
        dropped = int((e["w"] > last).sum())
        e = e[e["w"] <= last].reset_index(drop=True)
        note = f" (the last {dropped} rows are never emitted by append mode)"
    if len(g) != len(e):
        return f"{len(g)} rows, expected {len(e)}{note}"
    diff = (g != e).any(axis=1)
    if diff.any():
        example = g[diff].head(1).to_dict("records")
        return f"{int(diff.sum())} of {len(g)} rows differ, e.g. {example}"
    return f"ok: {len(g)} rows{note}"
