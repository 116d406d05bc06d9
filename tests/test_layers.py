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
import re
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

SRC = Path(__file__).resolve().parents[1] / "src" / "vmtax"

#: The rooms, top to bottom: a room may import the rooms below it, never one above it.
#: Rooms on one line do not import each other. docs/architecture.md describes the layers.
LAYERS: list[tuple[str, ...]] = [
    ("entry",),  # the console script: Ctrl-C handled before the commands load
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
    ("fleet",),  # an inventory's hosts measured through Ansible
    ("runner",),  # executes a plan on targets, stores every run
    ("execution",),  # the engine: lanes of units, their storing, progress and stop
    ("plan",),  # suites and the seeded run order
    ("workloads",),  # application benchmarks against real servers
    ("targets",),  # where the agent runs: local, ssh, qemu levels
    ("doctor",),  # what this machine has installed
    # compare's CI gate (which rows fail a job); overheads as OpenMetrics text; steps in the
    # tax across experiments (ruptures, permutation tests) and fingerprint changes
    ("gate", "openmetrics", "history"),
    ("stats",),  # descriptive statistics, comparisons, knees
    ("noise",),  # noise profiles: variance components per machine, plans, borrowed strength
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


# --- Rust modules, modules loaded by name, and the store's one door -----------------------

ROOT = Path(__file__).resolve().parents[1]
PROBE_SRC = ROOT / "probe" / "src"
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def _blank(match: re.Match[str]) -> str:
    # Keep the line breaks, so a line number in the stripped text is the source's.
    return re.sub(r"[^\n]", " ", match.group(0))


def strip_rust(source: str) -> str:
    """Rust source with comments, strings and char literals blanked: a path in them is not
    a use."""
    literal = r"""r(#*)"[\s\S]*?"\1|b?"(?:\\[\s\S]|[^"\\])*"|'(?:\\.|[^\\'\n])'"""
    comment = r"//[^\n]*|/\*[\s\S]*?\*/"
    return re.sub(f"{comment}|{literal}", _blank, source)


def rust_scan(src: Path) -> tuple[set[str], dict[tuple[str, str], list[str]]]:
    """The crate's top-level modules (a directory module is one, with its files) and the
    arrows between them, with where each is made: ``mod x;`` in the crate root
    (``main.rs``), and every ``crate::x`` path, ``use crate::{x, ...}`` included."""
    modules = {p.stem for p in src.glob("*.rs")} | {p.name for p in src.iterdir() if p.is_dir()}
    arrows: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(src.rglob("*.rs")):
        rel = path.relative_to(src)
        module = rel.parts[0].removesuffix(".rs")
        text = strip_rust(path.read_text(encoding="utf-8"))
        uses: list[tuple[str, int]] = [
            (m.group(1), m.start()) for m in re.finditer(r"\bcrate::(\w+)", text)
        ]
        for m in re.finditer(r"\bcrate::\{([^}]*)\}", text):
            uses += [
                (p.strip().split("::")[0], m.start()) for p in m.group(1).split(",") if p.strip()
            ]
        if module == "main":
            uses += [
                (m.group(1), m.start())
                for m in re.finditer(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text, re.M)
            ]
        for other, at in uses:
            if other in modules and other != module:
                arrows[(module, other)].append(f"{rel.as_posix()}:{text.count(chr(10), 0, at) + 1}")
    return modules, arrows


def test_rust_modules_use_each_other_one_way() -> None:
    modules, arrows = rust_scan(PROBE_SRC)
    assert {"main", "clock", "cpuid", "serve", "pid1", "probes"} <= modules
    assert ("main", "probes") in arrows and ("probes", "clock") in arrows  # the scan sees uses
    cycle = find_cycle(set(arrows))
    assert cycle is None, (
        "use cycle between Rust modules of probe/src: "
        + " -> ".join(cycle or [])
        + "".join(
            f"\n  {a} -> {b}: {', '.join(arrows[(a, b)])}"
            for a, b in zip(cycle or [], (cycle or [])[1:], strict=False)
        )
    )


def test_checker_finds_a_rust_cycle(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "probes").mkdir(parents=True)
    (src / "main.rs").write_text("mod clock;\nmod cpuid;\nmod probes;\nfn main() {}\n")
    (src / "clock.rs").write_text(
        "// crate::probes in a comment\nuse crate::{cpuid::cpuid, main};\n"
        'const S: &str = "crate::probes";\nconst C: char = \'"\';\n'
    )
    (src / "cpuid.rs").write_text("pub fn cpuid() {}\n")
    (src / "probes" / "mod.rs").write_text("mod x;\n")
    (src / "probes" / "x.rs").write_text("fn f() { super::g(); crate::clock::now(); }\n")
    modules, arrows = rust_scan(src)
    assert modules == {"main", "clock", "cpuid", "probes"}
    assert set(arrows) == {
        ("main", "clock"), ("main", "cpuid"), ("main", "probes"), ("clock", "cpuid"),
        ("clock", "main"), ("probes", "clock"),
    }  # fmt: skip
    assert arrows[("probes", "clock")] == ["probes/x.rs:1"]
    assert find_cycle(set(arrows)) in (["clock", "main", "clock"], ["main", "clock", "main"])
    (src / "clock.rs").write_text("use crate::cpuid::cpuid;\n")
    (src / "cpuid.rs").write_text("pub fn cycles() { crate::clock::ticks(); }\n")
    _, arrows = rust_scan(src)
    assert find_cycle(set(arrows)) in (["clock", "cpuid", "clock"], ["cpuid", "clock", "cpuid"])


#: Functions that load a module named by a string.
LOADERS = {"import_module", "__import__"}


@cache
def trees(root: Path) -> tuple[tuple[str, ast.Module], ...]:
    """Every module under ``root``, parsed once for the checks below: (path, tree)."""
    return tuple(
        (path.relative_to(root).as_posix(), ast.parse(path.read_text(encoding="utf-8")))
        for path in sorted(root.rglob("*.py"))
    )


class Load:
    """One call that loads a module by name: where, and the name when it is a literal."""

    def __init__(self, file: str, function: str, line: int, name: str | None) -> None:
        self.file, self.function, self.line, self.name = file, function, line, name
        self.place = f"{file}:{function}"

    def __repr__(self) -> str:
        return f"{self.file}:{self.line} ({self.function})"


def loads_by_name(root: Path) -> list[Load]:
    """Every call of ``importlib.import_module`` or ``__import__`` under ``root``."""
    found: list[Load] = []
    for rel, tree in trees(root):

        def visit(node: ast.AST, function: str, rel: str = rel) -> None:
            for child in ast.iter_child_nodes(node):
                inner = function
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    inner = child.name
                if isinstance(child, ast.Call):
                    f = child.func
                    called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                    if called in LOADERS:
                        arg = child.args[0] if child.args else None
                        name = arg.value if isinstance(arg, ast.Constant) else None
                        found.append(Load(rel, function, child.lineno, name))
                visit(child, inner)

        visit(tree, "<module>")
    return found


def listed_loads(doc: Path = ARCHITECTURE) -> set[str]:
    """The places docs/architecture.md lists as loading a module by name: `file.py:function`
    in its section "Modules loaded by name"."""
    text = doc.read_text(encoding="utf-8")
    section = text.split("## Modules loaded by name", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`([\w/]+\.py:\w+)`", section))


def _own(load: Load, package: str) -> bool:
    """Whether a load may reach the package: a computed name, or a literal of the package.
    A literal name of another library (click's exceptions) reaches no room."""
    return load.name is None or load.name.split(".")[0] == package


def test_modules_loaded_by_name_are_listed() -> None:
    loads = [x for x in loads_by_name(SRC) if _own(x, SRC.name)]
    listed = listed_loads()
    unlisted = sorted(repr(x) for x in loads if x.place not in listed)
    assert not unlisted, (
        "modules loaded by a string, which the import graph cannot follow: import them, or "
        "list the place in docs/architecture.md (Modules loaded by name):\n  "
        + "\n  ".join(unlisted)
    )
    stale = sorted(listed - {x.place for x in loads})
    assert not stale, f"docs/architecture.md lists loads by name that are gone: {stale}"


def test_loads_by_name_follow_the_layers() -> None:
    """A literal name is an arrow like an import: it must run down the layers too."""
    rank = {room: i for i, layer in enumerate(LAYERS) for room in layer}
    arrows, _, _ = scan(SRC)
    edges = set(arrows)
    wrong = []
    for load in loads_by_name(SRC):
        if load.name is None or load.name.split(".")[0] != SRC.name:
            continue
        parts = load.name.split(".")
        src_room, dst_room = room_of(Path(load.file)), parts[1] if len(parts) > 1 else "__init__"
        if src_room != dst_room:
            edges.add((src_room, dst_room))
            if rank[src_room] >= rank[dst_room]:
                wrong.append(f"{load!r}: {src_room} -> {dst_room}")
    assert not wrong, "modules loaded by name from a room ranked above:\n  " + "\n  ".join(wrong)
    assert find_cycle(edges) is None


def test_checker_finds_a_load_by_name(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "a.py").write_text(
        "import importlib\n\n\ndef load(m):\n    return importlib.import_module(m)\n\n\n"
        "def click():\n    return importlib.import_module('click.exceptions')\n\n\n"
        "# importlib.import_module('pkg.b') in a comment is no call\n"
        "X = __import__('pkg.b')\n"
    )
    loads = loads_by_name(root)
    assert [(x.place, x.line, x.name) for x in loads] == [
        ("a.py:load", 5, None),
        ("a.py:click", 9, "click.exceptions"),
        ("a.py:<module>", 13, "pkg.b"),
    ]
    assert [x.place for x in loads if _own(x, "pkg")] == ["a.py:load", "a.py:<module>"]
    doc = tmp_path / "architecture.md"
    doc.write_text("## Modules loaded by name\n\n- `a.py:load`: why\n\n## Next\n\n`a.py:x`\n")
    assert listed_loads(doc) == {"a.py:load"}


#: What only the store's own modules may touch: its SQLAlchemy engine and its error guard.
STORE_INSIDES = {"engine", "_engine", "_guard"}


def store_bypasses(root: Path) -> list[str]:
    """Every use of ``.engine``, ``._engine`` or ``._guard`` outside the store room (read
    with ``ast``: a comment or a string does not count, nor an import of
    ``sqlalchemy.engine``)."""
    found = []
    for rel, tree in trees(root):
        if room_of(Path(rel)) == "store":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in STORE_INSIDES:
                found.append(f"{rel}:{node.lineno} .{node.attr}")
    return sorted(found)


def test_only_the_store_touches_its_engine() -> None:
    bypasses = store_bypasses(SRC)
    assert not bypasses, (
        "the store's engine or guard used outside store/ (skipping its error translation "
        "and reconnect): add a Store method or repository instead:\n  " + "\n  ".join(bypasses)
    )


def test_checker_finds_a_bypass(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    (root / "store").mkdir(parents=True)
    (root / "store" / "repo.py").write_text("def f(s):\n    return s._engine.connect()\n")
    (root / "user.py").write_text(
        "from sqlalchemy.engine import make_url\n\n"
        "# store.engine.connect() in a comment\n"
        "def f(store):\n    '''store._guard() in a docstring'''\n"
        "    with store._guard(), store.engine.connect() as c:\n        return c\n"
    )
    assert store_bypasses(root) == ["user.py:6 ._guard", "user.py:6 .engine"]


# --- The commands parse and render; the use cases live below them -------------------------

#: Command modules still waiting for the report to be written by the experiment layer: run
#: hands its experiment to report's after_run, and report (with the background child that
#: writes a run's report) opens the store itself. Each must still break the rule it is
#: listed for: once it no longer does, the test fails until it is taken off the list.
PENDING_COMMAND_IMPORTS: dict[str, set[str]] = {}
PENDING_STORE_USE: set[str] = set()

#: The one part of the store a command may import: the selector grammar, to refuse a
#: malformed selector while parsing the command line (cli/options.py).
STORE_PARSER = "store.select"
#: What a command may call on a store a use case handed back: where it is and closing it,
#: nothing that reads what it holds.
STORE_HANDLING = {"close", "url_with_password"}


def module_imports(path: Path, root: Path = SRC) -> set[str]:
    """The dotted names of the vmtax modules a file imports at run time (a name imported
    from a package counts as its submodule when it is one)."""
    rel = path.relative_to(root)
    package = [root.name, *rel.parent.parts]
    found: set[str] = set()
    for node, _ in _imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == root.name}
            continue
        base = package[: len(package) - node.level + 1] if node.level else []
        parts = [*base, *(node.module.split(".") if node.module else [])]
        if not parts or parts[0] != root.name:
            continue
        where = root.joinpath(*parts[1:])
        for alias in node.names:
            sub = where / alias.name
            is_module = sub.is_dir() or sub.with_suffix(".py").exists()
            found.add(".".join([*parts, alias.name]) if is_module else ".".join(parts))
    return found


def command_imports(root: Path = SRC) -> dict[str, set[str]]:
    """Per command module of ``cli`` (``*_cmd.py``), the other command modules it imports."""
    out = {}
    for path in sorted((root / "cli").glob("*_cmd.py")):
        own = f"{root.name}.cli.{path.stem}"
        found = {
            m
            for m in module_imports(path, root)
            if m.startswith(f"{root.name}.cli.") and m.endswith("_cmd") and m != own
        }
        if found:
            out[path.name] = found
    return out


def store_use(root: Path = SRC) -> dict[str, list[str]]:
    """Per module of ``cli``, how it reaches the store itself: an import of the store room
    (beyond its selector grammar) or of another room's ``store`` module, or a method called
    on something named ``store`` (other than STORE_HANDLING's)."""
    out: dict[str, list[str]] = {}
    for path in sorted((root / "cli").glob("*.py")):
        why = [
            f"imports {m}"
            for m in sorted(module_imports(path, root))
            if m.partition(".")[2] != STORE_PARSER
            and (m.split(".")[1:2] == ["store"] or "store" in m.split(".")[2:])
        ]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = node.func.value
            named = (isinstance(owner, ast.Name) and owner.id == "store") or (
                isinstance(owner, ast.Attribute) and owner.attr == "store"
            )
            if named and node.func.attr not in STORE_HANDLING:
                why.append(f"line {node.lineno} calls store.{node.func.attr}()")
        if why:
            out[path.name] = why
    return out


def test_commands_import_no_other_command() -> None:
    found = command_imports()
    late = {k: v for k, v in found.items() if PENDING_COMMAND_IMPORTS.get(k) != v}
    assert not late, (
        "a command module imports another command's module; share through cli/output.py, "
        f"cli/options.py or cli/signals.py, or move the code below the CLI: {late}"
    )
    stale = sorted(set(PENDING_COMMAND_IMPORTS) - set(found))
    assert not stale, f"these no longer import another command: take them off the list: {stale}"


def test_commands_make_no_store_queries() -> None:
    found = store_use()
    late = {k: v for k, v in found.items() if k not in PENDING_STORE_USE}
    assert not late, (
        "a cli module reaches the store itself; put the query in a use case under "
        f"experiment/ and pass the CLI its result: {late}"
    )
    stale = sorted(PENDING_STORE_USE - set(found))
    assert not stale, f"these no longer reach the store: take them off the list: {stale}"


def test_cli_checks_find_what_they_look_for(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    (root / "cli").mkdir(parents=True)
    (root / "store").mkdir()
    (root / "hostprof").mkdir()
    for name in ("__init__", "store/__init__", "store/select", "cli/__init__", "cli/output",
                 "hostprof/__init__", "hostprof/store"):  # fmt: skip
        (root / f"{name}.py").write_text("")
    (root / "cli" / "a_cmd.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from pkg.cli import output, b_cmd\n"
        "from pkg.store import select\n"
        "if TYPE_CHECKING:\n    from pkg.store import Store\n"
        "def f(done):\n    done.store.close()\n"
    )
    (root / "cli" / "b_cmd.py").write_text(
        "from .output import emit\nfrom pkg.store import Store\n"
        "def g(store):\n    return store.runs([])\n"
    )
    (root / "cli" / "c_cmd.py").write_text("import pkg.cli.a_cmd\nfrom pkg.hostprof import store\n")
    assert command_imports(root) == {"a_cmd.py": {"pkg.cli.b_cmd"}, "c_cmd.py": {"pkg.cli.a_cmd"}}
    used = store_use(root)
    assert set(used) == {"b_cmd.py", "c_cmd.py"}
    assert used["b_cmd.py"] == ["imports pkg.store", "line 4 calls store.runs()"]
    assert used["c_cmd.py"] == ["imports pkg.hostprof.store"]


# --- The report renders what it is given ------------------------------------------------

#: The one module of the report that reads a store: it gathers the report's input.
REPORT_GATHERER = "gather.py"


def report_store_use(root: Path = SRC) -> dict[str, list[str]]:
    """Per module of ``report`` other than the gatherer, how it could reach a store: an
    import (type-checking ones included) of the store room or of any room's ``store``
    module, or a parameter named ``store`` or annotated with ``Store``."""
    out: dict[str, list[str]] = {}
    for path in sorted((root / "report").rglob("*.py")):
        rel = path.relative_to(root / "report").as_posix()
        if rel == REPORT_GATHERER:
            continue
        package = [root.name, *path.relative_to(root).parent.parts]
        why = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[list[str]] = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".") for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                parts = [*base, *(node.module.split(".") if node.module else [])]
                names = [[*parts, a.name] for a in node.names]
            for name in names:
                if name[0] == root.name and "store" in name[1:-1] + [name[-1].lower()]:
                    why.append(f"line {node.lineno} imports {'.'.join(name)}")
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                args = node.args
                for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                    hint = ast.unparse(arg.annotation) if arg.annotation else ""
                    if arg.arg == "store" or "Store" in hint:
                        why.append(f"line {node.lineno} takes {arg.arg}: {hint or '?'}")
        if why:
            out[rel] = why
    return out


def test_report_renders_what_it_is_given() -> None:
    found = report_store_use()
    assert not found, (
        f"only report/{REPORT_GATHERER} reads the store; the renderers take its ReportInput: "
        f"{found}"
    )


def test_report_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    (root / "report").mkdir(parents=True)
    (root / "store").mkdir()
    (root / "hostprof").mkdir()
    (root / "report" / "gather.py").write_text("from pkg.store import Store\n")
    (root / "report" / "clean.py").write_text("from pkg.report.gather import load\n")
    (root / "report" / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..store import Store\n"
    )
    (root / "report" / "param.py").write_text("def f(data, store=None):\n    return data\n")
    (root / "report" / "hint.py").write_text("def f(db: 'Store') -> None:\n    pass\n")
    (root / "report" / "other.py").write_text("import pkg.hostprof.store\n")
    assert report_store_use(root) == {
        "hint.py": ["line 1 takes db: 'Store'"],
        "other.py": ["line 1 imports pkg.hostprof.store"],
        "param.py": ["line 1 takes store: ?"],
        "typed.py": ["line 3 imports pkg.store.Store"],
    }
