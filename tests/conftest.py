"""Shared fixtures: stores on SQLite and on a real PostgreSQL server started for the session."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# A test session started as a background job of a non-interactive shell inherits SIGINT
# ignored, and so would every vmtax it starts: the Ctrl-C tests would then test nothing. A
# handled SIGINT here is reset to the default in each child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

PG_USER = "vmtax"
PG_PASSWORD = "pg-secret-7f3a"  # a real password, so redaction is tested against a real server


@pytest.fixture
def cli_agent() -> str | None:
    """The agent the in-process CLI is given (VMTAX_PROBE); modules that run probes override
    this fixture with the built agent."""
    return None


@pytest.fixture
def cli(capsys, monkeypatch, cli_agent):
    """The real `vmtax` entry point, in this process: the console script's code path without
    an interpreter start-up per call. VMTAX_DB is unset, so a call's --db is its only store;
    ``agent_path`` gives one call another agent binary."""
    from vmtax.cli import main

    def call(*args: str, agent_path: str | None = None) -> subprocess.CompletedProcess:
        monkeypatch.delenv("VMTAX_DB", raising=False)
        if agent_path or cli_agent:
            monkeypatch.setenv("VMTAX_PROBE", agent_path or cli_agent)
        monkeypatch.setattr(sys, "argv", ["vmtax", *args])
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_info:
            main()
        out, err = capsys.readouterr()
        code = exit_info.value.code
        return subprocess.CompletedProcess(args, code if isinstance(code, int) else 1, out, err)

    return call


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """URL of a SQLite store file that does not exist yet."""
    return f"sqlite:///{tmp_path / 'vmtax.db'}"


@pytest.fixture
def store(sqlite_url: str):
    """An empty, migrated SQLite store."""
    from vmtax.store import Store

    s = Store.open(sqlite_url)
    yield s
    s.close()


def _pg_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    if not found:
        pytest.fail(
            "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin: "
            "scripts/test installs them (apt-get install postgresql)",
            pytrace=False,
        )
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres() -> dict:
    # postgres refuses to run as root: run its programs as the postgres system user.
    try:
        pw = pwd.getpwnam("postgres")
    except KeyError:
        pytest.fail("no 'postgres' system user: scripts/test installs postgresql", pytrace=False)
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": [], "env": {
        "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": pw.pw_dir,
    }}  # fmt: skip


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[dict]:
    """A throwaway PostgreSQL server on 127.0.0.1 (and a private unix socket directory)."""
    bindir = _pg_bin()
    # Not under pytest's tmp dir: that is private to root and postgres could not enter it.
    root = Path(tempfile.mkdtemp(prefix="vmtax-pg-"))
    shutil.chown(root, "postgres", "postgres")
    data, sockets, pwfile = root / "data", root / "sock", root / "pw"
    sockets.mkdir()
    shutil.chown(sockets, "postgres", "postgres")
    pwfile.write_text(PG_PASSWORD + "\n")
    shutil.chown(pwfile, "postgres", "postgres")
    run = _as_postgres()
    subprocess.run(
        [str(bindir / "initdb"), "-D", str(data), "-U", PG_USER, f"--pwfile={pwfile}",
         "--auth-local=scram-sha-256", "--auth-host=scram-sha-256", "-E", "UTF8",
         "--no-sync"],
        check=True, capture_output=True, cwd=root, **run,
    )  # fmt: skip
    port = _free_port()
    log = (root / "server.log").open("w")
    server = subprocess.Popen(
        [str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(sockets),
         "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off",
         "-c", "synchronous_commit=off"],
        stdout=log, stderr=subprocess.STDOUT, cwd=root, **run,
    )  # fmt: skip
    try:
        _wait_ready(port, server, root / "server.log")
        yield {"host": "127.0.0.1", "port": port, "user": PG_USER, "password": PG_PASSWORD,
               "socket_dir": str(sockets)}  # fmt: skip
    finally:
        server.send_signal(signal.SIGINT)  # fast shutdown: do not wait for leaked clients
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
        shutil.rmtree(root, ignore_errors=True)


def _wait_ready(port: int, server: subprocess.Popen, log: Path) -> None:
    import psycopg

    deadline = time.monotonic() + 30
    while True:
        if server.poll() is not None:
            pytest.fail(f"postgres exited at start: {log.read_text()[-2000:]}", pytrace=False)
        try:
            psycopg.connect(
                host="127.0.0.1", port=port, user=PG_USER, password=PG_PASSWORD,
                dbname="postgres", connect_timeout=2,
            ).close()  # fmt: skip
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                pytest.fail(f"postgres did not start: {log.read_text()[-2000:]}", pytrace=False)
            time.sleep(0.1)


_db_counter = iter(range(1, 1_000_000))


@pytest.fixture
def postgres_url(postgres_server: dict) -> Iterator[str]:
    """URL (with password) of a fresh, empty database on the session's PostgreSQL server."""
    import psycopg

    name = f"t{os.getpid()}_{next(_db_counter)}"
    params = {k: postgres_server[k] for k in ("host", "port", "user", "password")}
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    s = postgres_server
    yield f"postgresql://{s['user']}:{s['password']}@{s['host']}:{s['port']}/{name}"
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The same test on a SQLite file and on a real PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'vmtax.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture(autouse=True)
def _no_report_after_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """`vmtax run` writes a report of each experiment it makes (VMTAX_RUN_REPORT); the tests
    that measure do not need one each, so it is off unless a test turns it on (test_readme)."""
    monkeypatch.setenv("VMTAX_RUN_REPORT", "none")


