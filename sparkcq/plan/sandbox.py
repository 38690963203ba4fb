"""What a server client may make Spark do: which functions its queries call, which paths
its statements name.

A client of ``sparkcq serve`` writes SQL that runs inside the server's Spark. Without limits
one statement could call Java methods (``java_method('java.lang.System', 'exit', 3)`` stops
the JVM), read any file (``CREATE TABLE pw ... WITH (format='text', path='/etc/passwd')``) or
write anywhere (a files sink). An untrusted engine (``Engine(trusted=False)``, the default and
the server's) therefore

- lets a query call only the Spark built-ins of ``allowed_functions.ALLOWED`` and the
  functions and aggregates created in the engine. Which function Spark will call is asked
  of Spark's own parser, on the exact SQL the binder hands to Spark, so no renaming by
  sqlglot and no alias hides a call; subqueries (which read tables of their own),
  ``IDENTIFIER(...)`` calls and ``${...}`` (Spark substitutes configuration and
  environment variables into query text) are refused as well;
- lets a statement name only paths inside its data roots (``ensure_data_path``).
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from sparkcq.errors import AnalysisError, Location
from sparkcq.plan.allowed_functions import ALLOWED, REFUSED

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HOW_TO_TRUST = ("an in-process Engine(trusted=True) lifts the limits for code you trust")
_EXPRESSIONS = "org.apache.spark.sql.catalyst.expressions."
_ANALYSIS = "org.apache.spark.sql.catalyst.analysis."
# what Spark's parser leaves unresolved in an expression and the sandbox understands: a
# function call (whose name is checked), a column, a field or element, a star, an alias
_UNRESOLVED_OK = {"UnresolvedFunction", "UnresolvedAttribute", "UnresolvedExtractValue",
                  "UnresolvedStar", "UnresolvedAlias"}
_SUBQUERIES = {"ScalarSubquery", "Exists", "ListQuery", "InSubquery", "LateralSubquery",
               "FunctionTableSubqueryArgumentExpression"}


@dataclass(frozen=True)
class Refusal:
    """Why some Spark SQL may not run for a server client, and where to point in the text.

    ``patterns`` are regular expressions (case-insensitive, best first) that find the
    culprit in the query text, such as the refused function's name followed by ``(``.
    """

    message: str
    patterns: tuple[str, ...] = ()


def find_refusal(spark: SparkSession, sql: str, own_functions: Collection[str],
                 columns: Collection[str]) -> Refusal | None:
    """Why the Spark SQL expression ``sql`` may not run in an untrusted engine, or None.

    ``own_functions`` are the lower-case names of the functions and aggregates created in
    the engine (``Engine.create_function``, ``CREATE AGGREGATE``): they are allowed too.
    ``columns`` are the lower-case names of the columns ``sql`` refers to: Spark reads any
    other bare name as a call without parentheses (``current_user``, ``session_user``), so
    such a name is checked like a function.
    """
    if "${" in sql:
        msg = ("'${...}' is not allowed for server clients: Spark replaces it with configuration "
               "and environment variables of the server; write the value itself")
        return Refusal(msg, (r"\$\{",))
    nodes = _parsed(spark, sql)
    known = spark_functions(spark)
    if nodes is None:
        return None  # Spark cannot parse it, so cannot run it: its analysis says why
    for cls, name_parts in nodes:
        short = cls.rsplit(".", 1)[-1]
        if short == "UnresolvedAttribute":
            if name_parts is not None and len(name_parts) == 1 \
                    and name_parts[0].lower() not in columns:
                refusal = _function_refusal(name_parts, (), None)
                if refusal is not None:
                    return refusal
            continue
        if short in _SUBQUERIES:
            msg = ("subqueries are not allowed for server clients: a continuous query reads "
                   "only the streams and tables in its FROM clause; join a table instead")
            return Refusal(msg, (r"\(\s*select\b",))
        if name_parts is not None:
            refusal = _function_refusal(name_parts, own_functions, known)
            if refusal is not None:
                return refusal
            continue
        if cls.startswith(_ANALYSIS) and short not in _UNRESOLVED_OK:
            what = "IDENTIFIER(...)" if "Identifier" in short else short
            msg = (f"{what} is not allowed for server clients: write the function or column "
                   "name itself")
            return Refusal(msg, (r"\bidentifier\s*\(",) if "Identifier" in short else ())
        if not cls.startswith((_EXPRESSIONS, _ANALYSIS)):
            msg = f"this expression ({short}) is not allowed for server clients"
            return Refusal(msg)
    return None


def _function_refusal(name_parts: tuple[str, ...], own: Collection[str],
                      known: frozenset[str] | None) -> Refusal | None:
    """Why a call of the function named ``name_parts`` is refused, or None if allowed.

    ``known``: the names of Spark's own functions; a call of none of them and of none of the
    engine's is an unknown function (None: a bare name, which may be a column).
    """
    name = ".".join(name_parts).lower()
    if len(name_parts) == 1 and (name in ALLOWED or name in own):
        return None
    name_at = rf"(?<![\w$]){re.escape(name_parts[-1])}"
    if known is not None and len(name_parts) == 1 and name not in known \
            and name not in REFUSED:  # a table function (read_files) is no scalar one
        msg = unknown_function(name, [*ALLOWED, *own])
        return Refusal(msg, (rf"{name_at}`?\s*\(", rf"{name_at}\b"))
    if len(name_parts) > 1:
        reason = "a qualified name may reach any catalog's functions; write the plain name"
    else:
        reason = REFUSED.get(name, "it is not on the allow-list of Spark's built-in functions")
    msg = (f"function {name!r} is not allowed for server clients: {reason}; allowed are "
           "Spark's built-in scalar functions that compute on their arguments only "
           "(docs/sandbox.md) and the functions of SHOW FUNCTIONS and SHOW "
           f"AGGREGATES; {HOW_TO_TRUST}")
    return Refusal(msg, (rf"{name_at}`?\s*\(", rf"{name_at}\b"))


def unknown_function(name: str, callable_names: Collection[str]) -> str:
    """The message for a call of a function that does not exist, with the nearest names."""
    near = difflib.get_close_matches(name, sorted(set(callable_names)), n=3, cutoff=0.6)
    hint = (f"; did you mean {', '.join(near)}?" if near else
            "; SHOW FUNCTIONS and SHOW AGGREGATES list the engine's own")
    return f"unknown function {name!r}{hint}"


@lru_cache(maxsize=4)
def spark_functions(spark: SparkSession) -> frozenset[str]:
    """The lower-case names of Spark's built-in functions (asked once per session)."""
    return frozenset(row[0].lower() for row in spark.sql("SHOW SYSTEM FUNCTIONS").collect())


