"""The suite's longest guest boots, measured beside the other tests instead of before them.

Three `vmtax run`s take minutes each, most of it a nested stack booting under TCG: the
nested-KVM testbed at L1+L2 and at L3, and L2 under TCG inside TCG. Each is a child process
that only waits on its guests, so conftest.py starts the ones the collected tests need as
soon as collection ends, one at a time and in the order the tests come, and a test that
reads one waits for it (``measured``). The other tests run meanwhile: on a 2-core machine
the boots take the core the rest of the suite leaves idle. Beside a CPU load there is little
idle to take, and the tests that run beside a boot are slowed by it.

Each child has its own temporary directory (TMPDIR), so its files never meet the checks of
the tests that run beside it; ``drain`` waits for all of them before the session's own
leftover check.

With pytest-xdist the suite runs in several worker processes, and each collects every test:
only one of them (:func:`runs_here`: the first worker, or the only process) starts the runs,
and each finished run is written as a small JSON file in the session's shared directory
(conftest.py's ``SHARED_ENV``), which a test in another worker waits for. The shared directory
outlives every worker: the process that made it removes it when the session ends.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

# One hour: a loaded machine takes about 6 minutes for the L3 stack; a boot that hangs is
# retried by vmtax itself, so this is only the guard against a run that never ends.
TIMEOUT = 3600
#: The environment variable naming the session's directory that every xdist worker shares
#: (set by conftest.py before the workers start).
SHARED_ENV = "VMTAX_TEST_SHARED_DIR"


@dataclass(frozen=True)
class Measured:
    """A finished background run: its store's URL, its stderr and its exit status."""

    db: str
    stderr: str
    returncode: int


# The runs, by the fixture name the tests ask for: argv of `vmtax run` without --db.
RUNS: dict[str, list[str]] = {
    # One boot a level: the tests that share this run count exits, and a reboot of the
    # nested stack costs minutes (tests/test_levels.py covers boots). L2 has two vCPUs, for
    # wakeup's second thread; runs of up to 1 s give the probes some 200-270 iterations
    # each, so that the start-up's exits, subtracted once, are shared among many.
    "kvm_l1_l2_store": ["run", "--levels", "L1,L2", "--inner-accel", "kvm", "--preset",
                        "kvm-testbed-smp", "--probe", "cpuid", "--probe", "timer", "--probe",
                        "wakeup", "--probe", "io", "--probe", "mmio", "--probe", "portio",
                        "--runs", "3", "--duration", "1",
                        "--exits=trace", "--boots", "1"],
    "kvm_l3_store": ["run", "--levels", "L3", "--inner-accel", "kvm", "--probe", "cpuid",
                     "--runs", "2", "--duration", "2", "--exits=trace", "--boots", "1"],
    # One vCPU a level (seed-a-reserved): the boot is most of it, and L2 came up in 274 s
    # against 338 s with seed-c's two vCPUs a level on a 2-core machine (TCG in TCG).
    "tcg_l2_store": ["run", "--levels", "L2", "--inner-accel", "tcg", "--preset",
                     "seed-a-reserved", "--probe", "cpuid", "--runs", "2", "--boots", "1"],
}  # fmt: skip

_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="background-boot")
_futures: dict[str, Future[Measured]] = {}
_lock = threading.Lock()
_root: Path | None = None


def runs_here() -> bool:
    """Whether this process starts the background runs: the only process of a plain session,
    or the first worker of an xdist one (the others wait for its results)."""
    return os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0"


def _shared_root() -> Path | None:
    shared = os.environ.get(SHARED_ENV)
    return Path(shared) / "boots" if shared else None


def _result_file(name: str) -> Path | None:
    root = _shared_root()
    return root / f"{name}.json" if root is not None else None


def _measure(name: str, argv: list[str], root: Path) -> Measured:
    res = _run(name, argv, root)
    done = _result_file(name)
    if done is not None:  # for the tests of the other workers: written whole, then renamed
        part = done.with_suffix(".part")
        part.write_text(json.dumps(asdict(res)))
        part.rename(done)
    return res


def _run(name: str, argv: list[str], root: Path) -> Measured:
    from vmtax.targets.base import find_agent

    work = root / name
    (work / "tmp").mkdir(parents=True)
    db = f"sqlite:///{work / 'e.db'}"
    env = {**os.environ, "VMTAX_PROBE": str(find_agent()), "VMTAX_RUN_REPORT": "none",
           "TMPDIR": str(work / "tmp")}  # fmt: skip
    env.pop("VMTAX_DB", None)
    try:
        res = subprocess.run([sys.executable, "-c", "from vmtax.entry import main; main()", *argv,
                              "--db", db], env=env, capture_output=True, text=True,
                             timeout=TIMEOUT, stdin=subprocess.DEVNULL)  # fmt: skip
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        return Measured(db, f"timed out after {TIMEOUT} s\n{err or ''}", -1)
    return Measured(db, res.stderr, res.returncode)


def start(names: list[str]) -> None:
    """Queue the named runs (keys of RUNS), in this order, one at a time; nothing in a worker
    that does not run them (:func:`runs_here`)."""
    global _root
    if not runs_here():
        return
    with _lock:
        for name in names:
            if name in _futures:
                continue
            if _root is None:
                shared = _shared_root()
                if shared is not None:
                    shared.mkdir(parents=True, exist_ok=True)
                    _root = shared
                else:
                    _root = Path(tempfile.mkdtemp(prefix="pytest-boots-"))
            _futures[name] = _pool.submit(_measure, name, RUNS[name], _root)


def measured(name: str) -> Measured:
    """The named run's result, waiting for it (and starting it if nothing queued it); in a
    worker that does not run them, waiting for the first worker's result file."""
    if runs_here():
        start([name])
        return _futures[name].result()
    done = _result_file(name)
    if done is None:
        raise RuntimeError(f"{SHARED_ENV} is not set: conftest.py sets it for every session")
    deadline = time.monotonic() + 2 * TIMEOUT  # the runs before it, and its own
    while not done.exists():
        if time.monotonic() > deadline:
            return Measured("", f"no result from the worker that runs {name}", -1)
        time.sleep(1.0)
    return Measured(**json.loads(done.read_text()))


def drain() -> None:
    """Wait for every queued run, then remove their files (in a shared directory, the process
    that made it removes it, after every worker is done)."""
    global _root
    with _lock:
        futures = list(_futures.values())
    for future in futures:
        # A run no test came to read (the session stopped early) is not started; a started
        # one is waited for: its guests stop with it. A failure belongs to its test.
        if not future.cancel():
            future.exception()
    with _lock:
        if _root is not None and _root != _shared_root():
            shutil.rmtree(_root, ignore_errors=True)
        _root = None
        _futures.clear()