@pytest.fixture
def netns_fleet(tmp_path: Path) -> Iterator:
    """A factory: ``netns_fleet(n)`` starts n sshd hosts, each in its own network namespace
    (see test_fleet_netns.py); all are torn down, and checked gone, after the test."""
    from test_fleet_netns import NetnsFleet

    made: list[NetnsFleet] = []

    def make(n: int) -> NetnsFleet:
        fleet = NetnsFleet(tmp_path / f"fleet{len(made)}", n)
        made.append(fleet)
        fleet.start()
        return fleet

    yield make
    for fleet in made:
        fleet.teardown()
    for fleet in made:
        assert fleet.leftovers() == [], "the fleet left something behind"


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator:
    """A real OpenSSH server on 127.0.0.1 that trusts this test's key (test_ssh_support)."""
    from test_ssh_support import Sshd, needs_sshd

    needs_sshd()
    server = Sshd(tmp_path / "sshd")
    server.start()
    server.trust()
    yield server
    server.stop()


def _measured(name: str) -> tuple[str, str]:
    """A background run's store URL and stderr (the recorder's notes): tests/background.py
    started it when collection ended; this waits for it. The CLI has stopped every guest when
    it returns."""
    import background

    res = background.measured(name)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.db, res.stderr


def _reads_a_background_run(item: pytest.Item) -> bool:
    import background

    return any(name in background.RUNS for name in getattr(item, "fixturenames", ()))


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the tiers settled here
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test's tier is settled, or the collection refused (tests/tiers.py), and a slow
    test is given its pytest-xdist group (``_worker_group``). The tests
    that read a background run go last, in their own order: the boots then run beside the
    rest of the suite instead of holding a test up while one core idles (in CI the
    L2-under-TCG-in-TCG test waited 179 s for its run in the middle of the suite)."""
    import tiers

    tiers.settle(items)
    items.sort(key=_reads_a_background_run)
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.xdist_group(_worker_group(item)))


def _worker_group(item: pytest.Item) -> str:
    """The group a slow test goes to one pytest-xdist worker with (``--dist loadgroup``): its
    module, so that a module's shared guest, image or server is made once; the tests that read
    a background run in a group of their own, which comes last with them, so that no worker
    waits for a boot while the rest of its module could run."""
    module = item.nodeid.split("::", 1)[0]
    return f"{module}::background" if _reads_a_background_run(item) else module


@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_group_ids(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    """The ``@group`` suffix of a grouped test's node id, which is all the loadgroup scheduler
    sees of the group. pytest-xdist's worker writes it into ``item._nodeid`` (3.8.0); from
    pytest 9.2 on the node id is read from ``item._id`` and that write is lost, so every test
    would be scheduled on its own. This runs after xdist's hook and adds the suffix where its
    write did not land; where it did (pytest before 9.2), there is nothing to add."""
    if not getattr(config.option, "loadgroup", False):  # set in xdist's workers
        return
    for item in items:
        names = {
            str(m.args[0] if m.args else m.kwargs.get("name", "default"))
            for m in item.iter_markers("xdist_group")
        }
        if names:
            _set_group_suffix(item, "_".join(sorted(names)))


def _set_group_suffix(item: pytest.Item, group: str) -> None:
    """Give the item's node id the suffix ``@group`` (xdist's format), unless it has it."""
    if item.nodeid.endswith(f"@{group}"):
        return
    nodeid = f"{item.nodeid}@{group}"
    structured = getattr(item, "_id", None)  # pytest >= 9.2: a NodeId
    if structured is not None:
        item._id = type(structured).parse(nodeid)
    else:
        item._nodeid = nodeid
    assert item.nodeid == nodeid, "the node id could not be given its xdist group"


_SHARED_MADE_HERE: list[Path] = []


def pytest_configure(config: pytest.Config) -> None:
    """The session's shared directory (tests/background.py): made by the first process, before
    pytest-xdist starts its workers, which inherit it. A worker also gets its own temporary
    directory there (TMPDIR): the session-wide checks of what vmtax leaves in the temporary
    directory (test_cleanup) then see only their own worker's files, not a neighbour's guest
    that is still running."""
    import background

    if background.SHARED_ENV not in os.environ:
        shared = Path(tempfile.mkdtemp(prefix="pytest-vmtax-shared-"))
        shared.chmod(0o755)  # a worker's TMPDIR below it is entered by the postgres user
        os.environ[background.SHARED_ENV] = str(shared)
        _SHARED_MADE_HERE.append(shared)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        own = Path(os.environ[background.SHARED_ENV]) / f"tmp-{worker}"
        own.mkdir(exist_ok=True)
        own.chmod(0o1777)  # as /tmp: the PostgreSQL fixture makes its directory here
        os.environ["TMPDIR"] = str(own)
        tempfile.tempdir = None  # gettempdir() reads TMPDIR again


def pytest_unconfigure(config: pytest.Config) -> None:
    import background

    for shared in _SHARED_MADE_HERE:
        shutil.rmtree(shared, ignore_errors=True)
        os.environ.pop(background.SHARED_ENV, None)
    _SHARED_MADE_HERE.clear()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the long boots the collected tests need (tests/background.py), in test order;
    none with -m fast, since a test that reads one is slow (tests/tiers.py)."""
    import background

    if session.config.option.collectonly:
        return
    needed: list[str] = []
    for item in filter(_reads_a_background_run, session.items):
        for name in item.fixturenames:
            if name in background.RUNS and name not in needed:
                needed.append(name)
    background.start(needed)


