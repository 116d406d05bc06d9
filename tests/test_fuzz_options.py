"""Every option of every command, fuzzed from the app itself.

The commands and their options are read from the typer app (``typer.main.get_command``), so
an option added tomorrow is fuzzed tomorrow. Each option gets values drawn from its declared
type's bad corners: negative, zero, huge, NaN, infinities, empty, unicode, and a path that is
a directory, a FIFO or missing. Each case runs in this process through ``vmtax.cli.main``
(as the console script does) on a small store in a temporary directory, and must end with
exit 0, 1 or 2; on failure the last line of stderr is its only ``vmtax: error:`` line; no
traceback; no hang; and an exit 2 (bad input) leaves no file and no row behind.

Real subprocesses get SIGINT and SIGTERM at seeded random points of run, report, import and
sweep, and must end with exit 130 and one line.

The CI form gives every option one kind of bad value (rotating, so that every kind is
tried), then 20 of hypothesis's derandomized mixes of several options. The long form gives
every option every kind and

    VMTAX_FUZZ_LONG=1 python3 -m pytest -q -s tests/test_fuzz_options.py

draws 10,000 mixes (VMTAX_FUZZ_OPTION_CASES sets another number), printing the tally.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
import types
import typing
import weakref
from collections import Counter
from pathlib import Path

import pytest
import typer.main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vmtax.cli import full_app, main
from vmtax.store import Store
from vmtax.targets.base import find_agent
from vmtax.testing.report_store import populate

LONG = os.environ.get("VMTAX_FUZZ_LONG") == "1"
MIXES = int(os.environ.get("VMTAX_FUZZ_OPTION_CASES", "10000" if LONG else "20"))
VECTORS = Path(__file__).parent / "vectors"
#: A case still running after this is a hang (the slowest valid case, a report, takes ~10 s).
HANG_S = 120
#: Classes of bad value each option gets in CI (all of them in the long form): one, rotating,
#: keeps CI near a minute; a value that passes validation does real work (a report, a sweep).
CLASSES_PER_OPTION = 1

# -- the commands, from the app ----------------------------------------------------------------


def _leaves(cmd, path: tuple[str, ...]):
    sub = getattr(cmd, "commands", None) or {}
    for name, child in sorted(sub.items()):
        yield from _leaves(child, (*path, name))
    if not sub or getattr(cmd, "invoke_without_command", False):
        yield path, cmd


def _kind(param) -> str:
    """int, float, bool, path or text: the option's declared Python type, without Optional
    or list around it."""
    descriptor = getattr(param, "type_descriptor", None)
    hint = getattr(descriptor, "annotation", None)
    while typing.get_origin(hint) in (typing.Union, types.UnionType, list):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if hint is None:  # click's own type name, for a typer without type descriptors
        name = getattr(getattr(param, "type", None), "name", "text")
        return {"integer": "int", "boolean": "bool"}.get(name, name)
    if hint is bool:
        return "bool"
    if hint in (int, float):
        return hint.__name__
    return "path" if hint is Path else "text"


COMMANDS = {path: cmd for path, cmd in _leaves(typer.main.get_command(full_app()), ()) if path}
PARAMS = [
    (path, p)
    for path, cmd in COMMANDS.items()
    for p in cmd.params
    if p.name != "help" and _kind(p) != "bool"
]


def _flag(param) -> str | None:
    longs = [o for o in param.opts if o.startswith("--")]
    return max(longs, key=len) if longs else None  # None: a positional argument


# -- what each command needs around the fuzzed option -----------------------------------------

#: Arguments that make each command valid and cheap on the test store: a valid value of a
#: fuzzed option may start real work (a one-run cpuid, an L0 sweep of one short window).
BASE: dict[tuple[str, ...], list[str]] = {
    ("run",): ["--probe", "cpuid", "--runs", "1", "--duration", "0.05"],
    ("sweep",): ["--level", "L0", "--replicates", "1", "--no-intervals", "--steps", "1",
                 "--warmup", "0.2", "--window", "0.6", "--interval", "0.2", "--events", "5",
                 "--max-prime", "50"],
    ("compare",): ["exp=1", "--baseline", "level=L0", "--resamples", "100"],
    ("artifacts",): ["exp=1", "--resamples", "19"],
    ("report",): ["exp=1", "-o", "r.html", "--resamples", "100"],
    ("model",): ["exp=1"],
    ("explain",): ["exp=1"],
    ("exits",): ["1"],
    ("results", "show"): ["1"],
    ("results", "export"): ["1", "-o", "x.csv", "--format", "csv"],
    ("sweep", "show"): ["1"],
    ("import",): ["STREAM"],
    ("refs", "show"): ["fitzgerald2014"],
    ("refs", "import"): ["REFCSV", "--name", "mine"],
}  # fmt: skip
#: Commands that never open the store: --db is not theirs.
NO_DB = {("doctor",), ("env",), ("probes",), ("workloads",), ("refs", "list"),
         ("refs", "show"), ("refs", "import"), ("image", "build"), ("image", "list")}  # fmt: skip


def _values(kind: str, where: Path) -> dict[str, list[str]]:
    """Bad values by class, for one declared type."""
    paths = {
        "directory": [str(where / "adir")],
        "fifo": [str(where / "afifo")],
        "missing": [str(where / "nothing" / "here.toml")],
        "endless": ["/dev/zero"],  # a read with no end and no newline: bounded or refused
    }
    common = {
        "empty": ["", " ", ","],
        "unicode": ["é", "\u202eL1", "L\u0661", "𝕃𝟘", "\ufeff1"],
        "nan": ["nan", "NaN"],
        "inf": ["inf", "-inf", "1e999"],
    }
    if kind == "int":
        return {**common, "negative": ["-1", str(-(2**63) - 1)], "zero": ["0"],
                "huge": [str(2**63), str(10**23), "1e30"]}  # fmt: skip
    if kind == "float":
        return {**common, "negative": ["-1", "-1e-300"], "zero": ["0", "-0"],
                "huge": ["1e308", "1e300"]}  # fmt: skip
    return {**common, **paths, "negative": ["-1"], "zero": ["0"], "huge": ["9" * 40],
            "control": ["a\x00b", "L1\u2067"], "long": ["k" * 100_000],
            "pg-port": ["postgresql://u:pw@localhost:abc/db", "postgresql://u@h:99999/db"],
            "sqlite-dir": [f"sqlite:///{where / 'adir'}"],
            "sqlite-fifo": [f"sqlite:///{where / 'afifo'}"]}  # fmt: skip


# -- one case -----------------------------------------------------------------------------------


class Hang(Exception):
    pass


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A directory with a store of two levels and two probes, a stream, a reference CSV, a
    directory and a FIFO; the user's data, cache and config directories inside it."""
    where = tmp_path_factory.mktemp("fuzz")
    db = where / "v.db"
    with Store.open(f"sqlite:///{db}") as store:
        populate(store, levels=("L0", "L1"), probes=("cpuid",), runs=4, iterations=200)
    (where / "adir").mkdir()
    os.mkfifo(where / "afifo")
    (where / "stream.jsonl").write_text((VECTORS / "stream_ok.jsonl").read_text())
    refs = Path(__file__).resolve().parents[1] / "src" / "vmtax" / "refs" / "data"
    (where / "ref.csv").write_text((refs / "fitzgerald2014.csv").read_text())
    return where


