"""oltp: ``sysbench oltp_read_write`` against a throwaway MariaDB or PostgreSQL (study A; C).

Each run starts a fresh server in its own temporary directory on a free loopback port, loads
``tables`` x ``table_size`` rows, runs sysbench for the run's duration and stops the server.
One value is one transaction's latency, timed in sysbench's own Lua
(``sysbench_event_times.lua``) so that every transaction is kept, in the order they ended;
the throughput is sysbench's transactions/s.

MariaDB starts from an empty data directory (InnoDB creates its files; ``--skip-grant-tables``
needs no system tables, and the database is a directory), the same way on this machine and in
vmtax's guests, whose images carry ``mariadbd``, ``sysbench`` and its Lua scripts: there
``oltp.sh`` (made here, from the same server flags) does the run on the scratch disk and the
agent's ``exec`` reads every transaction it prints. PostgreSQL needs ``initdb``; its data
directory is copied from a template made once per controller process, and it runs on this
machine only.
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
    is_local,
    local_only,
    tool,
)

SYSBENCH_SCRIPTS = Path("/usr/share/sysbench")
MARIADBD = "/usr/sbin/mariadbd"
#: The server's error messages (it refuses to start without them).
MARIADB_MESSAGES = Path("/usr/share/mysql/english/errmsg.sys")
#: What a guest's oltp run uses: its script, and the port of its server on its loopback.
GUEST_DIR = Path("/srv/vmtax-oltp")
GUEST_PORT = 3306
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


def mariadbd_flags(datadir: str, port: int, buffer: str, user: str) -> list[str]:
    """The server's flags, the same on this machine and in guests: loopback only, no grant
    tables, binary log or name lookups, a small redo log (MariaDB's default 96 MiB would be
    most of the data directory)."""
    return [
        "--no-defaults",
        f"--datadir={datadir}",
        f"--socket={datadir}/mysqld.sock",
        f"--pid-file={datadir}/mysqld.pid",
        f"--port={port}",
        "--bind-address=127.0.0.1",
        "--skip-grant-tables",
        "--skip-log-bin",
        "--skip-name-resolve",
        f"--innodb-buffer-pool-size={buffer}",
        "--innodb-log-file-size=8M",
        f"--user={user}",
    ]


def mysql_conn(port: int) -> list[str]:
    return [
        "--db-driver=mysql",
        "--mysql-host=127.0.0.1",
        f"--mysql-port={port}",
        "--mysql-user=root",
        "--mysql-db=sbtest",
    ]


def guest_script() -> str:
    """oltp.sh for guests (busybox sh): the same server and sysbench run as on this
    machine, on the scratch disk; prints one ``tx END_NS LATENCY_NS`` line per transaction
    in the order they ended, then ``rate: TX_PER_S``. Arguments: table_size tables threads
    seconds events buffer_mb."""
    flags = " ".join(mariadbd_flags('"$dir/data"', GUEST_PORT, "${6}M", "root"))
    conn = " ".join(mysql_conn(GUEST_PORT))
    sysbench = f"/usr/bin/sysbench --tables=$2 --table-size=$1 {conn}"
    return f"""# vmtax oltp in a guest: MariaDB on the scratch disk (/tmp), sysbench on loopback.
bb=/bin/busybox
dir=$($bb mktemp -d /tmp/vmtax-oltp.XXXXXX) || exit 1
pid=
trap '[ -n "$pid" ] && $bb kill -9 $pid; $bb rm -rf "$dir"' EXIT
$bb mkdir -p "$dir/data/sbtest"
{MARIADBD} {flags} >"$dir/server.log" 2>&1 &
pid=$!
n=0
until [ -S "$dir/data/mysqld.sock" ]; do
    if ! $bb kill -0 $pid 2>/dev/null || [ $n -ge 300 ]; then
        echo "mariadbd did not start: $($bb tail -n 1 "$dir/server.log")" >&2
        exit 1
    fi
    $bb sleep 0.1
    n=$((n + 1))
done
{sysbench} oltp_read_write prepare >"$dir/prepare.log" 2>&1 \\
    || {{ echo "sysbench prepare failed: $($bb tail -n 1 "$dir/prepare.log")" >&2; exit 1; }}
VMTAX_SB_SCRIPT={SYSBENCH_SCRIPTS}/oltp_read_write.lua VMTAX_SB_OUT="$dir/lat" \\
LUA_PATH="{SYSBENCH_SCRIPTS}/?.lua;;" {sysbench} --threads=$3 --time=$4 --events=$5 \\
    {GUEST_DIR}/event_times.lua run >"$dir/run.log" 2>&1 \\
    || {{ echo "sysbench run failed: $($bb tail -n 1 "$dir/run.log")" >&2; exit 1; }}
$bb cat "$dir"/lat.* | $bb sort -n | $bb sed 's/^/tx /'
$bb sed -n 's/.*transactions:.*(\\([0-9.]*\\) per sec.*/rate: \\1/p' "$dir/run.log"
"""


def guest_files() -> dict[str, bytes]:
    """oltp.sh, the event-timing wrapper, sysbench's two Lua scripts and the server's
    messages, for guest images (the last three only where this machine has them)."""
    files = {
        str(GUEST_DIR / "oltp.sh")[1:]: guest_script().encode(),
        str(GUEST_DIR / "event_times.lua")[1:]: (
            resources.files("vmtax.workloads") / "sysbench_event_times.lua"
        ).read_bytes(),
    }
    for path in (
        SYSBENCH_SCRIPTS / "oltp_common.lua",
        SYSBENCH_SCRIPTS / "oltp_read_write.lua",
        MARIADB_MESSAGES,
    ):
        if path.is_file():
            files[str(path)[1:]] = path.read_bytes()
    return files


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
    needs = ("sysbench", "mariadbd", "postgres", "initdb")
    guest_binaries = (MARIADBD, "/usr/bin/sysbench")
    guest_files = guest_files()
    default_iterations = 1_000_000
    default_duration = 3.0

    def execute(self, ctx: Context) -> Iterator[str]:
        db = str(ctx.params["db"])
        local_only(ctx, guests=True)
        if db == "pgsql" and not is_local(ctx.target):
            raise WorkloadError(
                f"db=pgsql runs on this machine (L0) only: {ctx.target.name} carries MariaDB, "
                "not PostgreSQL (use db=mariadb there)"
            )
        if not is_local(ctx.target):
            yield from in_guest(ctx)
            return
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
    # An empty data directory and the database as a directory in it (see the module's doc).
    (data / "sbtest").mkdir(parents=True)
    if srv.owner:
        subprocess.run(["chown", "-R", f"{srv.owner}:{srv.owner}", str(data)], check=True)
    port = free_port()
    buffer = f"{ctx.params['buffer_mb']}M"
    argv = [shutil.which("mariadbd") or MARIADBD]
    srv.start(argv + mariadbd_flags(str(data), port, buffer, srv.owner or "root"), port=port)
    return mysql_conn(port)


def in_guest(ctx: Context) -> Iterator[str]:
    """The run in a vmtax guest: oltp.sh through the agent's exec, every transaction kept."""
    p = ctx.params
    args = [p["table_size"], p["tables"], p["threads"], max(1, round(ctx.duration))]
    args += [ctx.iterations, p["buffer_mb"]]
    cmd = " ".join(["/bin/sh", str(GUEST_DIR / "oltp.sh"), *map(str, args)])
    yield from ctx.agent("exec", {"cmd": cmd, "values_prefix": "tx", "rate_line": "rate:"})


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
