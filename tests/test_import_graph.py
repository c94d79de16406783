"""No import cycles anywhere in brainhands, imports made only for type checking included;
and PostgreSQL's dialect imported by the store's PostgreSQL backend alone.

The import contracts (``pyproject.toml``, ``acyclic_siblings``) leave out ``TYPE_CHECKING``
imports; a cycle closed through one is still an aggregate handing itself down to its
helpers, so this test reads the whole graph with them (``grimp``, the import linter's graph
library) and fails on any cycle not listed in ``REMAINING`` -- and on a listed one that is
gone, so that the list shrinks as they are broken.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Set
from pathlib import Path

import grimp

import brainhands

REMAINING = {
    # Each an aggregate handing itself to its helpers (issue #56, point 2), still to break.
    frozenset(
        {"brainhands.brain.agent", "brainhands.brain.context", "brainhands.brain.model_calls"}
    ),
    frozenset(
        {"brainhands.brain.compensation", "brainhands.brain.dispatch", "brainhands.brain.edits"}
    ),
    frozenset(
        {
            "brainhands.client.approvals",
            "brainhands.client.direct",
            "brainhands.client.operator",
            "brainhands.client.submission",
            "brainhands.client.views",
        }
    ),
}
"""The cycles known today, by their modules."""


def cycles(imports: Mapping[str, Set[str]]) -> set[frozenset[str]]:
    """The modules that import one another in a cycle, as sets of modules (the graph's
    strongly connected components of more than one module, or of one importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()
    for root in sorted(imports):
        if root in index:
            continue
        # Tarjan's algorithm, iterative: the import graph is deeper than the recursion limit
        # allows for.
        work = [(root, iter(sorted(imports.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    work.append((target, iter(sorted(imports.get(target, ())))))
                elif target in stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in imports.get(node, ()):
                    found.add(frozenset(component))
    return found


def test_cycles_are_found_whatever_their_length_and_only_they() -> None:
    imports = {
        "a": {"b"},
        "b": {"c"},
        "c": {"a", "d"},  # a -> b -> c -> a
        "d": {"e"},
        "e": set(),
        "f": {"f"},  # a module importing itself
        "g": {"h"},
        "h": {"g", "a"},  # g <-> h, which also reaches the first cycle
    }
    assert cycles(imports) == {frozenset("abc"), frozenset("f"), frozenset("gh")}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == set()


def test_no_new_import_cycle_type_checking_imports_included() -> None:
    # Imported above: brainhands extends its path over the roles' folders, as for the linter.
    graph = grimp.build_graph("brainhands", exclude_type_checking_imports=False, cache_dir=None)
    assert "brainhands.brain.agent" in graph.modules, "the roles' folders were not read"
    imports = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    found = cycles(imports)
    assert found - REMAINING == set(), "new import cycles"
    assert REMAINING - found == set(), "cycles broken: take them out of REMAINING"


POSTGRES_BACKEND = "brainhands.shared.store.backends.postgres"
DIALECT = "sqlalchemy.dialects.postgresql"


def imported(source: str) -> set[str]:
    """The modules (and the names from them, as ``module.name``) that ``source`` imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_imports_of_a_module_are_read_whatever_their_form() -> None:
    source = (
        "import sqlalchemy.dialects.postgresql\n"
        "from sqlalchemy.dialects import postgresql\n"
        "from sqlalchemy.dialects.postgresql import insert\n"
        "from . import sibling\n"
    )
    assert {m for m in imported(source) if m.startswith(DIALECT)} == {
        DIALECT,
        f"{DIALECT}.insert",
    }


def test_only_the_postgres_backend_imports_the_postgresql_dialect() -> None:
    # The import linter sees sqlalchemy as one package, so its contract (pyproject.toml)
    # covers the driver (asyncpg) and this test the dialect.
    importers = set()
    for folder in brainhands.__path__:
        for path in Path(folder).rglob("*.py"):
            module = ".".join(("brainhands", *path.relative_to(folder).with_suffix("").parts))
            if module.startswith(POSTGRES_BACKEND):
                continue
            if any(m.startswith(DIALECT) for m in imported(path.read_text())):
                importers.add(module.removesuffix(".__init__"))
    assert importers == set()