def _home(world: Path, mp) -> None:
    # The user's data (imported references, the default store) inside the world, where a
    # leftover shows; matplotlib's font cache (a library's, kept on purpose) outside it.
    mp.setenv("XDG_DATA_HOME", str(world / "xdg"))
    mp.setenv("MPLCONFIGDIR", str(world.parent / "mplconfig"))


def _tree(where: Path) -> set[str]:
    # The store's own journal files come and go with every connection.
    return {
        str(p.relative_to(where))
        for p in where.rglob("*")
        if not p.name.startswith("v.db") and ".pytest" not in p.parts
    }


def _rows(db: Path) -> str:
    # The store's bytes: an unchanged file has no new row (cheaper than opening the store).
    return hashlib.sha256(db.read_bytes()).hexdigest()


def _feed(fifo: Path, stop: threading.Event) -> None:
    """The writer a command reading the FIFO waits for (import reads one as cat does): a
    line that is no stream, then the end. It never blocks: until a reader opens the FIFO,
    opening it for writing fails at once (ENXIO), and it tries again."""
    while not stop.wait(0.02):
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue
        with contextlib.suppress(OSError):
            os.write(fd, b"not a stream\n")
        os.close(fd)


def run_case(world: Path, path: tuple[str, ...], options: dict[str, list[str]], capsys, mp):
    """Run ``vmtax PATH ...`` in this process; return (exit code, stdout, stderr, argv)."""
    args = [*path]
    base = list(BASE.get(path, []))
    positional = options.pop("", None)
    if positional is not None:  # the fuzzed value replaces the base's positional arguments
        base = [a for i, a in enumerate(base) if a.startswith("-") or
                (i and base[i - 1].startswith("-"))]  # fmt: skip
        args += positional
    for flag, values in options.items():  # the fuzzed value replaces the base's own
        if flag in base:
            i = base.index(flag)
            del base[i : i + 2]
        for v in values:
            args += [flag, v]
    args += [{"STREAM": str(world / "stream.jsonl"), "REFCSV": str(world / "ref.csv")}.get(a, a)
             for a in base]  # fmt: skip
    if path not in NO_DB and "--db" not in options:
        args += ["--db", f"sqlite:///{world / 'v.db'}"]
    mp.setattr(sys, "argv", ["vmtax", *args])
    capsys.readouterr()

    def alarm(*_):
        raise Hang(" ".join(args))

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HANG_S)
    stop = threading.Event()
    feeder = threading.Thread(target=_feed, args=(world / "afifo", stop), daemon=True)
    feeder.start()
    try:
        with pytest.raises(SystemExit) as done:
            main()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        stop.set()
        feeder.join()
    out, err = capsys.readouterr()
    code = done.value.code
    return (code if isinstance(code, int) else 1), out, err, args


