"""The pipeline's stages are modules in one line, read -> check -> expand -> fold -> place ->
compile -> run: a stage imports earlier stages at most, never a later one, so none calls back
into an earlier one's caller. What a later stage does for an earlier one (the fold stage
running its constant nodes) it is handed by nnplug.pipeline, which alone imports them all.
Imports under ``if TYPE_CHECKING:`` do not count (they never run)."""

import pytest
from test_import_circles import import_graph

STAGES = [
    ("read", ["nnplug.stages.loader"]),
    ("check", ["nnplug.stages.validate"]),
    ("widen", ["nnplug.stages.precision"]),
    ("expand", ["nnplug.stages.expand"]),
    ("fold", ["nnplug.stages.folding", "nnplug.stages.cse"]),
    ("place", ["nnplug.stages.planner", "nnplug.stages.measure"]),
    ("compile", ["nnplug.stages.compiler"]),
    ("run", ["nnplug.stages.executor"]),
]
RANK = {module: k for k, (_, modules) in enumerate(STAGES) for module in modules}


@pytest.fixture(scope="module")
def graph():
    return import_graph()


@pytest.mark.parametrize("module", sorted(RANK))
def test_a_stage_imports_no_later_stage(graph, module):
    later = sorted(m for m in graph[module] if RANK.get(m, -1) > RANK[module])
    assert later == [], f"{module} imports later stage(s) {later}"


@pytest.mark.parametrize("module", sorted(RANK))
def test_what_a_stage_imports_imports_no_stage_after_it(graph, module):
    """The modules a stage leans on (graph utilities, inference, ...) do not lead to a later
    stage either: the line is straight through them too."""
    seen, todo, bad = set(), [m for m in graph[module] if m not in RANK], set()
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        for dep in graph.get(m, ()):
            if dep in RANK:
                if RANK[dep] > RANK[module]:
                    bad.add(f"{m} -> {dep}")
            else:
                todo.append(dep)
    assert not bad, f"{module} reaches later stages through {sorted(bad)}"


def test_expand_builds_its_model_without_the_read_stage(graph):
    assert "nnplug.stages.loader" not in graph["nnplug.stages.expand"]


def test_fold_is_handed_compile_and_run_instead_of_importing_them(graph):
    for later in ("nnplug.stages.compiler", "nnplug.stages.executor", "nnplug.stages.planner", "nnplug.plan"):
        assert later not in graph["nnplug.stages.folding"], later


def test_only_the_pipeline_imports_every_stage(graph):
    importers = {m for m, deps in graph.items() if set(RANK) <= deps}
    assert importers == {"nnplug.pipeline"}
