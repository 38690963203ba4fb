"""The layout holds: no import cycle, nothing below the facade imports ``sparkcq.engine``,
no stage imports a later one, within a cycle the runtime passes values, never attributes
set on another object, and the tests of the plan and the languages need no JVM.

These read the source, not a running engine: they need no Spark.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "sparkcq"

# the stages in order: a module may import its own stage and the ones before it (the
# server's clients, ``sparkcq.client`` and ``sparkcq.server.client``, are one stage with it)
STAGES = ["errors", "model", "language", "aggregates|table_functions", "catalog",
          "gateway|class_archive|heap|session", "plan", "runtime", "io", "inspection",
          "statements", "recovery", "engine", "testing", "server|client", "cli", "__init__"]
# may import ``sparkcq.engine``
FACADE_USERS = ("sparkcq.server", "sparkcq.cli", "sparkcq.__init__")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """The sparkcq modules ``path`` imports (at run time: not under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text())
    out: set[str] = set()

    def visit(node: ast.AST, typing_only: bool) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, typing_only)
            return
        if not typing_only:
            if isinstance(node, ast.ImportFrom) and node.module and \
                    node.module.startswith("sparkcq"):
                out.add(node.module)
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name.startswith("sparkcq"))
        for child in ast.iter_child_nodes(node):
            visit(child, typing_only)

    visit(tree, False)
    return out


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
GRAPH = {name: {m for m in imports(path) if m in MODULES} for name, path in MODULES.items()}


RANK = {name: i for i, names in enumerate(STAGES) for name in names.split("|")}


def stage(module: str) -> int:
    top = module.split(".")[1] if "." in module else "__init__"
    return RANK[top]


def test_every_module_has_a_stage():
    unknown = sorted(m for m in MODULES if "." in m and m.split(".")[1] not in RANK)
    assert not unknown, f"modules in no stage of STAGES: {unknown}"


def test_no_import_cycle():
    seen: dict[str, int] = {}  # 1: on the current path, 2: done

    def walk(module: str, path: list[str]) -> None:
        if seen.get(module) == 2:
            return
        if seen.get(module) == 1:
            cycle = path[path.index(module):] + [module]
            pytest.fail("import cycle: " + " -> ".join(cycle))
        seen[module] = 1
        for dep in sorted(GRAPH[module]):
            walk(dep, [*path, module])
        seen[module] = 2

    for module in MODULES:
        walk(module, [])


def test_only_the_server_cli_and_package_import_the_engine():
    users = sorted(m for m, deps in GRAPH.items() if "sparkcq.engine" in deps
                   and not m.startswith(FACADE_USERS) and m != "sparkcq")
    assert not users, f"modules below the facade import sparkcq.engine: {users}"


def test_no_stage_imports_a_later_one():
    backwards = sorted(f"{m} -> {d}" for m, deps in GRAPH.items() for d in deps
                       if stage(d) > stage(m))
    assert not backwards, "imports of a later stage:\n" + "\n".join(backwards)


def foreign_writes(path: Path) -> list[str]:
    """Assignments to an attribute of anything but ``self``, and reflection that reads or
    writes attributes by name.
    """
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        flat: list[ast.expr] = []
        for t in targets:
            flat += list(t.elts) if isinstance(t, ast.Tuple | ast.List) else [t]
        for t in flat:
            if isinstance(t, ast.Attribute) and not (
                    isinstance(t.value, ast.Name) and t.value.id == "self"):
                found.append(f"{path.name}:{t.lineno}: {ast.unparse(t)} = ...")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("setattr", "vars", "delattr"):
            found.append(f"{path.name}:{node.lineno}: {node.func.id}(...)")
    return found


def test_the_runtime_writes_no_attribute_of_another_object():
    """Operators, families and the cycle engine pass a cycle's data as arguments and
    return values; each object changes only its own attributes.
    """
    found = [w for p in sorted((PACKAGE / "runtime").rglob("*.py")) for w in foreign_writes(p)]
    assert not found, "\n".join(found)


def test_no_snapshot_by_reflection():
    text = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py"))
    assert "CYCLE_FIELDS" not in text


#: what starts a Spark session (``tests/conftest.py``)
SPARK_FIXTURES = {"spark", "engine", "trusted_engine"}


@pytest.mark.parametrize("stage_dir", ["plan", "language"])
def test_the_plan_and_language_tests_start_no_jvm(stage_dir: str) -> None:
    """``pytest tests/plan tests/language`` types with ``SchemaTyper`` and starts no
    Spark: no test there asks for a fixture that starts one, nor imports the engine.
    """
    for path in sorted((Path(__file__).parent / stage_dir).glob("test_*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):  # a test or a fixture
                asked = {a.arg for a in node.args.args} & SPARK_FIXTURES
                assert not asked, f"{path.name}::{node.name} asks for {sorted(asked)}"
            if isinstance(node, ast.ImportFrom) and node.module in ("sparkcq", "sparkcq.engine"):
                assert not any(a.name == "Engine" for a in node.names), path.name


@pytest.mark.parametrize("module", ["sparkcq.runtime.global_plan", "sparkcq.runtime.cycle"])
def test_the_plan_and_the_cycle_ask_operators_for_capabilities_not_classes(module: str) -> None:
    """An operator or family says what it can (``family``, ``as_sliced``, ``contents``);
    the global plan and the cycle never test which class it is.
    """
    tree = ast.parse(MODULES[module].read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "isinstance":
            named = ast.unparse(node.args[1])
            assert not any(word.endswith(("Operator", "Family")) for word in
                           named.replace("|", " ").replace("(", " ").replace(")", " ")
                           .replace(",", " ").split()), f"{module}: {ast.unparse(node)}"