def check(world: Path, case, capsys, mp, tally: Counter) -> None:
    path, options, numeric_bad = case
    before_tree, before_rows = _tree(world), _rows(world / "v.db")
    mp.chdir(world)
    code, out, err, args = run_case(world, path, dict(options), capsys, mp)
    shown = " ".join(repr(a) if not a or " " in a else a for a in args)
    tally[code] += 1
    assert "Traceback" not in err + out, f"vmtax {shown}: {err[-2000:]}"
    assert code in (0, 1, 2), f"vmtax {shown}: exit {code}: {err[-500:]}"
    errors = [line for line in err.splitlines() if line.startswith("vmtax: error:")]
    if code:
        assert err.splitlines() and err.splitlines()[-1].startswith("vmtax: error: "), (
            f"vmtax {shown}: exit {code} without a closing error line: {err[-500:]!r}"
        )
        assert len(errors) == 1, f"vmtax {shown}: {err!r}"
    else:
        assert not errors, f"vmtax {shown}: exit 0 with {errors}"
        assert not numeric_bad, f"vmtax {shown}: accepted a NaN, infinite or negative value"
    if code == 2:  # bad input: nothing done, nothing left behind
        assert _tree(world) == before_tree, f"vmtax {shown} left {_tree(world) - before_tree}"
        assert _rows(world / "v.db") == before_rows, f"vmtax {shown} changed the store"
    for extra in _tree(world) - before_tree:  # what a valid case wrote is removed
        target = world / extra
        if target.is_file():
            target.unlink()


def _numeric_bad(kind: str, klass: str, value: str) -> bool:
    """A value no numeric option of vmtax accepts: NaN, infinite, negative, 2^63 or more."""
    if kind not in ("int", "float"):
        return False
    try:
        number = float(value)
    except ValueError:
        return False
    return klass in ("nan", "inf", "negative") or number >= 2.0**63 or number != number


# -- every option of every command: one class of bad value in CI, each class in the long form --


@pytest.mark.fast
@pytest.mark.parametrize(
    "path", sorted(COMMANDS), ids=[" ".join(p) or "vmtax" for p in sorted(COMMANDS)]
)
def test_every_option_of_every_command(world, capsys, monkeypatch, path):
    monkeypatch.setenv("VMTAX_RUN_REPORT", "none")
    monkeypatch.delenv("VMTAX_DB", raising=False)
    _home(world, monkeypatch)
    tally: Counter = Counter()
    cases = 0
    for param_path, param in PARAMS:
        if param_path != path:
            continue
        kind = _kind(param)
        flag = _flag(param) or ""
        classes = list(_values(kind, world).items())
        if not LONG:  # CI: a few classes per option, rotating, so that every class is tried
            start = (len(PARAMS) + cases) % len(classes)
            classes = (classes * 2)[start : start + CLASSES_PER_OPTION]
        for klass, values in classes:
            value = values[cases % len(values)]  # one per class, rotating through the class
            numeric_bad = _numeric_bad(kind, klass, value)
            check(world, (path, {flag: [value]}, numeric_bad), capsys, monkeypatch, tally)
            cases += 1
    print(f"\nvmtax {' '.join(path)}: {cases} cases: {dict(sorted(tally.items()))}")


# -- mixes of several options, drawn by hypothesis ---------------------------------------------


