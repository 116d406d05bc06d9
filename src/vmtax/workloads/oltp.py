"""oltp: ``sysbench oltp_read_write`` against a throwaway MariaDB or PostgreSQL (study A; C).

Each run starts a fresh server in its own temporary directory on a free loopback port, loads
``tables`` x ``table_size`` rows, runs sysbench for the run's duration and stops the server.
One value is one transaction's latency, timed in sysbench's own Lua
(``sysbench_event_times.lua``) so that every transaction is kept, in the order they ended;
the throughput is sysbench's transactions/s.

MariaDB starts from an empty data directory (InnoDB creates its files; ``--skip-grant-tables``
needs no system tables, and the database is a directory). PostgreSQL needs ``initdb``; on this
machine its data directory is copied from a template made once per controller process.

In vmtax's guests and on SSH hosts ``oltp.sh`` (made here, from the same server flags) does
the whole run: it starts the server in a fresh data directory (the guest's scratch disk, or
the host's scratch directory), loads the rows, runs sysbench, prints every transaction for
the agent's ``exec`` to read, and stops the server. Guest images carry ``mariadbd``, the
PostgreSQL server with ``initdb`` and ``createdb``, ``sysbench`` and its Lua scripts; an SSH
host needs them installed (Debian's paths).
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
from typing import TYPE_CHECKING

from vmtax.workloads.base import (
    TMP_PREFIX,
    Context,
    Needs,
    Param,
    Recipe,
    Server,
    ServerSpec,
    Workload,
    WorkloadError,
    free_port,
    tool,
)

if TYPE_CHECKING:
    import numpy as np

SYSBENCH_SCRIPTS = Path("/usr/share/sysbench")
MARIADBD = "/usr/sbin/mariadbd"
#: Runs PostgreSQL as postgres where the run is root (util-linux's: busybox's cannot).
SETPRIV = "/usr/bin/setpriv"
UTC_ZONE = Path("/usr/share/zoneinfo/UTC")
#: initdb's flags everywhere; the C locale, as a guest has no other (and like for like).
INITDB_FLAGS = ("-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C")
#: The server's error messages (it refuses to start without them).
MARIADB_MESSAGES = Path("/usr/share/mysql/english/errmsg.sys")
#: What a guest's oltp run uses: its script, and the port of its server on its loopback.
GUEST_DIR = Path("/srv/vmtax-oltp")
GUEST_PORT = 3306
#: A guest's scratch disk, where its data directory goes.
GUEST_SCRATCH = "/tmp"  # noqa: S108 - the guest's own disk, nobody else's /tmp
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


def pg_guest_parts() -> tuple[list[str], dict[str, bytes]]:
    """What a guest needs to run PostgreSQL, from this machine's (Debian's) installation:
    the server, initdb and createdb, the two modules initdb loads (PL/pgSQL, the snowball
    dictionaries), its share directory (less manual pages and contrib), the UTC zone file
    and setpriv to run it as postgres. Nothing when PostgreSQL is not installed here."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    if not found:
        return [], {}
    version = found[-1].parent.parent
    binaries = [str(version / "bin" / b) for b in ("postgres", "initdb", "createdb")]
    binaries += [str(version / "lib" / m) for m in ("plpgsql.so", "dict_snowball.so")]
    binaries.append(SETPRIV)
    share = Path("/usr/share/postgresql") / version.name
    files = {
        str(f)[1:]: f.read_bytes()
        for f in sorted(share.rglob("*"))
        if f.is_file() and f.relative_to(share).parts[0] not in {"man", "contrib"}
    }
    if UTC_ZONE.is_file():
        files[str(UTC_ZONE)[1:]] = UTC_ZONE.read_bytes()
    return binaries, files


def mariadbd_flags(datadir: str, port: int | str, buffer: str, user: str) -> list[str]:
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


def sysbench_conn(db: str, port: int | str) -> list[str]:
    """sysbench's options for the throwaway server: its driver, loopback, port, superuser
    and the ``sbtest`` database."""
    driver, user = ("mysql", "root") if db == "mariadb" else ("pgsql", "postgres")
    return [
        f"--db-driver={driver}",
        f"--{driver}-host=127.0.0.1",
        f"--{driver}-port={port}",
        f"--{driver}-user={user}",
        f"--{driver}-db=sbtest",
    ]


def postgres_flags(
    datadir: str, port: int | str, socket_dir: str, buffer_mb: object, connections: int | str
) -> list[str]:
    """The PostgreSQL server's flags, the same on this machine and on SSH hosts."""
    return [
        *("-D", datadir, "-p", str(port), "-c", "listen_addresses=127.0.0.1"),
        *("-c", f"unix_socket_directories={socket_dir}", "-c", f"shared_buffers={buffer_mb}MB"),
        *("-c", f"max_connections={connections}"),
    ]


