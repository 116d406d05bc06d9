"""The rooms of vmtax import each other one way only, top to bottom.

A room is a subpackage or top-level module of ``src/vmtax`` (``store``, ``runner``, ...; the
package's own ``__init__`` is the room ``__init__``). Every run-time import of a vmtax module
is an arrow between rooms, at module level or inside a function alike: an import deferred
into a function still has to run one way. Imports under ``if TYPE_CHECKING:`` are for the
type checker only and are not arrows. The source is read with ``ast``; nothing is imported.

Checked: no cycle between rooms; no room imports a room ranked above it in ``LAYERS``; every
import inside a function says why it is deferred: on its line, or on the line above it (or
above the run of imports it is part of).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "vmtax"

#: The rooms, top to bottom: a room may import the rooms below it, never one above it.
#: Rooms on one line do not import each other. docs/architecture.md describes the layers.
LAYERS: list[tuple[str, ...]] = [
    ("cli",),  # the commands
    ("__init__",),  # the package: __version__ and, lazily, the notebook API
    ("api",),  # the notebook API: open a store, run an experiment
    ("experiment",),  # one `vmtax run` / `vmtax sweep`: request, plan, runner, store
    ("report",),  # reports: reads sweeps, stats, store, model, explain, hostprof
    ("sweep",),  # overcommitment sweeps: guests, steps, knees
    ("explain",),  # an overhead split by exit group
    ("model",),  # the nested-cost model
    ("hostprof",),  # VM-exit profiles: recorded on targets, stored
    ("sampling",),  # adaptive sampling: when a probe has enough runs
    ("runner",),  # executes a plan on targets, stores every run
    ("plan",),  # suites and the seeded run order
    ("workloads",),  # application benchmarks against real servers
    ("targets",),  # where the agent runs: local, ssh, qemu levels
    ("doctor",),  # what this machine has installed
    ("stats",),  # descriptive statistics, comparisons, knees
    ("store",),  # the results database and the selector language
    ("refs",),  # published reference datasets
    ("testing",),  # fixtures for tests: a store with known contents
    ("turns", "contract", "outfile", "infile", "version", "limits"),  # small shared helpers
    ("errors",),
]


class Import:
    """One import statement of a vmtax module, and the rooms it reaches."""

    def __init__(self, file: str, node: ast.Import | ast.ImportFrom, inner: bool) -> None:
        self.file = file
        self.line = node.lineno
        self.end = node.end_lineno or node.lineno
        self.inner = inner
        self.rooms: set[str] = set()

    def __repr__(self) -> str:
        return f"{self.file}:{self.line}"


def room_of(rel: Path) -> str:
    """The room of a file, from its path below the package."""
    return rel.parts[0].removesuffix(".py")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every run-time import statement, with whether it is inside a function."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []

    def visit(node: ast.AST, inner: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for sub in child.orelse:
                    visit_one(sub, inner)
                continue
            visit_one(child, inner)

    def visit_one(node: ast.AST, inner: bool) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append((node, inner))
        funcs = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
        visit(node, inner or isinstance(node, funcs))

    visit(tree, False)
    return found


def _target_rooms(node: ast.Import | ast.ImportFrom, package: list[str], root: Path) -> set[str]:
    """The rooms a statement imports (empty when it imports nothing of the package)."""
    pkg = root.name
    if isinstance(node, ast.Import):
        names = [a.name.split(".") for a in node.names]
        return {n[1] if len(n) > 1 else "__init__" for n in names if n[0] == pkg}
    if node.level:
        base = package[: len(package) - node.level + 1]
        parts = [*base, *(node.module.split(".") if node.module else [])]
    else:
        parts = node.module.split(".") if node.module else []
    if not parts or parts[0] != pkg:
        return set()
    if len(parts) > 1:
        return {parts[1]}
    # `from vmtax import x`: the room x when x is a module of the package, else __init__.
    rooms = set()
    for alias in node.names:
        sub = root / alias.name
        rooms.add(alias.name if sub.is_dir() or sub.with_suffix(".py").exists() else "__init__")
    return rooms


@cache
def scan(root: Path) -> tuple[dict[tuple[str, str], list[Import]], list[Import], set[str]]:
    """Arrows between rooms (with the imports that make them), the imports inside functions
    that carry no comment, and every room."""
    arrows: dict[tuple[str, str], list[Import]] = defaultdict(list)
    uncommented: list[Import] = []
    rooms: set[str] = set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        room = room_of(rel)
        rooms.add(room)
        # The package the file is in: relative imports count from it.
        package = [root.name, *rel.parent.parts]
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(path))
        lines = source.splitlines()
        found = _imports(tree)
        # Where each import statement ends -> where it starts: a comment above a run of
        # consecutive imports speaks for the whole run.
        starts = {n.end_lineno or n.lineno: n.lineno for n, _ in found}
        for node, inner in found:
            imp = Import(rel.as_posix(), node, inner)
            # An import statement holds no string, so a # in its lines starts a comment.
            said = any("#" in lines[r - 1] for r in range(imp.line, imp.end + 1))
            above = imp.line - 1
            while above in starts and "#" not in lines[above - 1]:
                above = starts[above] - 1
            if inner and not (said or lines[above - 1].lstrip().startswith("#")):
                uncommented.append(imp)
            for other in _target_rooms(node, package, root) - {room}:
                imp.rooms.add(other)
                arrows[(room, other)].append(imp)
    return arrows, uncommented, rooms


def find_cycle(edges: set[tuple[str, str]]) -> list[str] | None:
    """A cycle of the graph as [a, b, ..., a], or None."""
    graph: dict[str, list[str]] = defaultdict(list)
    for a, b in sorted(edges):
        graph[a].append(b)
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := dfs(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := dfs(start)):
            return found
    return None


def _where(arrows: dict[tuple[str, str], list[Import]], a: str, b: str) -> str:
    return ", ".join(sorted({repr(i) for i in arrows[(a, b)]}))


def test_rooms_import_one_way() -> None:
    arrows, _, rooms = scan(SRC)
    edges = set(arrows)

    cycle = find_cycle(edges)
    assert cycle is None, (
        "import cycle between rooms: "
        + " -> ".join(cycle or [])
        + "\n"
        + (
            "\n".join(
                f"  {a} -> {b}: {_where(arrows, a, b)}"
                for a, b in zip(cycle, cycle[1:], strict=False)
            )
            if cycle
            else ""
        )
    )

    rank = {room: i for i, layer in enumerate(LAYERS) for room in layer}
    assert rooms <= set(rank), f"rooms missing from LAYERS: {sorted(rooms - set(rank))}"
    assert set(rank) <= rooms, f"LAYERS name rooms that do not exist: {sorted(set(rank) - rooms)}"
    upward = sorted(f"{a} -> {b}: {_where(arrows, a, b)}" for a, b in edges if rank[a] >= rank[b])
    assert not upward, "imports of a room ranked above (or beside) the importer:\n" + "\n".join(
        upward
    )


def test_inner_imports_say_why() -> None:
    _, uncommented, _ = scan(SRC)
    assert not uncommented, (
        "imports inside a function without a comment on their line or the line above "
        "(say why it is deferred, or move it to the top of the module):\n"
        + "\n".join(f"  {i}" for i in uncommented)
    )


def test_checker_finds_a_cycle(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    (root / "low").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "low" / "__init__.py").write_text("from pkg.high import thing\n")
    (root / "low" / "util.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from pkg import top\n"
    )
    (root / "high.py").write_text(
        "def thing():\n    from pkg.low import util\n\n    return util\n"
        "\n\ndef other():\n    from .low import util  # deferred: only for other()\n"
    )
    (root / "top.py").write_text("from pkg import high\n")
    arrows, uncommented, rooms = scan(root)
    assert rooms == {"__init__", "low", "high", "top"}
    # The function-level import counts as an arrow; the TYPE_CHECKING one does not.
    assert set(arrows) == {("low", "high"), ("high", "low"), ("top", "high")}
    assert find_cycle(set(arrows)) in (["high", "low", "high"], ["low", "high", "low"])
    assert [repr(i) for i in uncommented] == ["high.py:2"]
    assert find_cycle({("top", "high"), ("high", "low")}) is None
