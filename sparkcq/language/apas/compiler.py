"""Compile a StreamAPAS query into the SELECT the SQL front end binds.

A query in the functional language becomes the same plan nodes as the equal SQL query, so
the two share operators: each step becomes a SELECT over its inputs (catalog streams and
earlier steps, as subqueries), which ``plan/binder.py`` binds exactly as it binds SQL. What
SQL does not say, this module decides with the language's own rules, before Spark sees the
query: names resolve against the steps and the catalog, every expression is typed by the cast
and operator tables (``types.py``), and a step that calls an aggregate groups by its other
attributes. Every generated node carries the span of the APAS text it comes from, so an error
found later by the binder still underlines the user's text.

    select o1[sektor = 1, avg = agg.avg($I.val)];  select [$o1[T]]
    ==>  SELECT 1 AS sektor, avg(I.val) AS avg FROM I
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeVar

import sqlglot
import sqlglot.expressions as exp
from pyspark.sql.types import StructType

from sparkcq.errors import AnalysisError, Location
from sparkcq.language.apas import syntax as s
from sparkcq.language.apas.libraries import BUILT_IN, Library, LibraryFunction, Role
from sparkcq.language.apas.table_function_calls import DURATION_UNITS, read_table_function
from sparkcq.language.apas.types import (
    ApasType,
    OperatorTypeError,
    Typed,
    apas_type,
    apply,
    cast,
)
from sparkcq.language.sql.statements import (
    OutputForm,
    SelectText,
    SourceWindow,
    TableFunctionCall,
)
from sparkcq.model.aggregate_functions import BUILTIN, DERIVED_AGGREGATES, Takes
from sparkcq.model.time import Duration, unit_micros
from sparkcq.model.windows import (
    CountCutWindow,
    CutWindow,
    KeyCutWindow,
    NowWindow,
    RangeWindow,
    RowsWindow,
    SessionWindow,
    UnboundedWindow,
    WindowSpec,
)

if TYPE_CHECKING:
    from sparkcq.aggregates.user import UserAggregate
    from sparkcq.catalog import Catalog

#: an attribute tree's types: a leaf's type, or a sub-tree
Shape = dict[str, "ApasType | Shape"]

_UNION_OUTPUT = "new"
_NUMERIC = (ApasType.INTEGER, ApasType.DOUBLE)
#: the argument types of each built-in aggregate; another type is cast to the first it can
_TAKES = {Takes.NUMBER: _NUMERIC, Takes.ORDERED: (*_NUMERIC, ApasType.STRING, ApasType.DATETIME)}
_AGG_ARGS = {**{name: _TAKES[agg.takes] for name, agg in BUILTIN.items() if agg.takes in _TAKES},
             "stats": _NUMERIC, **dict.fromkeys(DERIVED_AGGREGATES, _NUMERIC)}


@dataclass(frozen=True)
class Value:
    """A typed expression: its SQL, type, sub-tree shape, whether it aggregates and which
    attributes it reads outside an aggregate.
    """

    typed: Typed
    span: s.Span
    shape: Shape | None = None
    aggregates: bool = False
    reads: tuple[str, ...] = ()  # attributes read outside any aggregate, as written

    @property
    def type(self) -> ApasType:  # noqa: D102
        return self.typed.type


@dataclass
class _Compiled:
    """A step as SQL: its query and the shape of its output."""

    name: str
    query: exp.Expression
    shape: Shape


@dataclass
class _Input:
    """An input of the step being compiled: its alias, shape and FROM item."""

    alias: str
    shape: Shape
    item: exp.Expression


@dataclass
class _StepScope:
    """The inputs a step reads, its windows, and the aggregate calls it makes."""

    inputs: dict[str, _Input] = field(default_factory=dict)
    windows: dict[str, tuple[WindowSpec, s.Span]] = field(default_factory=dict)
    union: s.Call | None = None
    join: s.Call | None = None  # util.left_join($a, $b) and its kin
    # streams read through a library's table function, by name
    functions: dict[str, TableFunctionCall] = field(default_factory=dict)
    # the trees being built, innermost last: what a bare name (``a.b``) refers to
    building: list[dict[str, Entry]] = field(default_factory=list)


def compile_program(program: s.Program, catalog: Catalog,
                    libraries: dict[str, Library] | None = None) -> SelectText:
    """The SELECT (with its windows) that ``program`` means, for ``plan.binder``."""
    return _Compiler(program, catalog, {**BUILT_IN, **(libraries or {})}).run()


class _Compiler:
    def __init__(self, program: s.Program, catalog: Catalog, libraries: dict[str, Library]):
        self.program = program
        self.text = program.text
        self.catalog = catalog
        self.libraries = libraries
        self.steps: dict[str, _Compiled] = {}
        self.windows: dict[int, SourceWindow] = {}
        self.functions: dict[int, TableFunctionCall] = {}

    # -- errors --------------------------------------------------------------------------
    def error(self, message: str, span: s.Span) -> AnalysisError:
        return AnalysisError(message, self.text, Location.of_span(self.text, span.start,
                                                                  span.end))

    # -- the query -----------------------------------------------------------------------
    def run(self) -> SelectText:
        for step in self.program.steps:
            assert step.name is not None
            if step.name.lower() in (n.lower() for n in self.steps):
                msg = f"step {step.name!r} is defined twice; give each step its own name"
                raise self.error(msg, step.name_span)
            self.steps[step.name] = self.step(step, step.name)
        final = self.step(self.program.final, "result")
        form = OutputForm(self.program.final.form)
        return SelectText(self.text, final.query, form, self.windows, 0,
                          table_functions=self.functions)

    def step(self, step: s.Step, name: str) -> _Compiled:
        scope = _StepScope()
        predicates: list[s.Expr] = []
        for conj in _conjuncts(step.where):
            if isinstance(conj, s.Call) and self.function(conj).role is Role.WINDOW:
                self.window(conj, scope)
            elif isinstance(conj, s.Call) and self.function(conj).role is Role.UNION:
                if scope.union is not None:
                    msg = "a step takes one util.union; union all inputs in one call"
                    raise self.error(msg, conj.span)
                scope.union = conj
            elif isinstance(conj, s.Call) and self.function(conj).role is Role.TABLE:
                source, call = read_table_function(conj, self.function(conj), self.text)
                if source in scope.functions:
                    msg = f"${source} is read through two table functions; give it one"
                    raise self.error(msg, conj.span)
                scope.functions[source] = call
            elif isinstance(conj, s.Call) and self.function(conj).role is Role.JOIN:
                if scope.join is not None:
                    msg = "a step joins two inputs; join a third in the next step"
                    raise self.error(msg, conj.span)
                scope.join = conj
            else:
                predicates.append(conj)
        # a window's stream is read by the step (``where window.range($s, 10) select
        # o[n = agg.count()]``), unless the window is on an input of its union
        windowed = [s.Reference(source, (), span) for source, (_, span) in scope.windows.items()
                    if not self.in_union(source, scope)]
        windowed += [s.Reference(source, (), _span_of(call.loc))
                     for source, call in scope.functions.items() if source not in scope.windows]
        for ref in [*self.join_inputs(scope.join), *windowed, *self.references(step, predicates)]:
            self.add_input(ref, scope)
        bare = [i for i in step.tree.items
                if isinstance(i, s.SubTree) and i.ref.source == s.STEP_INPUT]
        if not scope.inputs and scope.union is not None:  # ``select facts[T]``: its union
            self.add_input(s.Reference(_UNION_OUTPUT, (), scope.union.span), scope)
        elif not scope.inputs and bare and self.steps:  # ``select [T]``: the step before
            self.add_input(s.Reference(list(self.steps)[-1], (), bare[0].span), scope)
        if not scope.inputs:
            msg = "the step reads no stream; name one, e.g. $s.a or $s[T]"
            raise self.error(msg, step.tree.span)
        copy = self.whole_copy(step, predicates, scope)
        if copy is not None:
            return _Compiled(name, copy.query.copy(), dict(copy.shape))
        return self.select(step, name, predicates, scope)

    def join_inputs(self, call: s.Call | None) -> list[s.Reference]:
        """The two inputs of a step's ``util.<kind>_join($a, $b)``, first the left one."""
        if call is None:
            return []
        if len(call.args) != 2 or not all(
                isinstance(a, s.Reference) and not a.path for a in call.args):
            msg = f"{call.shown()} takes two inputs, e.g. {call.shown()}($a, $b)"
            raise self.error(msg, call.span)
        return [a for a in call.args if isinstance(a, s.Reference)]

    def in_union(self, source: str, scope: _StepScope) -> bool:
        return scope.union is not None and any(
            isinstance(a, s.SubTree) and a.ref.source == source for a in scope.union.args)

    def whole_copy(self, step: s.Step, predicates: list[s.Expr],
                   scope: _StepScope) -> _Compiled | None:
        """A step that only copies its one input (``facts[$new[T]]``) is that input."""
        items = step.tree.items
        if predicates or len(items) != 1 or not isinstance(items[0], s.SubTree):
            return None
        ref = items[0].ref
        if ref.path or len(scope.inputs) != 1:
            return None
        if ref.source == s.STEP_INPUT:  # a bare T
            ref = s.Reference(next(iter(scope.inputs)), (), ref.span)
        if ref.source == _UNION_OUTPUT and scope.union is not None:
            return self.union(scope.union, scope)
        compiled = self.steps.get(ref.source)
        return compiled if compiled is not None and ref.source not in scope.windows else None

    # -- inputs --------------------------------------------------------------------------
    def references(self, step: s.Step, predicates: list[s.Expr]) -> list[s.Reference]:
        """The references a step makes, in the order written (union inputs excluded)."""
        found: list[s.Reference] = []

        def visit(node: object) -> None:
            if isinstance(node, s.Reference):
                if node.source != s.STEP_INPUT:
                    found.append(node)
            elif isinstance(node, s.SubTree):
                visit(node.ref)
            elif isinstance(node, s.Call):
                for a in node.args:
                    visit(a)
            elif isinstance(node, s.Binary):
                visit(node.left)
                visit(node.right)
            elif isinstance(node, s.Unary):
                visit(node.operand)
            elif isinstance(node, s.Tree):
                for item in node.items:
                    visit(item.value if isinstance(item, s.Assign) else item)

        for p in predicates:
            visit(p)
        visit(step.tree)
        return found

    def add_input(self, ref: s.Reference, scope: _StepScope) -> None:
        if ref.source in scope.inputs:
            return
        if ref.source == _UNION_OUTPUT and scope.union is not None:
            union = self.union(scope.union, scope)
            item = exp.Subquery(this=union.query, alias=exp.TableAlias(
                this=exp.to_identifier(_UNION_OUTPUT, quoted=True)))
            scope.inputs[ref.source] = _Input(_UNION_OUTPUT, union.shape,
                                              self.stamp(item, ref.span))
            return
        scope.inputs[ref.source] = self.source(ref.source, ref.span, scope)

    def source(self, name: str, span: s.Span, scope: _StepScope) -> _Input:
        """A step or catalog relation read under its own name (a window only on a stream)."""
        step = self.steps.get(name)
        if step is not None:
            if name in scope.windows:
                msg = (f"${name} is a step of this query; a window applies to a stream of "
                       "the catalog, so put it where that stream is read")
                raise self.error(msg, scope.windows[name][1])
            item = exp.Subquery(this=step.query.copy(), alias=exp.TableAlias(
                this=exp.to_identifier(name, quoted=True)))
            return _Input(name, step.shape, self.stamp(item, span))
        info = self.catalog.relation(name)
        if info is None:
            names = [*self.steps, *sorted([*(i.name for i in self.catalog.streams.values()),
                                           *(i.name for i in self.catalog.tables.values())])]
            known = ", ".join(f"${n}" for n in names) or "none"
            msg = f"unknown stream or step ${name}; known: {known}"
            raise self.error(msg, span)
        if not info.schema.fields:
            msg = (f"stream {name!r} is not connected: its attributes are unknown until its "
                   "feed sends a HEADER")
            raise self.error(msg, span)
        if (removed := self.catalog.removed(name)) is not None:
            msg = (f"stream {name!r} was removed by its feed ({removed}); only the "
                   "queries that kept it (on_remove='keep') read what it sent")
            raise self.error(msg, span)
        table = exp.Table(this=exp.to_identifier(name, quoted=True),
                          alias=exp.TableAlias(this=exp.to_identifier(name, quoted=True)))
        self.stamp(table, span)
        key = span.end - 1
        if name in scope.windows:
            spec, wspan = scope.windows[name]
            table.this.meta["end"] = key
            self.windows[key] = SourceWindow(spec, key, Location.of_span(
                self.text, wspan.start, wspan.end))
        call = scope.functions.get(name)
        if call is None:
            return _Input(name, shape_of(info.schema), table)
        table.this.meta["end"] = key
        self.functions[key] = call
        return _Input(name, shape_of(function_schema(call, info.schema, self.catalog)), table)

    def window(self, call: s.Call, scope: _StepScope) -> None:
        """``window.range($s, 1h)`` and its kin: the window ``$s`` is read through."""
        if not call.args or not isinstance(call.args[0], s.Reference) or call.args[0].path:
            msg = f"{call.shown()} takes the stream first, e.g. {call.shown()}($s, ...)"
            raise self.error(msg, call.span)
        source = call.args[0].source
        if source in scope.windows:
            msg = f"${source} has two windows in this step; give it one"
            raise self.error(msg, call.span)
        rest = call.args[1:]
        # arguments after the stream: the fewest and the most (None: any number of keys)
        want = {"range": (1, 2), "now": (0, 0), "unbounded": (0, 0), "rows": (1, None),
                "session": (1, None), "cut": (1, 2), "cut_rows": (1, 2), "cut_key": (1, None)}
        low, high = want[call.function]
        if len(rest) < low or (high is not None and len(rest) > high):
            most = "" if low == high else " or more" if high is None else f" or {high + 1}"
            msg = f"{call.shown()} takes {low + 1}{most} arguments, got {len(call.args)}"
            raise self.error(msg, call.span)
        spec: WindowSpec
        if call.function == "range":
            size = self.duration(rest[0])
            spec = RangeWindow(size, self.duration(rest[1]) if len(rest) > 1 else None)
        elif call.function == "now":
            spec = NowWindow()
        elif call.function == "unbounded":
            spec = UnboundedWindow()
        elif call.function == "rows":
            spec = RowsWindow(self.count(rest[0], "rows"), self.keys(rest[1:], source))
        elif call.function == "session":
            spec = SessionWindow(self.duration(rest[0]), self.keys(rest[1:], source))
        elif call.function == "cut":
            chunks = self.count(rest[1], "chunks") if len(rest) > 1 else 1
            spec = CutWindow(self.duration(rest[0]), None, chunks)
        elif call.function == "cut_rows":
            chunks = self.count(rest[1], "chunks") if len(rest) > 1 else 1
            spec = CountCutWindow(self.count(rest[0], "rows"), chunks)
        else:
            spec = KeyCutWindow(self.keys(rest, source))
        scope.windows[source] = (spec, call.span)

    def count(self, arg: s.Expr, what: str) -> int:
        """A window's positive whole number (of rows, of chunks)."""
        if not (isinstance(arg, s.Literal) and arg.kind is s.LiteralKind.INTEGER
                and int(arg.value) > 0):  # type: ignore[call-overload]
            msg = f"expected a positive whole number of {what}"
            raise self.error(msg, arg.span)
        return int(arg.value)  # type: ignore[call-overload]

    def keys(self, args: Sequence[s.Expr], source: str) -> tuple[str, ...]:
        """A window's partition keys: attributes of the windowed stream, ``$s.k``."""
        keys = []
        for arg in args:
            if not (isinstance(arg, s.Reference) and arg.source == source
                    and len(arg.path) == 1):
                msg = f"expected an attribute of ${source} to partition by, e.g. ${source}.k"
                raise self.error(msg, arg.span)
            keys.append(arg.path[0])
        return tuple(keys)

    def duration(self, arg: s.Expr) -> Duration:
        if isinstance(arg, s.Literal) and arg.kind is s.LiteralKind.DURATION:
            value: tuple[int, str] = arg.value  # type: ignore[assignment]
            amount, unit = value
            unit_micros(DURATION_UNITS[unit])
            return Duration(amount, DURATION_UNITS[unit])
        if isinstance(arg, s.Literal) and arg.kind is s.LiteralKind.INTEGER:
            return Duration(int(arg.value))  # type: ignore[call-overload]
        msg = "expected a duration such as 1h, 30s, 10min, 500ms, or a whole number"
        raise self.error(msg, arg.span)

    def union(self, call: s.Call, scope: _StepScope) -> _Compiled:
        """``util.union($a[T], $b[T], ...)``: UNION ALL; each attribute's type is fixed by
        its first input, the others cast to it.
        """
        if len(call.args) < 2:
            msg = "util.union takes two or more inputs, e.g. util.union($a[T], $b[T])"
            raise self.error(msg, call.span)
        parts: list[_Compiled] = []
        for arg in call.args:
            if not isinstance(arg, s.SubTree) or arg.ref.path:
                msg = "util.union takes whole inputs, written $name[T]"
                raise self.error(msg, arg.span)
            parts.append(self.whole_input(arg.ref, scope))
        first = parts[0]
        query = first.query
        for part, arg in zip(parts[1:], call.args[1:], strict=True):
            other = self.conform(part, first.shape, arg.span)  # type: ignore[union-attr]
            query = exp.Union(this=query, expression=other, distinct=False)
        return _Compiled(_UNION_OUTPUT, self.stamp(query, call.span), dict(first.shape))

    def whole_input(self, ref: s.Reference, scope: _StepScope) -> _Compiled:
        """A union's input as a query: a step's, or ``SELECT`` every attribute of a stream."""
        inner = _StepScope(windows=scope.windows)
        src = self.source(ref.source, ref.span, inner)
        if ref.source in self.steps:
            return _Compiled(ref.source, self.steps[ref.source].query.copy(), src.shape)
        cols = [self.stamp(exp.alias_(_column(ref.source, (n,)), n, quoted=True), ref.span)
                for n in src.shape]
        query = exp.Select(expressions=cols).from_(src.item, copy=False)
        return _Compiled(ref.source, self.stamp(query, ref.span), src.shape)

    def conform(self, part: _Compiled, shape: Shape, span: s.Span) -> exp.Expression:
        """``part``'s query with the attributes of ``shape``, in its order and types."""
        if set(part.shape) != set(shape):
            msg = (f"util.union: ${part.name} has attributes {', '.join(part.shape)}, the "
                   f"first input {', '.join(shape)}; the inputs need the same attributes")
            raise self.error(msg, span)
        if list(part.shape) == list(shape) and all(part.shape[n] == shape[n] for n in shape):
            return part.query
        cols = []
        for n, want in shape.items():
            got = part.shape[n]
            sql = _column("u", (n,))
            if got != want:
                converted = (cast(sql, got, want) if isinstance(got, ApasType)
                             and isinstance(want, ApasType) else None)
                if converted is None:
                    msg = (f"util.union: attribute {n!r} is {_shown(want)} in the first input "
                           f"but {_shown(got)} in ${part.name}, and does not convert to it")
                    raise self.error(msg, span)
                sql = converted
            cols.append(self.parse(f"{sql} AS {_quote(n)}", span))
        sub = exp.Subquery(this=part.query, alias=exp.TableAlias(this=exp.to_identifier(
            "u", quoted=True)))
        return self.stamp(exp.Select(expressions=cols).from_(sub, copy=False), span)

    # -- one step's SELECT ---------------------------------------------------------------
    def select(self, step: s.Step, name: str, predicates: list[s.Expr],
               scope: _StepScope) -> _Compiled:
        inputs = list(scope.inputs.values())
        conditions = []
        for p in predicates:
            value = self.expr(p, scope)
            if value.type is not ApasType.BOOLEAN:
                found = _shown(value.shape or value.type)
                msg = f"a where-condition must be BOOLEAN, found {found}"
                raise self.error(msg, p.span)
            if value.aggregates:
                msg = ("an aggregate is not allowed in a where-clause; compute it in a step "
                       "and filter that step's output in the next one")
                raise self.error(msg, p.span)
            conditions.append(self.parse(value.typed.sql, value.span))
        outputs = self.tree_entries(step.tree, scope)
        leaves = list(_leaves(outputs))
        aggregating = any(v.aggregates for v in leaves)
        keys: list[Value] = []
        if aggregating:
            for v in leaves:
                if v.aggregates and v.reads:
                    msg = (f"this attribute mixes an aggregate with {', '.join(v.reads)} "
                           "outside one; give it its own attribute, so the step groups by it")
                    raise self.error(msg, v.span)
                if not v.aggregates and v.reads and v.typed.sql not in (
                        k.typed.sql for k in keys):
                    keys.append(v)
        columns = [self.stamp(exp.alias_(self.parse(_entry_sql(e), _entry_span(e)), n,
                                         quoted=True), _entry_span(e))
                   for n, e in outputs.items()]
        query = exp.Select(expressions=columns).from_(inputs[0].item, copy=False)
        if scope.join is not None:
            query = self.join(query, step, inputs, conditions, scope.join)
        else:
            for other in inputs[1:]:
                query = query.join(other.item, copy=False)
            if conditions:
                query = query.where(*conditions, copy=False)
        if keys:
            query = query.group_by(*[self.parse(k.typed.sql, k.span) for k in keys],
                                   copy=False)
        shape = {n: _entry_shape(e) for n, e in outputs.items()}
        return _Compiled(name, self.stamp(query, step.span), shape)

    def join(self, query: exp.Select, step: s.Step, inputs: list[_Input],
             conditions: list[exp.Expr], call: s.Call) -> exp.Select:
        """``FROM a <kind> JOIN b ON <every condition of the where-clause>``."""
        kind = call.function.removesuffix("_join")
        left, right = (a.source for a in self.join_inputs(call))
        if len(inputs) != 2:
            names = ", ".join(f"${i.alias}" for i in inputs)
            msg = (f"{call.shown()} joins ${left} and ${right}, but the step reads {names}; "
                   "join the others in a step of their own")
            raise self.error(msg, call.span)
        if not conditions:
            msg = (f"{call.shown()} needs a condition between ${left} and ${right} in the "
                   f"where-clause, e.g. ${left}.k == ${right}.k")
            raise self.error(msg, call.span)
        if kind in ("semi", "anti"):
            for ref in self.references(step, []):
                if ref.source == right:
                    msg = (f"{call.shown()} keeps the elements of ${left} only; "
                           f"${right}'s attributes are not in its result")
                    raise self.error(msg, ref.span)
        on = conditions[0]
        for c in conditions[1:]:
            on = exp.and_(on, c, copy=False)
        join_type = {"semi": "left semi", "anti": "left anti"}.get(kind, kind)
        return query.join(inputs[1].item, on=on, join_type=join_type, copy=False)

    def step_input(self, scope: _StepScope, span: s.Span) -> str:
        """What a bare ``T`` copies: the step's one input."""
        if len(scope.inputs) != 1:
            named = ", ".join(f"${n}" for n in scope.inputs)
            msg = (f"T is the whole tree of the step's input, and this step reads {named}; "
                   "copy one of them: $name[T]")
            raise self.error(msg, span)
        return next(iter(scope.inputs))

    def tree_entries(self, tree: s.Tree, scope: _StepScope) -> dict[str, Entry]:
        """The attributes a tree defines, nested by path, in the order written."""
        out: dict[str, Entry] = {}
        scope.building.append(out)
        try:
            self.build(tree, scope, out)
        finally:
            scope.building.pop()
        return out

    def build(self, tree: s.Tree, scope: _StepScope, out: dict[str, Entry]) -> None:
        for item in tree.items:
            if isinstance(item, s.SubTree) and item.ref.source == s.STEP_INPUT:
                item = s.SubTree(s.Reference(self.step_input(scope, item.span), (), item.span),
                                 item.span)
            if isinstance(item, s.SubTree):
                value = self.reference(item.ref, scope)
                if item.ref.path:
                    self.define(out, (item.ref.path[-1],), value, item.span)
                else:
                    for attr, sub in (value.shape or {}).items():
                        self.define(out, (attr,), self.reference(
                            s.Reference(item.ref.source, (attr,), item.span), scope, sub),
                            item.span)
                continue
            if isinstance(item.value, s.Tree) and item.value.items:
                # a structure's attributes each in place, so later names reach into it
                entries = self.tree_entries(item.value, scope)
                for path in _paths(entries):
                    leaf: Entry = entries
                    for part in path:
                        assert isinstance(leaf, dict)
                        leaf = leaf[part]
                    assert isinstance(leaf, Value)
                    self.define(out, (*item.path, *path), leaf, item.span)
                continue
            self.define(out, item.path, self.expr(item.value, scope), item.span)

    def local(self, e: s.Local, scope: _StepScope) -> Value:
        """A bare name: an attribute defined before it in the tree being built, or in a tree
        enclosing that one (the innermost first).
        """
        for tree in reversed(scope.building):
            entry: Entry | None = tree
            for part in e.path:
                entry = entry.get(part) if isinstance(entry, dict) else None
            if isinstance(entry, Value):
                return replace(entry, span=e.span)
            if isinstance(entry, dict) and entry:
                leaves = list(_leaves(entry))
                return Value(Typed(_entry_sql(entry), ApasType.TREE), e.span,
                             _entry_shape(entry),  # type: ignore[arg-type]
                             any(v.aggregates for v in leaves),
                             tuple(r for v in leaves for r in v.reads))
        name = ".".join(e.path)
        if not scope.building:
            msg = (f"{name!r} names no attribute here: a name without $ is an attribute of the "
                   f"tree being built; an input's attribute is written $s.{name}")
            raise self.error(msg, e.span)
        defined = ", ".join(".".join(p) for p in _paths(scope.building[-1])) or "none"
        msg = (f"unknown attribute {name!r} of the tree being built (defined before it: "
               f"{defined}); an input's attribute is written $s.{name}")
        raise self.error(msg, e.span)

    def define(self, out: dict[str, Entry], path: tuple[str, ...], value: Value,
               span: s.Span) -> None:
        node = out
        for i, part in enumerate(path):
            last = i == len(path) - 1
            existing = node.get(part)
            if last:
                if existing is not None:
                    msg = (f"attribute {'.'.join(path)!r} is defined twice; an attribute's "
                           "definition (and type) is its first")
                    raise self.error(msg, span)
                node[part] = value
            elif existing is None:
                child: dict[str, Entry] = {}
                node[part] = child
                node = child
            elif isinstance(existing, dict):
                node = existing
            else:
                msg = f"attribute {'.'.join(path[: i + 1])!r} is already a value, not a tree"
                raise self.error(msg, span)

    # -- expressions ---------------------------------------------------------------------
    def expr(self, e: s.Expr, scope: _StepScope) -> Value:
        if isinstance(e, s.Literal):
            return self.literal(e)
        if isinstance(e, s.Reference) and not e.path:
            msg = (f"{e.shown()} is a whole input, not a value; copy it as {e.shown()}[T] or "
                   f"name an attribute, e.g. {e.shown()}.a")
            raise self.error(msg, e.span)
        if isinstance(e, s.Reference):
            return self.reference(e, scope)
        if isinstance(e, s.Local):
            return self.local(e, scope)
        if isinstance(e, s.SubTree):
            if not e.ref.path:  # a whole input as one tree
                whole = self.reference(e.ref, scope)
                parts: dict[str, Entry] = {
                    n: self.reference(s.Reference(e.ref.source, (n,), e.span), scope)
                    for n in whole.shape or {}}
                return Value(Typed(_entry_sql(parts), ApasType.TREE), e.span,
                             whole.shape, False, whole.reads)
            return self.reference(e.ref, scope)
        if isinstance(e, s.Tree):
            entries = self.tree_entries(e, scope)
            leaves = list(_leaves(entries))
            return Value(Typed(_entry_sql(entries), ApasType.TREE), e.span,
                         _entry_shape(entries),  # type: ignore[arg-type]
                         any(v.aggregates for v in leaves),
                         tuple(r for v in leaves for r in v.reads))
        if isinstance(e, s.Binary | s.Unary):
            args = [e.left, e.right] if isinstance(e, s.Binary) else [e.operand]
            values = [self.expr(a, scope) for a in args]
            try:
                typed = apply(e.op, *[v.typed for v in values])
            except OperatorTypeError as err:
                raise self.error(str(err), e.span) from None
            return Value(typed, e.span, None, any(v.aggregates for v in values),
                         tuple(r for v in values for r in v.reads))
        return self.call(e, scope)

    def literal(self, e: s.Literal) -> Value:
        kind = e.kind
        if kind is s.LiteralKind.INTEGER:
            return Value(Typed(str(e.value), ApasType.INTEGER), e.span)
        if kind is s.LiteralKind.DOUBLE:
            return Value(Typed(f"CAST({e.value!r} AS DOUBLE)", ApasType.DOUBLE), e.span)
        if kind is s.LiteralKind.BOOLEAN:
            return Value(Typed("TRUE" if e.value else "FALSE", ApasType.BOOLEAN), e.span)
        if kind is s.LiteralKind.STRING:
            return Value(Typed(exp.Literal.string(str(e.value)).sql(dialect="spark"),
                               ApasType.STRING), e.span)
        msg = "a duration is an argument of a window function, not a value"
        raise self.error(msg, e.span)

    def reference(self, ref: s.Reference, scope: _StepScope,
                  known: ApasType | Shape | None = None) -> Value:
        """``$s.a.b``: its type from the input's shape (``known``: already looked up)."""
        node = scope.inputs.get(ref.source)
        if node is None:
            msg = f"${ref.source} is not an input of this step"
            raise self.error(msg, ref.span)
        found: ApasType | Shape | None = node.shape if known is None else known
        if known is None:
            for i, part in enumerate(ref.path):
                assert isinstance(found, dict)
                hit = _lookup(found, part)
                if hit is None:
                    where = "$" + ".".join((ref.source, *ref.path[:i]))
                    msg = (f"unknown attribute {part!r} of {where}; attributes: "
                           f"{', '.join(found) or 'none'}")
                    raise self.error(msg, ref.span)
                part_name, found = hit
                ref = s.Reference(ref.source, (*ref.path[:i], part_name, *ref.path[i + 1:]),
                                  ref.span)
                if i < len(ref.path) - 1 and not isinstance(found, dict):
                    msg = (f"{'$' + '.'.join((ref.source, *ref.path[: i + 1]))} is "
                           f"{_shown(found)}, not a tree; it has no attribute "
                           f"{ref.path[i + 1]!r}")
                    raise self.error(msg, ref.span)
        if not ref.path:
            return Value(Typed("", ApasType.TREE), ref.span, found  # type: ignore[arg-type]
                         if isinstance(found, dict) else None, False, (ref.shown(),))
        sql = _column(node.alias, ref.path)
        if isinstance(found, dict):
            return Value(Typed(sql, ApasType.TREE), ref.span, found, False, (ref.shown(),))
        if found is None:
            msg = f"{ref.shown()} has a Spark type the language has no type for"
            raise self.error(msg, ref.span)
        return Value(Typed(sql, found), ref.span, None, False, (ref.shown(),))

    def function(self, call: s.Call) -> LibraryFunction:
        """The library function ``call`` names; an error lists what exists."""
        library = self.libraries.get(call.library.lower())
        if library is None:
            known = ", ".join(sorted(self.libraries))
            msg = f"unknown library {call.library!r} in {call.shown()}; libraries: {known}"
            raise self.error(msg, call.span)
        fn = library.functions.get(call.function.lower())
        if fn is None and library.prefix == "agg":
            uda = self.catalog.aggregates.get(call.function.lower())
            if uda is not None:
                return LibraryFunction("agg", uda.name, Role.AGGREGATE, uda.signature)
        if fn is None:
            names = [*library.functions]
            if library.prefix == "agg":
                names += [a for a in self.catalog.aggregates if a not in names]
            msg = (f"unknown function {call.shown()!r}; library {library.prefix!r} has "
                   f"{', '.join(sorted(names))}")
            raise self.error(msg, call.span)
        return fn

    def call(self, call: s.Call, scope: _StepScope) -> Value:
        value = self.called(call, scope)
        found: ApasType | Shape = value.shape if value.shape is not None else value.type
        for i, part in enumerate(call.path):
            hit = _lookup(found, part) if isinstance(found, dict) else None
            if hit is None:
                where = call.shown() + "(...)" + "".join(f".{p}" for p in call.path[:i])
                what = (f"attributes: {', '.join(found)}" if isinstance(found, dict)
                        else f"it is {_shown(found)}, not a tree")
                msg = f"unknown attribute {part!r} of {where}; {what}"
                raise self.error(msg, call.span)
            found = hit[1]
        if not call.path:
            return value
        sql = value.typed.within(100) + "".join(f".{_quote(p)}" for p in call.path)
        if isinstance(found, dict):
            return Value(Typed(sql, ApasType.TREE), call.span, found, value.aggregates,
                         value.reads)
        return Value(Typed(sql, found), call.span, None, value.aggregates, value.reads)

    def called(self, call: s.Call, scope: _StepScope) -> Value:
        fn = self.function(call)
        if fn.role is Role.AGGREGATE:
            return self.aggregate(call, fn, scope)
        if fn.role is not Role.SCALAR:
            msg = (f"{call.shown()} shapes a step's input; call it in the where-clause, "
                   f"e.g. where {call.shown()}(...) select ...")
            raise self.error(msg, call.span)
        if len(call.args) != len(fn.params):
            msg = f"{call.shown()} takes {len(fn.params)} arguments, got {len(call.args)}"
            raise self.error(msg, call.span)
        values = [self.expr(a, scope) for a in call.args]
        sqls = [self.argument(v, want, call, i) for i, (v, want) in
                enumerate(zip(values, fn.params, strict=True))]
        assert fn.returns is not None
        return Value(Typed(f"{fn.spark_name}({', '.join(sqls)})", fn.returns), call.span,
                     None, any(v.aggregates for v in values),
                     tuple(r for v in values for r in v.reads))

    def argument(self, value: Value, want: ApasType, call: s.Call, i: int) -> str:
        converted = cast(value.typed.sql, value.type, want)
        if converted is None:
            msg = (f"type error: argument {i + 1} of {call.shown()} is {_shown(value.type)}, "
                   f"which does not convert to {want.value}")
            raise self.error(msg, value.span)
        return converted

    def aggregate(self, call: s.Call, fn: LibraryFunction, scope: _StepScope) -> Value:
        values = [self.expr(a, scope) for a in call.args]
        for v in values:
            if v.aggregates:
                msg = "aggregates cannot be nested"
                raise self.error(msg, v.span)
        name = fn.name.lower()
        if fn.library != "agg":  # a user library's aggregate class
            return self.user_aggregate(call, self.catalog.aggregates[fn.spark_name], values)
        uda = self.catalog.aggregates.get(name)
        if uda is not None and name not in BUILT_IN["agg"].functions:
            return self.user_aggregate(call, uda, values)
        if name == "count":
            if len(values) > 1:
                msg = "agg.count takes at most one argument"
                raise self.error(msg, call.span)
            sql = f"count({values[0].typed.sql if values else '*'})"
            return Value(Typed(sql, ApasType.INTEGER), call.span, None, True)
        if name == "count_distinct":  # SQL's count(DISTINCT x): any value but a tree
            if len(values) != 1 or values[0].type is ApasType.TREE:
                msg = ("agg.count_distinct takes one value (not a tree), got "
                       f"{', '.join(_shown(v.shape or v.type) for v in values) or 'none'}")
                raise self.error(msg, call.span)
            sql = f"count(DISTINCT {values[0].typed.sql})"
            return Value(Typed(sql, ApasType.INTEGER), call.span, None, True)
        if len(values) != 1:
            msg = f"{call.shown()} takes one argument, got {len(values)}"
            raise self.error(msg, call.span)
        (v,) = values
        allowed = _AGG_ARGS[name]
        target = next((t for t in allowed if t is v.type), None) or next(
            (t for t in allowed if cast("x", v.type, t) is not None), None)
        if target is None or v.type is ApasType.TREE:
            msg = (f"type error: {call.shown()} takes {' or '.join(t.value for t in allowed)}, "
                   f"found {_shown(v.shape or v.type)}")
            raise self.error(msg, v.span)
        arg = cast(v.typed.sql, v.type, target)
        assert arg is not None
        if name == "stats":  # one aggregate node, four partials (plan/bind_aggregates.py)
            shape: Shape = {"min": target, "max": target, "median": ApasType.DOUBLE,
                            "avg": ApasType.DOUBLE}
            return Value(Typed(f"stats({arg})", ApasType.TREE), call.span, shape, True)
        result = ApasType.DOUBLE if name == "avg" or name in DERIVED_AGGREGATES else target
        return Value(Typed(f"{name}({arg})", result), call.span, None, True)

    def user_aggregate(self, call: s.Call, uda: UserAggregate, values: list[Value]) -> Value:
        if len(values) != len(uda.arg_types):
            msg = f"{call.shown()} takes {len(uda.arg_types)} arguments, got {len(values)}"
            raise self.error(msg, call.span)
        sqls = []
        for i, (v, dtype) in enumerate(zip(values, uda.arg_types, strict=True)):
            want = apas_type(dtype)
            converted = self.argument(v, want, call, i) if want is not None else v.typed.sql
            # a number the binder widens to the declared type itself, as for SQL (the same
            # value), so the two languages' calls are one operator
            numeric = want in (ApasType.INTEGER, ApasType.DOUBLE) and v.type is not ApasType.STRING
            sqls.append(v.typed.sql if numeric else converted)
        result = apas_type(uda.return_type) or ApasType.STRING
        return Value(Typed(f"{_quote(uda.name)}({', '.join(sqls)})", result), call.span,
                     None, True)

    # -- SQL text ------------------------------------------------------------------------
    def parse(self, sql: str, span: s.Span) -> exp.Expr:
        return self.stamp(sqlglot.parse_one(sql, read="spark"), span)

    def stamp(self, node: _Node, span: s.Span) -> _Node:
        """Point the nodes of ``node`` that point nowhere yet at ``span`` of the APAS text,
        so the binder's errors underline the user's text.
        """
        for n in node.walk():
            if "start" not in n.meta:
                n.meta["start"] = span.start
                n.meta["end"] = span.end - 1
        return node


