"""The import graph of the app has no cycle: `make lint`'s contracts (pyproject.toml) keep the wings' arrows
pointing down and siblings acyclic, and this test catches the cycles they do not compare, such as a package's
`__init__` importing one of its modules that imports the package back. grimp reads imports inside functions and
under TYPE_CHECKING too, so a deferred import that only hides a cycle fails here as well."""

from __future__ import annotations

import grimp

PACKAGES = ("checkpoints", "dashboard", "config")


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            module, imported = work[-1]
            for other in imported:
                if other not in index:
                    index[other] = low[other] = len(index)
                    stack.append(other)
                    on_stack.add(other)
                    work.append((other, iter(sorted(graph.find_modules_directly_imported_by(other)))))
                    break
                if other in on_stack:
                    low[module] = min(low[module], index[other])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == module:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return groups


def a_cycle_through(graph: grimp.ImportGraph, group: list[str]) -> str:
    """One loop of the group, as a chain of imports to read and break."""
    first = group[0]
    following = next(other for other in sorted(graph.find_modules_directly_imported_by(first)) if other in group)
    chain = graph.find_shortest_chain(importer=following, imported=first) or (following, first)
    return " -> ".join([first, *chain])


def test_cycles_finds_a_loop_of_imports():
    graph = grimp.ImportGraph()
    for module in ("a", "b", "c", "d"):
        graph.add_module(module)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="c")
    graph.add_import(importer="c", imported="a")
    graph.add_import(importer="c", imported="d")
    assert cycles(graph) == [["a", "b", "c"]]
    assert a_cycle_through(graph, ["a", "b", "c"]) == "a -> b -> c -> a"


def test_no_module_of_the_app_imports_itself_back_through_others():
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    found = [a_cycle_through(graph, group) for group in cycles(graph)]
    assert not found, "import cycles (docs/architecture.md says where each module goes):\n" + "\n".join(found)


def test_no_module_inside_services_imports_the_services_facade():
    """services/__init__.py re-exports operations for callers above; a service importing it would import its
    siblings through it, which is how the loops this replaced closed."""
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    importers = graph.find_modules_that_directly_import("checkpoints.services")
    assert sorted(module for module in importers if module.startswith("checkpoints.services.")) == []
