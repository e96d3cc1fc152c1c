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


def test_execution_is_below_the_families_results_and_reports():
    graph = import_graph()
    execution = [m for m in graph if m == "vertebrae.execution" or m.startswith("vertebrae.execution.")]
    forbidden = ("vertebrae.retrieval", "vertebrae.zero_shot", "vertebrae.results", "vertebrae.reports")
    leaks = sorted(f"{m} -> {t}" for m in execution for t in graph[m]
                   if any(t == f or t.startswith(f + ".") for f in forbidden))
    assert not leaks, leaks


def test_the_json_codec_is_at_the_foundation():
    graph = import_graph()
    assert "vertebrae.json_codec" in graph
    assert reaches(graph, "vertebrae.json_codec") <= {"vertebrae.errors", "vertebrae._sparse"}


def test_importing_execution_imports_no_dask():
    code = ("import sys, vertebrae.execution; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", out