Entry = Value | dict[str, "Entry"]
_Node = TypeVar("_Node", bound=exp.Expr)


def function_schema(call: TableFunctionCall, schema: StructType, catalog: Catalog
                    ) -> StructType:
    """What a table function emits over a stream of ``schema``: its partition attributes,
    then its columns (the binder checks both; an unknown one is left out here).
    """
    fn = catalog.table_functions.get(call.function.lower())
    by_name = {f.name.lower(): f for f in schema.fields}
    keys = [by_name[k.lower()] for k in call.partition_by if k.lower() in by_name]
    return StructType([*keys, *(fn.columns.fields if fn is not None else [])])


def _span_of(loc: Location) -> s.Span:
    return s.Span(loc.start, loc.end)


def shape_of(schema: StructType) -> Shape:
    """The attribute tree of a Spark schema (None marks a type the language has not)."""
    from pyspark.sql.types import StructType

    out: Shape = {}
    for f in schema.fields:
        out[f.name] = (shape_of(f.dataType) if isinstance(f.dataType, StructType)
                       else apas_type(f.dataType))  # type: ignore[assignment]
    return out


def _lookup(shape: Shape, name: str) -> tuple[str, ApasType | Shape] | None:
    if name in shape:
        return name, shape[name]
    for k, v in shape.items():
        if k.lower() == name.lower():
            return k, v
    return None


