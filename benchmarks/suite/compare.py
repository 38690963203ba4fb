"""Is each engine's output the independently computed one? Row for row, where the engines'
semantics coincide (``workloads.py`` says where they do not and how the check adapts).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from benchmarks.suite.workloads import Workload


def normalised(frame: pd.DataFrame, wl: Workload) -> pd.DataFrame:
    """Rows in one order with times as naive UTC millisecond timestamps."""
    out = frame[list(wl.columns)].copy()
    for column in wl.times:
        t = pd.to_datetime(out[column])
        out[column] = (t.dt.tz_convert("UTC").dt.tz_localize(None) if t.dt.tz is not None
                       else t).astype("datetime64[ms]")
    for c in out.columns:
        if out[c].dtype.kind in "iu":
            out[c] = out[c].astype("int64")
    keys = [c for c in wl.columns if out[c].dtype.kind != "f"]
    return out.sort_values(keys + [c for c in wl.columns if c not in keys]
                           ).reset_index(drop=True)


def _at_event_instants(got: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """The ISTREAM rows at the instants an event of the key arrived (sparkcq also has rows
    where an event leaves the window).
    """
    instants = events[["k", "ts"]].drop_duplicates()
    instants = instants.assign(ts=instants["ts"].astype("datetime64[ms]"))
    return got.merge(instants, on=["k", "ts"])


def _drop_unchanged(expected: pd.DataFrame, got: pd.DataFrame, full: pd.DataFrame
                    ) -> tuple[pd.DataFrame, int]:
    """Expected (k, ts, a) rows sparkcq rightly has no row for: ISTREAM emits a row when it
    enters the result, and none when an event leaves the key's value as it was (the value
    just before: sparkcq's previous row of the key, also at instants where events left).
    """
    missing = expected.merge(got[["k", "ts"]], on=["k", "ts"], how="left", indicator=True)
    missing = missing[missing["_merge"] == "left_only"].drop(columns="_merge")
    if missing.empty:
        return expected, 0
    before = pd.merge_asof(missing.sort_values("ts"),
                           full.sort_values("ts").rename(columns={"a": "_prev"}),
                           on="ts", by="k", allow_exact_matches=False)
    same = before[np.isclose(before["a"], before["_prev"], rtol=1e-9, atol=1e-9)]
    keep = expected.merge(same[["k", "ts"]], on=["k", "ts"], how="left", indicator=True)
    kept = keep[keep["_merge"] == "left_only"].drop(columns="_merge")
    return kept.reset_index(drop=True), len(same)


def check_output(engine: str, got: pd.DataFrame, expected: pd.DataFrame, wl: Workload,
                 events: dict[str, pd.DataFrame]) -> str:
    """``ok: N rows`` or what differs. Floating columns compare with a relative tolerance
    of 1e-9 (engines add in different orders). Spark's append mode never emits the windows
    its final watermark has not passed (no more input advances it): those are left out for
    Spark and said so.
    """
    g, e = normalised(got, wl), normalised(expected, wl)
    note = ""
    if wl.restrict_to_events:
        if engine == "sparkcq":
            full = g
            g = normalised(_at_event_instants(g, events["events"]), wl)
            e, unchanged = _drop_unchanged(e, g, full)
            note = (f" (at the events' instants; {unchanged} where the value stayed the same,"
                    " so no new row enters)")
        else:  # one row per event: events at one instant of a key have one value
            g = g.drop_duplicates(subset=[c for c in wl.columns if c in wl.times or c == "k"]
                                  ).reset_index(drop=True)
    if engine == "spark" and len(g) and "w" in wl.columns:
        last = g["w"].max()
        dropped = int((e["w"] > last).sum())
        e = e[e["w"] <= last].reset_index(drop=True)
        note = f" (the last {dropped} rows are never emitted by append mode)"
    if len(g) != len(e):
        return f"{len(g)} rows, expected {len(e)}{note}"
    differs = np.zeros(len(g), dtype=bool)
    for c in wl.columns:
        if g[c].dtype.kind == "f" or e[c].dtype.kind == "f":
            differs |= ~np.isclose(g[c].astype(float), e[c].astype(float), rtol=1e-9,
                                   atol=1e-9, equal_nan=True)
        else:
            differs |= (g[c] != e[c]).to_numpy()
    if differs.any():
        example = g[differs].head(1).to_dict("records")
        expected_row = e[differs].head(1).to_dict("records")
        return f"{int(differs.sum())} of {len(g)} rows differ, e.g. {example} vs {expected_row}"
    return f"ok: {len(g)} rows{note}"