_Node = tuple[str, tuple[str, ...] | None]  # a class name and, for a call or a name, its parts


@lru_cache(maxsize=4096)
def _parsed(spark: SparkSession, sql: str) -> tuple[_Node, ...] | None:
    """Each node Spark's parser makes of ``sql``: its class and, for a function call, its
    name parts; None if Spark cannot parse it.

    One call into the JVM: the parsed tree as JSON (walking it node by node through py4j
    costs a round trip per node). Nested trees (a subquery's plan) are included. A tree
    that cannot be read is one unknown node, which is refused.
    """
    parser = spark._jsparkSession.sessionState().sqlParser()  # type: ignore[attr-defined]
    try:
        tree = parser.parseExpression(sql)
    except Exception:  # noqa: BLE001 - a ParseException, wrapped by py4j or by PySpark
        return None
    try:
        document = json.loads(tree.toJSON())
    except Exception:  # noqa: BLE001 - refused below as an expression it cannot check
        return (("unreadable", None),)
    nodes: list[_Node] = []
    _collect(document, nodes)
    return tuple(nodes)


def _collect(value: Any, out: list[_Node]) -> None:
    if isinstance(value, list):
        for item in value:
            _collect(item, out)
    elif isinstance(value, dict):
        cls = value.get("class")
        if isinstance(cls, str):
            parts = None
            if cls.endswith((".UnresolvedFunction", ".UnresolvedAttribute")):
                parts = _name_parts(value.get("nameParts"))
            out.append((cls, parts))
        for item in value.values():
            _collect(item, out)


def _name_parts(value: Any) -> tuple[str, ...]:
    """A function's name parts from Spark's JSON: a list, or its text ``[a, b]``.

    Read from the text, a single name holding ``, `` would split into several parts and be
    refused as qualified: the reading errs on the side of refusing.
    """
    if isinstance(value, list):
        return tuple(str(v) for v in value)
    text = str(value)
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return tuple(text.split(", "))


