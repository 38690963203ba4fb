"""EXPLAIN GLOBAL: the shared DAG as text and as Graphviz DOT."""

from __future__ import annotations

import re

from sparkcq.model.time import show_instant
from sparkcq.plan.labels import user_labels
from sparkcq.plan.nodes import PlanNode
from sparkcq.runtime.global_plan import GlobalPlan, OperatorStats
from sparkcq.runtime.operators.base import Operator
from sparkcq.runtime.operators.join import JoinOperator
from sparkcq.runtime.operators.table import TableOperator


def explain_global_text(plan: GlobalPlan) -> str:
    """One line per operator: id, kind, what it does, inputs, users, state and work."""
    ids = {node: i for i, node in enumerate(plan.ops)}
    labels = user_labels(plan.ops)
    lines = []
    for node, op in plan.ops.items():
        inputs = ", ".join(f"#{ids[c]}" for c in node.children)
        users = ", ".join(sorted(plan.users.get(node, set())))
        lines.append(
            f"#{ids[node]} {labels.get(node) or node.label()}  [{node.kind.value}]  "
            f"<- [{inputs}]  "
            f"refs={plan.refs[node]}  queries=[{users}]  state_rows={op.state_rows}  "
            f"rows/cycle={_rows(plan, node)}  "
            f"plan_ms/cycle={plan.stats.get(node, OperatorStats()).plan_seconds * 1e3:.1f}"
            + (f"  instances={op.live_instances}" if op.live_instances is not None else "")
            + _versions(op) + _shedding(op))
    for n, family in enumerate(plan.families.fused_families()):
        members = ", ".join(f"#{ids[m]}" for m in family.members)
        calls = len(family.op.aggs) if family.op is not None else 0
        keys = ", ".join(family.key_sqls) or "()"
        rows = sum(op.state_rows for op in family.operators())
        instances = sum(op.live_instances or 0 for op in family.operators())
        lines.append(f"family F{n} <- [#{ids[family.base]}] BY {keys}: {calls} distinct "
                     f"aggregates computed once for members [{members}]  state_rows={rows}"
                     + (f"  instances={instances}" if instances else ""))
    return "\n".join(lines)


def explain_global_dot(plan: GlobalPlan) -> str:
    """The shared DAG for Graphviz: operators as boxes, queries as ellipses reading them.

    Node ids are generated (``n3``, ``q0``), never made from user names, and every label is
    quoted by ``_quote``, so names and predicates with quotes, backslashes, brackets or line
    breaks still give valid DOT that shows them as written.
    """
    ids = {node: i for i, node in enumerate(plan.ops)}
    labels = user_labels(plan.ops)
    roots: dict[str, int] = {}
    out = ["digraph sparkcq {", "  rankdir=BT;", "  node [shape=box, fontname=Helvetica];"]
    for node, op in plan.ops.items():
        users = sorted(plan.users.get(node, set()))
        label = (f"#{ids[node]} {labels.get(node) or node.label()}\nrefs={plan.refs[node]} "
                 f"state_rows={op.state_rows} rows/cycle={_rows(plan, node)}"
                 + (f" instances={op.live_instances}" if op.live_instances is not None else ""))
        shared = ", style=filled, fillcolor=lightblue" if len(users) > 1 else ""
        out.append(f"  n{ids[node]} [label={_quote(label)}{shared}];")
        for child in node.children:
            out.append(f"  n{ids[child]} -> n{ids[node]};")
        for query in users:
            if not any(node in parent.children and query in plan.users.get(parent, set())
                       for parent in plan.ops):
                roots[query] = ids[node]
    for n, (query, node_id) in enumerate(sorted(roots.items())):
        out.append(f"  q{n} [label={_quote(query)}, shape=ellipse];")
        out.append(f"  n{node_id} -> q{n};")
    out.append("}")
    return "\n".join(out)


def _versions(op: Operator) -> str:
    """Which version of a table's rows it serves; where a join switched to a table's rows
    that replaced others while it ran (docs/semantics.md, "Tables that change").
    """
    if isinstance(op, TableOperator):
        return f"  version={op.version}"
    if isinstance(op, JoinOperator) and op.tables:
        kind = op.node.time_kind
        return "  tables=" + ", ".join(f"{t} v{v} from {show_instant(at, kind)}"
                                       for t, v, at in op.tables)
    return ""


def _shedding(op: Operator) -> str:
    """A shedding join's z and, per input as the prober side, the partners it met and
    skipped and its two highest-priority lag buckets (docs/shedding.md).
    """
    report = op.shedding_report()
    if report is None:
        return ""
    sides = []
    for name, side in zip(("left", "right"), report["inputs"], strict=True):
        ranked = sorted(range(len(side["priorities"])), key=lambda j: -side["priorities"][j])
        top = f" top buckets {ranked[:2]}" if any(side["priorities"]) else ""
        sides.append(f"{name} met {side['processed']} skipped {side['shed']}{top}")
    control = "control=ratio" if report["control"] == "ratio" else \
        f"budget={report['budget_seconds']:g}s"
    return f"  shedding z={report['z']:.2f} {control}: " + "; ".join(sides)


def _rows(plan: GlobalPlan, node: PlanNode) -> str:
    """Rows of the last cycle and the average; ``fused`` when its queries' records came
    from its family's result, so its own output was never built; ``inline`` when its
    output was computed inside its consumers' plans and not counted (``RowCounting``).
    """
    stats = plan.stats.get(node, OperatorStats())
    if stats.fused:
        return "fused"
    if stats.rows_out is None:
        return "inline"
    avg = stats.rows_total / stats.cycles if stats.cycles else 0.0
    return f"{stats.rows_out} (avg {avg:.0f})"


def _quote(text: str) -> str:
    r"""A DOT string showing ``text`` as written, each line break a DOT ``\n``.

    Inside DOT quotes only ``\"`` is an escape, but label strings give a backslash before
    ``n``, ``l``, ``N``, ``G`` ... a meaning, so every backslash is doubled; other control
    characters (which Graphviz rejects or drops) become spaces.

    >>> print(_quote('a "b"\\n[c]\nd'))
    "a \"b\"\\n[c]\nd"
    """
    body = text.replace("\\", "\\\\").replace('"', '\\"')
    body = re.sub(r"\r\n|\r|\n", r"\\n", body)
    body = "".join(" " if ord(ch) < 32 or ch == "\x7f" else ch for ch in body)
    return f'"{body}"'
