"""The shape of the code (issue "One source of truth"): no import cycle among the modules of
testbed/ and traffic/, and no function longer than the rule allows. Read with ast, nothing is
imported."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("testbed", "traffic")
#: The issue's rule: a function over about 80 lines does more than one thing.
MAX_FUNCTION_LINES = 80

Graph = dict[str, set[str]]


def modules() -> dict[str, Path]:
    """Every module of the packages, their subpackages' (testbed.agent, testbed.labs) too."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported(node: ast.Import | ast.ImportFrom, module: str) -> list[str]:
    """The dotted names an import statement may load (a name imported from a package may be
    one of its modules)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:  # relative: from the module's package, up level - 1 more
        parts = module.split(".")[:-node.level]
        base = ".".join(parts + ([base] if base else []))
    return [base] + [f"{base}.{a.name}" for a in node.names]


def import_graph(mods: dict[str, Path]) -> Graph:
    """module -> the modules of ``mods`` it imports, anywhere in it (inside functions too: a
    deferred import is still a dependency) but under ``if TYPE_CHECKING:``."""
    graph: Graph = {}
    for name, path in mods.items():
        deps: set[str] = set()
        todo: list[ast.AST] = [ast.parse(path.read_text())]
        while todo:
            node = todo.pop()
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                todo += node.orelse
                continue
            if isinstance(node, ast.Import | ast.ImportFrom):
                deps |= {m for m in _imported(node, name) if m in mods and m != name}
            todo += ast.iter_child_nodes(node)
        graph[name] = deps
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def long_functions(mods: dict[str, Path], limit: int) -> list[str]:
    out = []
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > limit:
                    out.append(f"{name}.{node.name} ({path.name}:{node.lineno}): {length} lines")
    return sorted(out)


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}) == [
        ["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c", "a"}}) == [["a", "b"],
                                                                          ["c", "d"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "testbed"
    pkg.mkdir()
    (pkg / "a.py").write_text("from testbed.b import x\n")
    (pkg / "b.py").write_text("def f():\n    from . import c\n")
    (pkg / "c.py").write_text("import testbed.a\n")
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from testbed import a\n")
    mods = {f"testbed.{p.stem}": p for p in sorted(pkg.glob("*.py"))}
    graph = import_graph(mods)
    assert graph == {"testbed.a": {"testbed.b"}, "testbed.b": {"testbed.c"},
                     "testbed.c": {"testbed.a"}, "testbed.d": set()}
    assert cycles(graph) == [["testbed.a", "testbed.b", "testbed.c"]]


def test_no_import_cycles() -> None:
    graph = import_graph(modules())
    assert graph["testbed.control.entries"] >= {  # it sees imports
        "testbed.topology.qos", "testbed.topology.graph"}
    assert "testbed.agent.switch" in graph and "testbed.labs.checks" in graph  # subpackages
    found = cycles(graph)
    assert not found, "import cycles among testbed/ and traffic/: " + "; ".join(
        " <-> ".join(c) for c in found)


def test_no_function_over_the_limit() -> None:
    found = long_functions(modules(), MAX_FUNCTION_LINES)
    assert not found, f"functions over {MAX_FUNCTION_LINES} lines: " + "; ".join(found)


#: The issue's rule: no module over about 450 lines.
MAX_MODULE_LINES = 460


def test_no_module_over_the_limit() -> None:
    found = sorted(f"{name} ({path.relative_to(REPO)}): {n} lines"
                   for name, path in modules().items()
                   if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES)
    assert not found, f"modules over {MAX_MODULE_LINES} lines: " + "; ".join(found)