def locate(refusal: Refusal, text: str, spans: Sequence[tuple[int, int]],
           fallback: Location) -> Location:
    """Where ``refusal``'s culprit is in ``text``: searched in each ``[start, end)`` of
    ``spans`` in turn (the expression, then the whole query); else ``fallback``.
    """
    for start, end in spans:
        for pattern in refusal.patterns:
            m = re.compile(pattern, re.IGNORECASE).search(text, start, end)
            if m:
                name_end = m.start() + len(m.group(0).rstrip("( \t\n`"))
                return Location.of_span(text, m.start(), max(name_end, m.start() + 1))
    return fallback


# what a server client's CREATE TABLE may read: files Spark parses itself, no connector that
# reaches other systems (jdbc, ...) or loads code; and PostgreSQL tables of the databases the
# operator configured (``database_refusal``)
TABLE_FORMATS = ("csv", "json", "parquet", "orc", "text")

# options of a PostgreSQL table or sink a server client may not write: they would make the
# server connect wherever the client says, carry credentials, or run the client's own SQL in
# the database (``query``); a client names a configured database instead (database='name')
RAW_DATABASE_OPTIONS = ("url", "user", "password", "query")


def database_refusal(options: Mapping[str, str], configured: Sequence[str]) -> str | None:
    """Why a server client's PostgreSQL ``options`` are refused, or None: an option of
    ``RAW_DATABASE_OPTIONS``. The message lists the ``configured`` database names (never
    their URLs) and how the operator adds one.
    """
    raw = [key for key in RAW_DATABASE_OPTIONS if key in options]
    if not raw:
        return None
    known = ", ".join(sorted(configured)) or "none configured"
    return (f"option {raw[0]!r} is not allowed for server clients: a client may not make the "
            "server connect anywhere, hand it credentials or run its own SQL in a database; "
            f"name a database the operator configured with database='name' ({known}; "
            "sparkcq serve --database NAME=URL, in process Engine(databases={NAME: URL})) "
            f"and a table with table='name'; {HOW_TO_TRUST}")

# characters Spark's file system layer reads as glob patterns or URL schemes, which a path
# check on the text cannot follow
_UNSAFE_PATH = re.compile(r"[*?\[\]{}\\:\x00]")


def is_inside(path: str, roots: Sequence[str]) -> bool:
    """Whether the real path ``path`` is one of ``roots`` or below one of them."""
    return any(os.path.commonpath([path, root]) == root for root in roots)


def ensure_data_path(path: str, roots: Sequence[str], text: str, loc: Location | None) -> str:
    """The real path ``path`` names, if it lies inside one of the data ``roots``.

    A relative path is taken from the first root. Symbolic links and ``..`` are resolved
    before the check (``os.path.realpath``) and Spark is given the resolved path, so neither
    leads out of the roots. Otherwise an AnalysisError at ``loc`` names the path, the roots
    and how to configure them.
    """
    how = ("the server's operator adds a folder with `sparkcq serve --data-root DIR`; in "
           f"process pass Engine(data_roots=[...]); {HOW_TO_TRUST}")
    if not roots:
        msg = (f"path {path!r} is not allowed: this engine has no data root, so server clients "
               f"may name no path; {how}")
        raise AnalysisError(msg, text, loc)
    bad = sorted(set(_UNSAFE_PATH.findall(path)))
    if bad or not path:
        shown = " ".join(repr(c) for c in bad) or "an empty path"
        msg = (f"path {path!r} is not allowed for server clients: no glob patterns, URLs or "
               f"backslashes ({shown}); name a folder or file under the data roots: "
               f"{', '.join(roots)}")
        raise AnalysisError(msg, text, loc)
    real = os.path.realpath(os.path.join(roots[0], path))
    if not is_inside(real, roots):
        resolved = f" (it resolves to {real!r})" if real != path else ""
        msg = (f"path {path!r}{resolved} is outside the data roots ({', '.join(roots)}); "
               f"server clients may only use paths under them, a relative path under the "
               f"first; {how}")
        raise AnalysisError(msg, text, loc)
    return real
