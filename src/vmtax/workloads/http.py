"""http: lighttpd serving study D's 44-byte page or study C's 41 KB file, every request timed.

lighttpd starts on a free loopback port with its own configuration and document root in a
temporary directory; the client is the agent's ``http`` probe (HTTP/1.1 keep-alive GETs, one
connection per thread), so one value is one request's latency and the run keeps them all.
Compare with ``vmtax compare`` for the shift and ``vmtax artifacts`` / the report for the
change of shape (Anderson-Darling, bimodality).

In a guest the image carries lighttpd, its configuration and both files (``guest_files``);
the agent starts lighttpd on the guest's loopback for the session and stops it after. On an
SSH host (which must have lighttpd installed) the same files go to a fresh directory there,
with a port free on its loopback, and the agent starts and stops lighttpd the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from vmtax.workloads.base import (
    Context,
    Param,
    ParamValue,
    Server,
    Workload,
    free_port,
    is_local,
    is_ssh,
    on_ssh_host,
    servers_here,
)

#: Study D's index.html was 44 bytes; study C's Apache file was 41 KB.
FILES = {"page44": ("index.html", 44), "file41k": ("file41k.bin", 41 * 1024)}
#: Where a guest's lighttpd keeps its files, and the port it listens on (nothing else runs
#: in a guest).
GUEST_DIR = Path("/srv/vmtax-http")
GUEST_PORT = 8080
LIGHTTPD = "/usr/sbin/lighttpd"


def body(size: int) -> str:
    """A file of exactly ``size`` bytes."""
    return ("vmtax " * (size // 6 + 1))[: size - 1] + "\n"


def config(root: Path, port: int, errorlog: Path) -> str:
    """lighttpd's configuration: both files under ``root``, keep-alive without limits."""
    return "\n".join(
        [
            f'server.document-root = "{root}"',
            'server.bind = "127.0.0.1"',
            f"server.port = {port}",
            f'server.errorlog = "{errorlog}"',
            "server.max-keep-alive-requests = 1000000",
            "server.max-keep-alive-idle = 600",
            'index-file.names = ("index.html")',
            'mimetype.assign = (".html" => "text/html", "" => "application/octet-stream")',
            "",
        ]
    )


def site_files(where: Path | str, port: int) -> dict[str, bytes]:
    """lighttpd's configuration and both files, as they sit in ``where`` (relative paths)."""
    where = Path(where)
    files = {"lighttpd.conf": config(where / "www", port, where / "error.log").encode()}
    for name, size in FILES.values():
        files[f"www/{name}"] = body(size).encode()
    return files


def guest_files() -> dict[str, bytes]:
    return {
        f"{str(GUEST_DIR)[1:]}/{rel}": data
        for rel, data in site_files(GUEST_DIR, GUEST_PORT).items()
    }


class Http(Workload):
    name = "http"
    summary = "one HTTP GET (keep-alive) to lighttpd, request sent to body read"
    mechanism = "network path and server wake-ups: virtual NIC, interrupts, IPIs, scheduler"
    unit = "ns"
    better = "lower"
    throughput_unit = "req/s"
    params = (
        Param(
            "file",
            "page44",
            "what to GET: study D's 44-byte page or study C's 41 KB file",
            tuple(FILES),
        ),
        Param("connections", 1, "concurrent keep-alive connections"),
    )
    presets = {
        "study-d": {"file": "page44", "connections": 1},
        "study-c": {"file": "file41k", "connections": 10},
    }
    needs = ("lighttpd",)
    guest_binaries = (LIGHTTPD,)
    guest_files = guest_files()
    default_iterations = 20000
    default_duration = 1.0
    default_warmup = 20

    def execute(self, ctx: Context) -> Iterator[str]:
        name, _ = FILES[str(ctx.params["file"])]
        params: dict[str, ParamValue] = {
            "path": f"/{name}",
            "connections": int(ctx.params["connections"]),
        }
        servers_here(ctx)
        if is_ssh(ctx.target):
            with on_ssh_host(ctx, "lighttpd", site_files) as (where, port):
                server = f"{LIGHTTPD} -D -f {where}/lighttpd.conf"
                yield from ctx.agent("http", {"port": port, "server": server, **params})
            return
        if not is_local(ctx.target):
            server = f"{LIGHTTPD} -D -f {GUEST_DIR / 'lighttpd.conf'}"
            yield from ctx.agent("http", {"port": GUEST_PORT, "server": server, **params})
            return
        with lighttpd() as srv:
            yield from ctx.agent("http", {"port": srv.port, **params})


def lighttpd() -> Server:
    """A started lighttpd serving both files from its temporary directory."""
    srv = Server("lighttpd", owner="www-data")
    try:
        port = free_port()
        for rel, data in site_files(srv.dir, port).items():
            (srv.dir / rel).parent.mkdir(exist_ok=True)
            (srv.dir / rel).write_bytes(data)
        srv.start(["lighttpd", "-D", "-f", str(srv.dir / "lighttpd.conf")], port=port)
    except BaseException:
        srv.stop()
        raise
    return srv
