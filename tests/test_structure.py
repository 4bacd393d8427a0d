"""The shape of the code (issues "One source of truth" and #33 "A layout that shows the
architecture"): no import cycle among the modules of testbed/ and traffic/, testbed's packages
importing only downward through their layers, traffic importing nothing of testbed, and no
function or module longer than the rule allows. Read with ast, nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("testbed", "traffic")
#: The issue's rule: a function over about 80 lines does more than one thing.
MAX_FUNCTION_LINES = 80

Graph = dict[str, set[str]]

#: testbed's packages, lowest first (docs/ARCHITECTURE.md draws them): a module may import its
#: own package and the packages before it, never one after it. The order is of dependence: a
#: run calls the analysis and the report as it ends, so run comes after both, and the results
#: folder's format is below the agents that write it.
LAYERS = ("config", "machine", "topology", "budget", "results", "control", "agent", "fabric",
          "analysis", "report", "run", "conformance", "labs", "cli")


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


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of a testbed module's package; None for the root package
    ``testbed`` (which any layer may import) and for modules outside testbed."""
    parts = module.split(".")
    if parts[0] != "testbed" or len(parts) == 1:
        return None
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else -1


def upward_imports(graph: Graph) -> list[str]:
    """Every import of a testbed module from a package in a higher layer than its own, as
    "module imports module (package -> higher package)"."""
    found = []
    for module, deps in sorted(graph.items()):
        mine = layer_of(module)
        for dep in sorted(deps):
            theirs = layer_of(dep)
            if mine is not None and theirs is not None and theirs > mine:
                found.append(f"{module} imports {dep} ({LAYERS[mine]} -> {LAYERS[theirs]}, "
                             "a higher layer)")
    return found


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


def test_the_layer_check_names_an_upward_import() -> None:
    graph = {"testbed.config.models": {"testbed.run.scenario"},
             "testbed.run.scenario": {"testbed.config.models", "testbed"},
             "testbed.cli.commands": {"testbed.run.scenario"}}
    assert upward_imports(graph) == [
        "testbed.config.models imports testbed.run.scenario (config -> run, a higher layer)"]


def test_every_testbed_module_is_in_a_layered_package() -> None:
    """A new package is given its place in LAYERS; no module sits loose in testbed/."""
    loose = sorted(m for m in modules() if m.startswith("testbed.") and layer_of(m) == -1)
    assert not loose, (f"modules outside the packages of LAYERS {LAYERS}: {loose}; put each in "
                       "a package, and a new package in LAYERS")


def test_imports_go_down_the_layers() -> None:
    found = upward_imports(import_graph(modules()))
    assert not found, ("imports from a higher layer (tests/test_structure.py LAYERS): "
                       + "; ".join(found))


def test_traffic_imports_nothing_of_testbed() -> None:
    """traffic/ runs on the hosts, in its own process: the testbed may import it (the wire
    facts of traffic.wire, the endpoints' settings), never the other way."""
    graph = import_graph(modules())
    found = sorted(f"{m} imports {d}" for m, deps in graph.items() if m.split(".")[0] ==
                   "traffic" for d in deps if d.split(".")[0] == "testbed")
    assert not found, "traffic imports testbed: " + "; ".join(found)


#: The endpoints' two files are named by their writer, traffic.endpoint_telemetry (traffic/
#: imports nothing of the testbed); testbed.results.files re-exports them.
NAMED_BY_THEIR_WRITER = {"traffic.endpoint_telemetry": {"qp_timeseries.csv", "messages.csv"}}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of a module and its classes and functions."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def file_name_literals(mods: dict[str, Path], names: frozenset[str],
                       suffixes: tuple[str, ...]) -> list[str]:
    """Every string literal outside testbed.results that is a results folder's file name, or
    (in an f-string too) ends with one of its per-switch suffixes; docstrings aside."""
    found = []
    for module, path in sorted(mods.items()):
        if module.startswith("testbed.results"):
            continue
        tree = ast.parse(path.read_text())
        skip = _docstrings(tree)
        allowed = NAMED_BY_THEIR_WRITER.get(module, set())
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in skip and node.value not in allowed
                    and (node.value in names or node.value.endswith(suffixes))):
                found.append(f"{module} ({path.name}:{node.lineno}): {node.value!r}")
    return found


def test_results_file_names_are_written_once() -> None:
    """A results folder's file names are testbed.results.files' constants: a name written out
    elsewhere could drift from what its reader looks for."""
    from testbed.results import files

    suffixes = (files.TELEMETRY_SUFFIX, files.EVENTS_SUFFIX, files.PFCWD_SUFFIX,
                files.AGENT_LOG_SUFFIX)
    assert "summary.json" in files.FILE_NAMES and "p4_counters.csv" in files.FILE_NAMES
    found = file_name_literals(modules(), files.FILE_NAMES, suffixes)
    assert not found, ("results file names written as literals (use testbed.results.files): "
                       + "; ".join(found))


def test_the_file_name_scan_sees_literals_and_f_strings(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text('"""summary.json is read here."""\n'
                                   'X = "summary.json"\nY = f"{s}.events.csv"\n')
    found = file_name_literals({"testbed.x.a": tmp_path / "a.py"},
                               frozenset({"summary.json"}), (".events.csv",))
    assert found == ["testbed.x.a (a.py:2): 'summary.json'", "testbed.x.a (a.py:3): '.events.csv'"]


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