def script() -> str:
    """oltp.sh, for guests (busybox sh) and SSH hosts (any POSIX sh): the same server and
    sysbench run as on this machine; prints one ``tx END_NS LATENCY_NS`` line per
    transaction in the order they ended, then ``rate: TX_PER_S``. Arguments: db table_size
    tables threads seconds events buffer_mb port base_dir (where the data directory goes);
    ``event_times.lua`` sits beside it."""
    flags = " ".join(mariadbd_flags('"$dir/data"', "$port", "${7}M", "root"))
    pg_flags = " ".join(postgres_flags('"$dir/data"', "$port", '"$dir"', "${7}", "$(($4 + 10))"))
    return f"""# vmtax oltp: a throwaway database server and sysbench, both on loopback.
bb=/bin/busybox
[ -x $bb ] || bb=  # not a vmtax guest: the host's own tools
here=$($bb dirname "$0")
db=$1 port=$8
dir=$($bb mktemp -d "$9/vmtax-oltp.XXXXXX") || exit 1
pid= stop=-9  # a throwaway MariaDB is killed, not shut down
trap '[ -n "$pid" ] && $bb kill $stop $pid && wait $pid 2>/dev/null; $bb rm -rf "$dir"' EXIT
fail() {{ echo "$1: $($bb tail -n 1 "$2")" >&2; exit 1; }}
if [ "$db" = pgsql ]; then
    # PostgreSQL refuses to run as root: as root, run it as postgres (setpriv execs, so
    # $pid is the server's own). Its immediate shutdown (QUIT) still removes its shared
    # memory, which a kill would leave behind.
    pg=$($bb ls -d /usr/lib/postgresql/*/bin 2>/dev/null | $bb tail -n 1)
    [ -n "$pg" ] || {{ echo "PostgreSQL is not installed here" >&2; exit 1; }}
    stop=-QUIT as=
    if [ "$($bb id -u)" = 0 ]; then
        as="{SETPRIV} --reuid=postgres --regid=postgres --clear-groups"
        $bb chown postgres "$dir"
    fi
    # TZ: a guest has no /etc/localtime, only the UTC zone file.
    TZ=UTC $as "$pg/initdb" -D "$dir/data" {" ".join(INITDB_FLAGS)} \\
        >"$dir/init.log" 2>&1 || fail "initdb failed" "$dir/init.log"
    $as "$pg/postgres" {pg_flags} >"$dir/server.log" 2>&1 &
    pid=$!
    ready="$dir/.s.PGSQL.$port"
    conn="{" ".join(sysbench_conn("pgsql", "$port"))}"
else
    $bb mkdir -p "$dir/data/sbtest"
    {MARIADBD} {flags} >"$dir/server.log" 2>&1 &
    pid=$!
    ready="$dir/data/mysqld.sock"
    conn="{" ".join(sysbench_conn("mariadb", "$port"))}"
fi
n=0
until [ -S "$ready" ]; do
    if ! $bb kill -0 $pid 2>/dev/null || [ $n -ge 300 ]; then
        fail "$db did not start" "$dir/server.log"
    fi
    $bb sleep 0.1
    n=$((n + 1))
done
if [ "$db" = pgsql ]; then
    n=0  # the socket appears a moment before the server takes queries
    until "$pg/createdb" -h 127.0.0.1 -p $port -U postgres sbtest >"$dir/createdb.log" 2>&1; do
        [ $n -ge 100 ] && fail "createdb failed" "$dir/createdb.log"
        $bb sleep 0.2
        n=$((n + 1))
    done
fi
sysbench="/usr/bin/sysbench --tables=$3 --table-size=$2 $conn"
$sysbench oltp_read_write prepare >"$dir/prepare.log" 2>&1 \\
    || fail "sysbench prepare failed" "$dir/prepare.log"
VMTAX_SB_SCRIPT={SYSBENCH_SCRIPTS}/oltp_read_write.lua VMTAX_SB_OUT="$dir/lat" \\
LUA_PATH="{SYSBENCH_SCRIPTS}/?.lua;;" $sysbench --threads=$4 --time=$5 --events=$6 \\
    "$here/event_times.lua" run >"$dir/run.log" 2>&1 || fail "sysbench run failed" "$dir/run.log"
$bb cat "$dir"/lat.* | $bb sort -n | $bb sed 's/^/tx /'
$bb sed -n 's/.*transactions:.*(\\([0-9.]*\\) per sec.*/rate: \\1/p' "$dir/run.log"
"""


def script_files() -> dict[str, bytes]:
    """oltp.sh and the event-timing wrapper it runs (relative paths)."""
    return {
        "oltp.sh": script().encode(),
        "event_times.lua": (
            resources.files("vmtax.workloads") / "sysbench_event_times.lua"
        ).read_bytes(),
    }