def _leaves(entries: dict[str, Entry]):  # noqa: ANN202 - an iterator of Values
    for e in entries.values():
        if isinstance(e, dict):
            yield from _leaves(e)
        else:
            yield e


def _paths(entries: dict[str, Entry], at: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The paths of a tree's leaves, in the order defined."""
    out: list[tuple[str, ...]] = []
    for name, e in entries.items():
        out.extend(_paths(e, (*at, name)) if isinstance(e, dict) else [(*at, name)])
    return out


def _entry_sql(e: Entry) -> str:
    if isinstance(e, dict):
        fields = ", ".join(f"{exp.Literal.string(n).sql()}, {_entry_sql(v)}"
                           for n, v in e.items())
        return f"named_struct({fields})"
    return e.typed.sql


def _entry_span(e: Entry) -> s.Span:
    if isinstance(e, dict):
        spans = [_entry_span(v) for v in e.values()]
        return s.Span(min(x.start for x in spans), max(x.end for x in spans))
    return e.span


def _entry_shape(e: Entry) -> ApasType | Shape:
    if isinstance(e, dict):
        return {n: _entry_shape(v) for n, v in e.items()}
    return e.shape if e.shape is not None else e.type


def _conjuncts(e: s.Expr | None) -> list[s.Expr]:
    if e is None:
        return []
    if isinstance(e, s.Binary) and e.op is s.Operator.AND:
        return [*_conjuncts(e.left), *_conjuncts(e.right)]
    return [e]


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _column(alias: str, path: tuple[str, ...]) -> str:
    return ".".join(_quote(p) for p in (alias, *path))


def _shown(t: ApasType | Shape | None) -> str:
    if isinstance(t, dict):
        return "a tree [" + ", ".join(t) + "]"
    return t.value if t is not None else "an unsupported type"