def _mix():
    def build(draw):
        path, param = draw(st.sampled_from(PARAMS))
        chosen = [param] + draw(
            st.lists(st.sampled_from([p for pp, p in PARAMS if pp == path]), max_size=2)
        )
        options: dict[str, list[str]] = {}
        judged: dict[str, list[bool]] = {}
        for p in chosen:
            kind = _kind(p)
            classes = _values(kind, Path("WORLD"))
            klass = draw(st.sampled_from(sorted(classes)))
            value = draw(st.sampled_from(classes[klass]))
            flag = _flag(p) or ""
            # An option given twice keeps its last value unless it is repeatable.
            keep = p.multiple or p.nargs == -1
            options[flag] = [*options.get(flag, [])[: None if keep else 0], value]
            judged[flag] = [*judged.get(flag, [])[: None if keep else 0],
                            _numeric_bad(kind, klass, value)]  # fmt: skip
        return path, options, any(any(v) for v in judged.values())

    return st.composite(lambda draw: build(draw))()


MIX_SETTINGS = settings(
    max_examples=MIXES,
    deadline=None,
    database=None,
    derandomize=not LONG,
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.fast
def test_mixes_of_bad_options(world, capsys, monkeypatch):
    monkeypatch.setenv("VMTAX_RUN_REPORT", "none")
    monkeypatch.delenv("VMTAX_DB", raising=False)
    _home(world, monkeypatch)
    tally: Counter = Counter()
    started = time.monotonic()

    @MIX_SETTINGS
    @given(_mix())
    def one(case):
        path, options, bad = case
        placed = {
            flag: [v.replace("WORLD", str(world)) for v in values]
            for flag, values in options.items()
        }
        check(world, (path, placed, bad), capsys, monkeypatch, tally)
        if LONG and sum(tally.values()) % 250 == 0:
            with capsys.disabled():
                print(f"{sum(tally.values())} cases, {time.monotonic() - started:.0f} s: "
                      f"{dict(sorted(tally.items()))}", flush=True)  # fmt: skip

    one()
    print(
        f"\n{sum(tally.values())} mixed cases in {time.monotonic() - started:.0f} s: "
        + ", ".join(f"exit {k}: {v}" for k, v in sorted(tally.items()))
    )


# -- signals at random points ------------------------------------------------------------------

SIGNAL_CASES = [
    ("run", ["run", "--probe", "cpu", "--runs", "30", "--duration", "0.3"]),
    ("report", ["report", "exp=1", "-o", "r.html", "--resamples", "20000"]),
    ("import", ["import", "STREAM"]),
    ("sweep", ["sweep", "--level", "L0", "--replicates", "1", "--no-intervals", "--steps", "1,2",
               "--warmup", "1", "--window", "4", "--interval", "0.5"]),
]  # fmt: skip


#: The console script (vmtax.entry), with a line on stdout once the CLI is loaded: its exit
#: skips the interpreter's teardown, in which a signal would find Python's handlers gone and
#: end the process silently, its work already done.
READY = "import vmtax.cli; print('ready', flush=True); from vmtax.entry import main; main()"


#: Each command gets both signals in the long form; in CI one signal each, SIGINT and
#: SIGTERM alternating over the commands (every case starts an interpreter and a store).
SIGNALS = [
    (name, argv, signum)
    for i, (name, argv) in enumerate(SIGNAL_CASES)
    for j, signum in enumerate((signal.SIGINT, signal.SIGTERM))
    if LONG or (i + j) % 2 == 0
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "argv", "signum"),
    SIGNALS,
    ids=[f"{name}-{signal.Signals(signum).name}" for name, _, signum in SIGNALS],
)
def test_a_signal_at_a_random_point(tmp_path, name, argv, signum):
    where = tmp_path
    db = where / "v.db"
    with Store.open(f"sqlite:///{db}") as store:
        populate(store, levels=("L0", "L1"), probes=("cpuid", "syscall"), runs=8,
                 iterations=2000)  # fmt: skip
    stream = where / "big.jsonl"
    # A real stream for import, long enough to be caught mid-way: 120 runs (17 MB) take about
    # 2.5 s to import on a quiet 2-core machine, past the latest signal point (1.5 s); 40 runs
    # were done in 1.1 s there, and a signal at the seeded 1.25 s found the command exiting.
    if name == "import":
        with stream.open("w") as out:
            agent = [str(find_agent()), "run", "cpuid", "--runs", "120", "--iterations", "20000"]
            subprocess.run(agent, stdout=out, check=True, timeout=120)
    rng = random.Random(f"{name}-{signum}")  # seeded: the same points in every CI run
    args = [str(stream) if a == "STREAM" else a for a in argv]
    env = {k: v for k, v in os.environ.items() if k != "VMTAX_DB"}
    env["VMTAX_RUN_REPORT"] = "none"
    env["XDG_DATA_HOME"] = str(where / "xdg")
    # The signal comes at a random point of the command's work, up to a second and a half
    # into it.
    proc = subprocess.Popen(
        [sys.executable, "-c", READY, *args, "--db", f"sqlite:///{db}"],
        cwd=where, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    time.sleep(rng.uniform(0.0, 1.5))
    assert proc.poll() is None, f"{name} ended before the signal: {proc.communicate()}"
    proc.send_signal(signum)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"{name} did not stop within 60 s of {signal.Signals(signum).name}")
    assert proc.returncode == 130, (proc.returncode, err[-1000:])
    lines = err.splitlines()
    # run adds how to resume: "interrupted: experiment 2 is marked interrupted; ..."
    assert lines and lines[-1].startswith("vmtax: error: interrupted"), err[-1000:]
    assert sum(line.startswith("vmtax: error:") for line in lines) == 1, err
    assert "Traceback" not in err
    assert not (where / "r.html").exists(), "a report cut short was left behind"
    with contextlib.suppress(FileNotFoundError):
        assert not [p for p in where.iterdir() if p.suffix in (".tmp", ".part")]


