"""A library's table function in a StreamAPAS where-clause: ``geo.track($s, $s.k, 0.5)``.

Like a window function, it names the stream the step reads through it: after
``where window.cut($calls, 5) and tel.dedup($calls, $calls.caller, 'start', 1, 10)`` the
step's ``$calls`` is what the function emits (its partition attributes, then its columns),
as SQL's ``FROM tel__dedup(TABLE calls [CUT ON t BY 5] PARTITION BY caller, 'start', 1, 10)
AS calls``. The attributes of the stream after it are its partition keys; the literals
after those, its constructor's arguments.
"""

from __future__ import annotations

from sparkcq.errors import AnalysisError, Location
from sparkcq.language.apas import syntax as s
from sparkcq.language.apas.libraries import LibraryFunction
from sparkcq.language.sql.statements import TableFunctionCall
from sparkcq.model.time import Duration

#: the language's duration units as SQL's
DURATION_UNITS = {"ms": "MILLISECONDS", "s": "SECONDS", "m": "MINUTES", "min": "MINUTES",
                  "h": "HOURS", "d": "DAYS"}


def read_table_function(call: s.Call, fn: LibraryFunction, text: str
                        ) -> tuple[str, TableFunctionCall]:
    """The stream ``call`` reads and the call as the binder takes it."""
    def error(message: str, span: s.Span) -> AnalysisError:
        return AnalysisError(message, text, Location.of_span(text, span.start, span.end))

    first = call.args[0] if call.args else None
    if not isinstance(first, s.Reference) or first.path:
        msg = f"{call.shown()} takes the stream first, e.g. {call.shown()}($s, ...)"
        raise error(msg, call.span)
    source = first.source
    rest = list(call.args[1:])
    keys: list[str] = []
    while rest and isinstance(ref := rest[0], s.Reference):
        rest.pop(0)
        if ref.source != source or len(ref.path) != 1:
            msg = (f"expected an attribute of ${source} to partition by, e.g. ${source}.k, "
                   "before the function's other arguments")
            raise error(msg, ref.span)
        keys.append(ref.path[0])
    values = []
    for arg in rest:
        value = _literal(arg)
        if value is _NOT_A_LITERAL:
            msg = (f"{call.shown()}'s arguments after the stream and its partition attributes "
                   "are constants: numbers, strings, true, false or durations such as 5s")
            raise error(msg, arg.span)
        values.append(value)
    return source, TableFunctionCall(
        fn.spark_name, tuple(keys), tuple(values),
        Location.of_span(text, call.span.start, call.span.end),
        Location.of_span(text, call.span.start, call.span.end))


_NOT_A_LITERAL = object()


def _literal(arg: s.Expr) -> object:
    if isinstance(arg, s.Unary) and arg.op is s.Operator.NEG:
        inner = _literal(arg.operand)
        return -inner if isinstance(inner, int | float) and not isinstance(inner, bool) \
            else _NOT_A_LITERAL
    if not isinstance(arg, s.Literal):
        return _NOT_A_LITERAL
    if arg.kind is s.LiteralKind.DURATION:
        value: tuple[int, str] = arg.value  # type: ignore[assignment]
        return Duration(value[0], DURATION_UNITS[value[1]])
    return arg.value