def pytest_sessionfinish(session: pytest.Session) -> None:
    import background

    background.drain()


@pytest.fixture(scope="session")
def kvm_l1_l2_store() -> tuple[str, str]:
    """One `vmtax run` of the nested-KVM testbed, measured once for the tests that read it
    (test_hostprof_testbed, test_levels_kvm): cpuid, timer, wakeup, io, mmio and portio at
    L1 (TCG) and at L2 (KVM inside it, two vCPUs), three runs each, L2's exits recorded by
    L1's KVM (traced, and counted by KVM's own counters around each trace). Its store's URL
    and its stderr."""
    return _measured("kvm_l1_l2_store")


@pytest.fixture(scope="session")
def kvm_l3_store() -> tuple[str, str]:
    """One `vmtax run --levels L3 --inner-accel kvm` (L3 under L2's KVM under L1's KVM under
    TCG), measured once for the L3 tests of test_levels_kvm and test_hostprof_testbed: cpuid,
    two runs of 2 s, L3's exits traced by both host sides, L1's KVM and L2's. A boot of
    this stack costs minutes. Its store's URL and its stderr."""
    return _measured("kvm_l3_store")


@pytest.fixture(scope="session")
def tcg_l2_store() -> tuple[str, str]:
    """One `vmtax run --levels L2 --inner-accel tcg`: L2 under TCG inside an L1 under TCG,
    two cpuid runs (test_levels_nested). Its store's URL and its stderr."""
    return _measured("tcg_l2_store")
