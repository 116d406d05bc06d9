"""oltp: ``sysbench oltp_read_write`` against a throwaway MariaDB or PostgreSQL (study A; C).

Each run initialises a fresh data directory in its own temporary directory (from a template
made once per controller process, since ``mariadb-install-db`` alone takes seconds), starts
the server on a free loopback port, loads ``tables`` x ``table_size`` rows, runs sysbench for
the run's duration and stops the server. One value is one transaction's latency, timed in
sysbench's own Lua (``sysbench_event_times.lua``) so that every transaction is kept, in the
order they ended; the throughput is sysbench's transactions/s.
"""

from __future__ import annotations

import atexit
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path

import numpy as np

from vmtax.workloads.base import (
    TMP_PREFIX,
    Context,
    Param,
    Server,
    Workload,
    WorkloadError,
    free_port,
    local_only,
    tool,
)

SYSBENCH_SCRIPTS = Path("/usr/share/sysbench")
#: MariaDB's default 96 MiB redo log would be most of every copied data directory.
SMALL_REDO_LOG = ("--innodb-log-file-size=8M",)
_TEMPLATES: dict[str, Path] = {}
_TEMPLATE_LOCK = threading.Lock()
_TEMPLATE_ROOT: list[Path] = []


def _template_root() -> Path:
    if not _TEMPLATE_ROOT:
        root = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}templates-"))
        root.chmod(0o755)
        _TEMPLATE_ROOT.append(root)
        atexit.register(remove_templates)
    return _TEMPLATE_ROOT[0]


def remove_templates() -> None:
    """Remove the data-directory templates (done at exit; tests call it directly)."""
    with _TEMPLATE_LOCK:
        for root in _TEMPLATE_ROOT:
            shutil.rmtree(root, ignore_errors=True)
        _TEMPLATE_ROOT.clear()
        _TEMPLATES.clear()


def pg_bin(name: str) -> str:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    if found:
        return str(found[-1])
    return shutil.which(name) or name


class Oltp(Workload):
    name = "oltp"
    summary = "one sysbench oltp_read_write transaction against a real database server"
    mechanism = "mixed: system calls, loopback network, page faults and disk I/O of a database"
    unit = "ns"
    better = "lower"
    throughput_unit = "tx/s"
    params = (
        Param("db", "mariadb", "database server", ("mariadb", "pgsql")),
        Param("table_size", 10000, "rows per table"),
        Param("tables", 1, "tables"),
        Param("threads", 2, "sysbench threads (concurrent transactions)"),
        Param("buffer_mb", 64, "server buffer pool / shared buffers in MiB"),
    )
    presets = {
        # Study A: MySQL with 1,000,000 rows, read-write, 4 threads (30 minutes per run there).
        "study-a": {"table_size": 1_000_000, "threads": 4},
        # Study C: MySQL with SysBench, 200 parallel transactions.
        "study-c": {"table_size": 1_000_000, "threads": 200},
    }
    needs = ("sysbench", "mariadbd", "mariadb-install-db", "postgres", "initdb")
    default_iterations = 1_000_000
    default_duration = 3.0

    def execute(self, ctx: Context) -> Iterator[str]:
        local_only(ctx)
        db = str(ctx.params["db"])
        owner = "mysql" if db == "mariadb" else "postgres"
        # A throwaway database: killed, not shut down (its directory is removed anyway).
        with Server(f"oltp-{db}", owner=owner, stop_signal=signal.SIGKILL) as srv:
            conn = start_mariadb(srv, ctx) if db == "mariadb" else start_pgsql(srv, ctx)
            common = [
                *conn,
                f"--tables={ctx.params['tables']}",
                f"--table-size={ctx.params['table_size']}",
            ]
            tool(["sysbench", "oltp_read_write", *common, "prepare"], timeout=ctx.left())
            values, ends, tps, wall = run_sysbench(ctx, srv, common)
        del ends
        yield from ctx.stream(values, wall_s=wall, throughput=tps, stopped_by="duration")


