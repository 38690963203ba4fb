"""sparkcq: continuous streaming SQL with exact event-time semantics, on Apache Spark."""

from sparkcq.engine import Engine
from sparkcq.errors import (
    AnalysisError,
    CatalogError,
    ExecutionError,
    PlanError,
    QuerySyntaxError,
    SourceError,
    SparkcqError,
)
from sparkcq.runtime.frames import RowCounting

__all__ = [
    "AnalysisError",
    "CatalogError",
    "Engine",
    "ExecutionError",
    "PlanError",
    "QuerySyntaxError",
    "RowCounting",
    "SourceError",
    "SparkcqError",
]
__version__ = "0.1.0"
