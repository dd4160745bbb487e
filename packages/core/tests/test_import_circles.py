"""nnplug's modules import each other without circles: every ``import`` statement of every
module (at the top or inside a function, where a circle only waits to bite later) is an
edge; imports under ``if TYPE_CHECKING:`` are not, as they never run. The pipeline
depends on its stages, later stages on earlier ones, never back."""

import ast
import os

import nnplug

ROOT = os.path.dirname(nnplug.__file__)


def _modules() -> dict[str, str]:
    """module name -> file, for every module of the installed nnplug package."""
    found = {}
    base = os.path.dirname(ROOT)
    for folder, _dirs, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                name = os.path.relpath(path, base)[:-3].replace(os.sep, ".")
                found[name.removesuffix(".__init__")] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported(module: str, source: str, modules, is_package: bool = False) -> set[str]:
    """The nnplug modules that ``module`` (code ``source``) imports anywhere in its code."""
    package = module if is_package else module.rpartition(".")[0]
    out: set[str] = set()

    def target(name: str) -> str:  # the module itself, or the package it is a name of
        return name if name in modules else name.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            out.update(target(f"{base}.{a.name}") for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return {m for m in out if m in modules and m != module}


def import_graph() -> dict[str, set[str]]:
    graph = {}
    modules = _modules()
    for name, path in modules.items():
        with open(path, encoding="utf-8") as f:
            graph[name] = imported(name, f.read(), modules, path.endswith("__init__.py"))
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_nnplug_modules_import_each_other_without_circles():
    graph = import_graph()
    assert len(graph) > 40 and "nnplug.pipeline" in graph  # the whole package was read
    found = circles(graph)
    detail = "; ".join(
        " , ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in found)
    assert not found, f"import circles among nnplug's modules: {detail}"


def test_the_check_sees_imports_inside_functions_and_skips_type_checking_ones():
    modules = _modules()
    lazy = "def to_model(self):\n    from .stages.loader import subgraph_to_model\n"
    typing_only = "if TYPE_CHECKING:\n    from .stages.loader import Model\n"
    assert imported("nnplug.graph", lazy, modules) == {"nnplug.stages.loader"}
    assert imported("nnplug.graph", typing_only, modules) == set()
    assert imported("nnplug.native", "from .. import get_include", modules, True) == {"nnplug"}
    assert imported("nnplug.native.plan", "from .buffer import cdev", modules) == {
        "nnplug.native.buffer"}
    graph = import_graph()
    graph["nnplug.graph"] = graph["nnplug.graph"] | imported("nnplug.graph", lazy, modules)
    assert any({"nnplug.graph", "nnplug.stages.loader"} <= set(c) for c in circles(graph))