def _with_first_step(cli, monkeypatch, step, *argv: str):
    """``vmtax ARGV`` through the real CLI and its real signal handlers, with ``step`` in place
    of its first step (what it makes of the arguments) and no signal come yet."""
    import vmtax.cli
    from vmtax.cli import signals

    monkeypatch.setattr(vmtax.cli, "_exits_alone_is_counts", step)
    monkeypatch.setattr(signals, "INTERRUPTED", [False])
    return cli(*argv)


@pytest.mark.fast
def test_an_import_that_a_signal_broke_is_an_interruption(cli, monkeypatch):
    # Seen in CI: a SIGINT while scipy initialised came out of `vmtax import` as
    # "ImportError: initialization failed" and a traceback. The signal cannot be aimed at
    # that instant, so the import that breaks is planted; the signal's handler is the real one.
    from vmtax.cli import signals

    def broken(args):
        with contextlib.suppress(KeyboardInterrupt):
            signals.interrupt(signal.SIGINT, None)
        raise ImportError("initialization failed")

    res = _with_first_step(cli, monkeypatch, broken, "import", "x.jsonl")
    assert res.returncode == 130 and res.stderr == "vmtax: error: interrupted\n", res

    # Without a signal, an ImportError is a bug and stays one.
    def no_module(args):
        raise ImportError("no module named x")

    with pytest.raises(ImportError, match="no module named x"):
        _with_first_step(cli, monkeypatch, no_module, "import", "x.jsonl")


@pytest.mark.fast
def test_a_sigterm_inside_a_class_being_made_is_an_interruption(cli, monkeypatch):
    # Seen in CI: a SIGTERM while matplotlib was imported by `vmtax report` landed in a
    # descriptor's __set_name__, and Python handed it on as "RuntimeError: Error calling
    # __set_name__ ...", a traceback and exit 1. Here a real SIGTERM is sent from inside a
    # __set_name__, so the real handler raises there and Python wraps it as it did in CI.
    class Descriptor:
        def __set_name__(self, owner, name):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this ends

    def class_made_on_import(args):
        type("Formatter", (), {"format": Descriptor()})

    res = _with_first_step(cli, monkeypatch, class_made_on_import, "report", "exp=1")
    assert res.returncode == 130 and res.stderr == "vmtax: error: interrupted\n", res

    # Without a signal, the same RuntimeError is a bug and keeps its traceback.
    def failing_set_name(args):
        raise RuntimeError("Error calling __set_name__")

    with pytest.raises(RuntimeError, match="__set_name__"):
        _with_first_step(cli, monkeypatch, failing_set_name, "report", "exp=1")


@pytest.mark.fast
def test_an_interrupt_that_python_drops_is_raised_again(cli, monkeypatch):
    # Seen in a clean run of the suite: a SIGINT during `vmtax import` landed in the weakref
    # callback with which importlib cleans up a module's import lock. Python prints an
    # exception raised there ("Exception ignored in ...") and drops it, and the import went on
    # and exited 0. Here a real SIGINT is sent from inside a weakref callback; the step after
    # it waits long enough for the interrupt to come back, and would otherwise ask for the
    # version (exit 0).
    class Held:
        pass

    def callback(ref):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the handler raises before this ends, and Python drops it

    def dropped_then_on(args):
        held = Held()
        ref = weakref.ref(held, callback)
        del held  # the callback runs here
        time.sleep(5)
        assert ref() is None
        return ["--version"]

    res = _with_first_step(cli, monkeypatch, dropped_then_on, "import", "x.jsonl")
    assert res.returncode == 130 and res.stderr == "vmtax: error: interrupted\n", res
