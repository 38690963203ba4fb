"""Engine results to JSON: pandas frames to records, numpy scalars and NaN to plain values."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd


def to_json(value: Any) -> Any:
    """A JSON-safe copy of what the engine returned."""
    if isinstance(value, pd.DataFrame):
        return [{str(k): to_json(v) for k, v in rec.items()} for rec in value.to_dict("records")]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_json(v) for v in value]
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, pd.Timestamp | dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "value") and isinstance(value.value, str):  # enums
        return value.value
    return str(value)
