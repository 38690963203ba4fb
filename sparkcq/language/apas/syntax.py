"""The StreamAPAS query language as parsed, before it meets the catalog.

Every node carries its span: character offsets ``[start, end)`` into the statement text the
user wrote (a ``CREATE QUERY ... LANGUAGE apas AS '...'`` statement, or the bare query
text), so any later error can underline its place.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class Span:
    """Offsets ``[start, end)`` into the statement text."""

    start: int
    end: int


class Operator(Enum):
    """The operators of the language's operator table (docs/apas.md)."""

    EQ = "=="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"
    MOD = "%"
    AND = "AND"
    OR = "OR"
    XOR = "XOR"
    NOT = "NOT"
    NEG = "NEG"  # unary minus

    @property
    def shown(self) -> str:
        """How an error names it."""
        return "-" if self is Operator.NEG else self.value


class LiteralKind(Enum):
    """What a literal's text is."""

    INTEGER = "INTEGER"
    DOUBLE = "DOUBLE"
    BOOLEAN = "BOOLEAN"
    STRING = "STRING"
    DURATION = "DURATION"  # ``1h``: only as a window function's argument


@dataclass(frozen=True)
class Literal:
    """A constant: ``1``, ``2.5``, ``true``, ``'abc'``, ``1h``."""

    kind: LiteralKind
    value: object  # int, float, bool, str, or (amount, unit) for a duration
    span: Span


@dataclass(frozen=True)
class Reference:
    """``$s.a.b``: attribute ``a.b`` of stream or step ``s`` (``path`` empty: ``s`` itself)."""

    source: str
    path: tuple[str, ...]
    span: Span

    def shown(self) -> str:
        """As the user wrote it."""
        return "$" + ".".join((self.source, *self.path))


@dataclass(frozen=True)
class Local:
    """``a.b`` with no ``$``: attribute ``a.b`` of the tree being built, defined before it in
    that tree or an enclosing one (``O[a.b = [z = 2], w = a.b.z * $I.b]``).
    """

    path: tuple[str, ...]
    span: Span


#: the source of a bare ``T`` (``o[T]``): the step's one input, whichever it is
STEP_INPUT = ""


@dataclass(frozen=True)
class SubTree:
    """``$s.a[T]``: the whole attribute tree of ``s`` below ``a`` (of ``s`` if no path); a
    bare ``T`` (source ``STEP_INPUT``): the whole tree of the step's one input.
    """

    ref: Reference
    span: Span


@dataclass(frozen=True)
class Call:
    """``library.function(args)``."""

    library: str
    function: str
    args: tuple[Expr, ...]
    span: Span
    path: tuple[str, ...] = ()  # ``agg.stats(x).median``: a field of the tree it returns

    def shown(self) -> str:
        """``library.function``."""
        return f"{self.library}.{self.function}"


@dataclass(frozen=True)
class Binary:
    """``left OP right``."""

    op: Operator
    left: Expr
    right: Expr
    span: Span


@dataclass(frozen=True)
class Unary:
    """``NOT x`` or ``-x``."""

    op: Operator
    operand: Expr
    span: Span


@dataclass(frozen=True)
class Assign:
    """``a.b = expr`` in a tree: defines attribute ``a.b``."""

    path: tuple[str, ...]
    value: Expr
    span: Span


@dataclass(frozen=True)
class Tree:
    """``[item, ...]``: a tree of attributes (a step's output, or an anonymous structure)."""

    items: tuple[Assign | SubTree, ...]
    span: Span


Expr = Literal | Reference | Local | SubTree | Call | Binary | Unary | Tree


@dataclass(frozen=True)
class Step:
    """``[where COND] select NAME[...]``; the final step has no name, and may give an output
    form (``select istream [...]``; by default the intervals).
    """

    name: str | None
    where: Expr | None
    tree: Tree
    span: Span
    name_span: Span
    form: str = "intervals"


@dataclass(frozen=True)
class Program:
    """A whole query: its named steps, then the step whose tree is the output."""

    steps: tuple[Step, ...]
    final: Step
    text: str  # the statement text the spans point into
