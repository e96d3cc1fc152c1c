"""The project's import graph has no cycles, function-level imports included (issue 25, item 8).

Every ``import`` / ``from ... import`` statement anywhere in a module (top level, inside a function, under
``if TYPE_CHECKING``) that names another ``vertebrae`` module is an edge; a cycle between project modules fails
with the modules it passes through. Lazy imports of third-party packages stay allowed. Layer rules from
docs/architecture.md are checked on the same graph.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

import vertebrae

ROOT = pathlib.Path(vertebrae.__file__).parent


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, pathlib.Path]:
    return {module_name(path): path for path in ROOT.rglob("*.py")}


def resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (a ``from package import name`` edge goes to the submodule
    ``package.name`` when that is a module, else to the package)."""
    modules = project_modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = resolve(name, is_package, node)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            for target in targets:
                while target and target not in modules:  # `import vertebrae.a.b` names the module a.b
                    target = target.rpartition(".")[0]
                if target.startswith("vertebrae") and target != name:
                    graph[name].add(target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the components with more than one module (each is at least one cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_finder_sees_a_cycle():
    """The check itself can fail: a two-module cycle and a package-level self-import are both found."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert strongly_connected(graph) == [["a", "b"]]


def test_no_import_cycles_between_project_modules():
    cycles = strongly_connected(import_graph())
    assert not cycles, "import cycles (function-level imports included):\n" + "\n".join(
        " <-> ".join(component) for component in cycles)


def reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        for nxt in graph[node]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


#: Plug-in modules (a module or a package prefix): the families, rounds across a run, the command line, the
#: reports and the monitor.  The core (execution, artifacts, scoring) reaches none of them, not even transitively.
#: The plug-ins are whole folders of the layout (docs/architecture.md): a module added to one is covered.
PLUG_INS = (
    "vertebrae.families",   # the labeled benchmark, retrieval, zero-shot, the front door and result protocol
    "vertebrae.selection",  # rounds over a run: screening, adaptive repeats, referee, agreement
    "vertebrae.cli",        # the command line, run and model configs, the staged workflow, the demos
    "vertebrae.reports",    # rendering and compare
    "vertebrae.monitoring",
)
CORE = ("vertebrae.execution", "vertebrae.artifacts", "vertebrae.scoring")


def within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def plug_ins_reached(graph: dict[str, set[str]], core: str) -> dict[str, list[str]]:
    """Each plug-in module reachable from a module of ``core`` (function-level imports included), with one path."""
    found: dict[str, list[str]] = {}
    for start in sorted(m for m in graph if within(m, (core,))):
        paths, todo = {start: [start]}, [start]
        while todo:
            node = todo.pop()
            for nxt in sorted(graph[node]):
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    todo.append(nxt)
        found.update({m: path for m, path in paths.items() if within(m, PLUG_INS) and m not in found})
    return found


def test_the_plug_in_list_names_real_modules():
    """A renamed plug-in module must be renamed here too, or the check below would pass on nothing."""
    graph = import_graph()
    missing = [prefix for prefix in PLUG_INS if not any(within(m, (prefix,)) for m in graph)]
    assert not missing, missing


def test_the_reach_check_sees_a_transitive_leak():
    """The check itself can fail: a core module that reaches a plug-in through a neutral module is found."""
    graph = {"vertebrae.execution.x": {"vertebrae.neutral"}, "vertebrae.neutral": {"vertebrae.cli.main"},
             "vertebrae.cli.main": set()}
    assert plug_ins_reached(graph, "vertebrae.execution") == {
        "vertebrae.cli.main": ["vertebrae.execution.x", "vertebrae.neutral", "vertebrae.cli.main"]}


@pytest.mark.parametrize("core", CORE)
def test_the_core_reaches_no_plug_in(core):
    leaks = plug_ins_reached(import_graph(), core)
    assert not leaks, "\n".join(" -> ".join(path) for path in leaks.values())


def test_the_execution_core_names_no_extractor_or_metric():
    """Stages carry what the runners need (a sharded extraction's measured transform and its shard check are its
    stage's ``RowShards`` hooks; worker measurements merge in ``_base/profile_records``), so no execution module
    reaches an extractor, a metric or an input module, even transitively (DESIGN.md: nothing in execution/ names
    them): the core stands on the foundation alone."""
    graph = import_graph()
    foundation = ("vertebrae.execution", "vertebrae._base", "vertebrae.artifacts", "vertebrae.errors",
                  "vertebrae._version")
    for module in (m for m in graph if within(m, ("vertebrae.execution",))):
        named = {m for m in reaches(graph, module) if not within(m, foundation)}
        assert not named, f"{module} reaches {sorted(named)}"


def test_the_json_codec_is_at_the_foundation():
    graph = import_graph()
    assert "vertebrae._base.json_codec" in graph
    assert reaches(graph, "vertebrae._base.json_codec") <= {"vertebrae.errors", "vertebrae._base.sparse",
                                                             "vertebrae._base.names", "vertebrae._base.files"}


def test_the_foundation_imports_nothing_above_it():
    """`_base/` is the bottom layer: its modules reach only each other and the exception hierarchy."""
    graph = import_graph()
    for module in (m for m in graph if within(m, ("vertebrae._base",))):
        above = {m for m in reaches(graph, module) if not within(m, ("vertebrae._base", "vertebrae.errors"))}
        assert not above, f"{module} reaches {sorted(above)}"


def test_importing_vertebrae_loads_no_dask_distributed_or_asyncio():
    """`import vertebrae` stays light (issue 35, item 8): dask, distributed and asyncio load only when a dask runner
    is used, and `vertebrae.execution` still offers DaskRunner (loaded on first access)."""
    code = ("import sys, vertebrae, vertebrae.execution; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed', 'asyncio') "
            "or m == 'vertebrae.execution.dask')); "
            "from vertebrae.execution import DaskRunner; print('asyncio' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:2] == ["[]", "True"], out