def guest_files() -> dict[str, bytes]:
    """oltp.sh, the event-timing wrapper, sysbench's two Lua scripts and the server's
    messages, for guest images (the last three only where this machine has them)."""
    files = {f"{str(GUEST_DIR)[1:]}/{rel}": data for rel, data in script_files().items()}
    for path in (
        SYSBENCH_SCRIPTS / "oltp_common.lua",
        SYSBENCH_SCRIPTS / "oltp_read_write.lua",
        MARIADB_MESSAGES,
    ):
        if path.is_file():
            files[str(path)[1:]] = path.read_bytes()
    return files


#: Read once: PostgreSQL's programs and files for guest images.
_PG_GUEST = pg_guest_parts()


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
    recipe = Recipe(
        programs=("sysbench", "mariadbd", "postgres", "initdb"),
        packages=("mariadb-server", "postgresql", "sysbench"),
        fedora=("mariadb-server", "postgresql-server", "sysbench"),
        binaries=(MARIADBD, "/usr/bin/sysbench", *_PG_GUEST[0]),
        files={**guest_files(), **_PG_GUEST[1]},
        checks=("bin:mariadbd", "path:/usr/lib/postgresql/*/bin/postgres", "bin:sysbench"),
        needs=Needs(server=True),
    )
    default_iterations = 1_000_000
    default_duration = 3.0
    #: The shortest run, seconds: a run of the quick suite's 0.15 s went to sysbench as 1 s and
    #: held about 18 transactions at L2, too few to tell its mean from the runs' spread.
    min_seconds = 5

    def execute(self, ctx: Context) -> Iterator[str]:
        db = str(ctx.params["db"])
        with ctx.target.place_server(server(ctx)) as placed:
            if placed.here is None:
                # Away from this machine oltp.sh does the whole run beside its server.
                script = f"{placed.directory}/oltp.sh"
                yield from by_script(ctx, script, placed.port, placed.scratch)
                return
            srv = placed.here
            conn = sysbench_conn(db, placed.port)
            common = [
                *conn,
                f"--tables={ctx.params['tables']}",
                f"--table-size={ctx.params['table_size']}",
            ]
            tool(["sysbench", "oltp_read_write", *common, "prepare"], timeout=ctx.left())
            values, ends, tps, wall = run_sysbench(ctx, srv, common)
        del ends
        yield from ctx.stream(values, wall_s=wall, throughput=tps, stopped_by="duration")


def server(ctx: Context) -> ServerSpec:
    """The run's database server: started here by vmtax (a data directory first), or by
    oltp.sh (its files copied to an SSH host, carried by a guest's image)."""
    db = str(ctx.params["db"])

    def start_here(srv: Server) -> int:
        if db == "mariadb":
            start_mariadb(srv, ctx)
        else:
            start_pgsql(srv, ctx)
        return srv.port

    return ServerSpec(
        f"oltp-{db}",
        files=lambda _dir, _port: script_files(),
        owner="mysql" if db == "mariadb" else "postgres",
        # A throwaway database: MariaDB is killed, not shut down (its directory is removed
        # anyway); PostgreSQL's immediate shutdown (QUIT) still removes its shared memory,
        # which a kill would leave behind.
        stop_signal=signal.SIGKILL if db == "mariadb" else signal.SIGQUIT,
        guest_dir=str(GUEST_DIR),
        guest_port=GUEST_PORT,
        guest_scratch=GUEST_SCRATCH,
        start_here=start_here,
    )


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
        f"--time={max(Oltp.min_seconds, round(ctx.duration))}",
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
    import numpy as np  # heavy: numpy, only once sysbench has run (not for doctor)

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
    return sysbench_conn("mariadb", port)


def by_script(ctx: Context, script_path: str, port: int, base: str) -> Iterator[str]:
    """The run in a vmtax guest or on an SSH host: oltp.sh through the agent's exec, its
    data directory under ``base``, every transaction kept."""
    p = ctx.params
    seconds = max(Oltp.min_seconds, round(ctx.duration))
    args = [p["db"], p["table_size"], p["tables"], p["threads"], seconds]
    args += [ctx.iterations, p["buffer_mb"], port, base]
    cmd = " ".join(["/bin/sh", script_path, *map(str, args)])
    yield from ctx.agent("exec", {"cmd": cmd, "values_prefix": "tx", "rate_line": "rate:"})


def start_pgsql(srv: Server, ctx: Context) -> list[str]:
    data = srv.dir / "data"
    _copy_datadir(
        _template(
            "pgsql",
            srv.owner,
            lambda d: [pg_bin("initdb"), "-D", str(d), *INITDB_FLAGS],
        ),
        data,
        srv.owner,
    )
    data.chmod(0o700)
    port = free_port()
    flags = postgres_flags(
        str(data), port, str(srv.dir), ctx.params["buffer_mb"], int(ctx.params["threads"]) + 10
    )
    srv.start([pg_bin("postgres"), *flags], port=port)
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
    return sysbench_conn("pgsql", port)