def run_sysbench(
    ctx: Context, srv: Server, common: list[str]
) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Run oltp_read_write with every transaction timed; (latencies ns, end times, tx/s, s)."""
    out_prefix = srv.dir / "lat"
    script = resources.files("vmtax.workloads") / "sysbench_event_times.lua"
    argv = [
        "sysbench",
        str(script),
        *common,
        f"--threads={ctx.params['threads']}",
        f"--time={max(1, round(ctx.duration))}",
        f"--events={ctx.iterations}",
        "--percentile=95",
        "run",
    ]
    text = tool(
        argv,
        timeout=ctx.left(),
        env={
            "VMTAX_SB_SCRIPT": str(SYSBENCH_SCRIPTS / "oltp_read_write.lua"),
            "VMTAX_SB_OUT": str(out_prefix),
            "LUA_PATH": f"{SYSBENCH_SCRIPTS}/?.lua;;",
        },
    )
    tps, wall = parse_sysbench(text)
    rows = [np.loadtxt(p, dtype=np.float64, ndmin=2) for p in srv.dir.glob("lat.*")]
    rows = [r for r in rows if r.size]
    if not rows:
        raise WorkloadError("sysbench ran no transaction")
    both = np.concatenate(rows)
    order = np.argsort(both[:, 0], kind="stable")
    return both[order, 1], both[order, 0], tps, wall


def parse_sysbench(text: str) -> tuple[float, float]:
    """(transactions per second, total time s) from sysbench's report."""
    tps = wall = None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("transactions:") and "per sec" in s:
            tps = float(s.split("(")[1].split()[0])
        elif s.startswith("total time:"):
            wall = float(s.split(":")[1].strip().rstrip("s"))
    if tps is None or wall is None:
        raise WorkloadError("sysbench printed no transaction rate")
    return tps, wall


def _template(key: str, owner: str | None, init: Callable[[Path], list[str]]) -> Path:
    """A data directory initialised once per process by ``init(datadir)``, to be copied."""
    with _TEMPLATE_LOCK:
        if key not in _TEMPLATES:
            scratch = Server(f"{key}-init", owner=owner)
            try:
                argv = init(scratch.dir / "data")
                scratch.run(argv, Path(argv[0]).name)
                path = _template_root() / key
                shutil.copytree(scratch.dir / "data", path, symlinks=True)
            finally:
                scratch.stop()
            _TEMPLATES[key] = path
        return _TEMPLATES[key]


def _copy_datadir(template: Path, dest: Path, owner: str | None) -> None:
    shutil.copytree(template, dest, symlinks=True)
    if owner:
        subprocess.run(["chown", "-R", f"{owner}:{owner}", str(dest)], check=True)


def start_mariadb(srv: Server, ctx: Context) -> list[str]:
    data = srv.dir / "data"
    _copy_datadir(
        _template(
            "mariadb",
            srv.owner,
            lambda d: [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={d}",
                f"--user={srv.owner or 'root'}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                *SMALL_REDO_LOG,
            ],
        ),
        data,
        srv.owner,
    )
    port = free_port()
    srv.start(
        [
            shutil.which("mariadbd") or "/usr/sbin/mariadbd",
            "--no-defaults",
            f"--datadir={data}",
            f"--socket={srv.dir / 'mysqld.sock'}",
            f"--port={port}",
            "--bind-address=127.0.0.1",
            "--skip-grant-tables",
            "--skip-log-bin",
            "--skip-name-resolve",
            f"--innodb-buffer-pool-size={ctx.params['buffer_mb']}M",
            *SMALL_REDO_LOG,
            f"--pid-file={srv.dir / 'mysqld.pid'}",
            *([f"--user={srv.owner}"] if srv.owner else []),
        ],
        port=port,
    )
    tool(
        [
            "mariadb",
            "--no-defaults",
            "-h127.0.0.1",
            f"-P{port}",
            "-uroot",
            "-e",
            "CREATE DATABASE sbtest",
        ],
        timeout=30,
    )
    return [
        "--db-driver=mysql",
        "--mysql-host=127.0.0.1",
        f"--mysql-port={port}",
        "--mysql-user=root",
        "--mysql-db=sbtest",
    ]


def start_pgsql(srv: Server, ctx: Context) -> list[str]:
    data = srv.dir / "data"
    _copy_datadir(
        _template(
            "pgsql",
            srv.owner,
            lambda d: [
                pg_bin("initdb"),
                "-D",
                str(d),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        ),
        data,
        srv.owner,
    )
    data.chmod(0o700)
    port = free_port()
    srv.start(
        [
            pg_bin("postgres"),
            "-D",
            str(data),
            "-p",
            str(port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={srv.dir}",
            "-c",
            f"shared_buffers={ctx.params['buffer_mb']}MB",
            "-c",
            f"max_connections={int(ctx.params['threads']) + 10}",
        ],
        port=port,
    )
    # The port accepts a moment before the server takes queries; createdb retries briefly.
    deadline = time.monotonic() + 30
    while True:
        try:
            tool(
                [
                    pg_bin("createdb"),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(port),
                    "-U",
                    "postgres",
                    "sbtest",
                ],
                timeout=30,
            )
            break
        except WorkloadError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    return [
        "--db-driver=pgsql",
        "--pgsql-host=127.0.0.1",
        f"--pgsql-port={port}",
        "--pgsql-user=postgres",
        "--pgsql-db=sbtest",
    ]
