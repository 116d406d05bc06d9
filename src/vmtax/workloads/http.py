"""http: lighttpd serving study D's 44-byte page or study C's 41 KB file, every request timed.

lighttpd starts on a free loopback port with its own configuration and document root in a
temporary directory; the client is the agent's ``http`` probe (HTTP/1.1 keep-alive GETs, one
connection per thread), so one value is one request's latency and the run keeps them all.
Compare with ``vmtax compare`` for the shift and ``vmtax artifacts`` / the report for the
change of shape (Anderson-Darling, bimodality).

In a guest the image carries lighttpd, its configuration and both files (``guest_files``);
the agent starts lighttpd on the guest's loopback for the session and stops it after.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from vmtax.workloads.base import (
    Context,
    Param,
    Server,
    Workload,
    free_port,
    is_local,
    local_only,
)

#: Study D's index.html was 44 bytes; study C's Apache file was 41 KB.
FILES = {"page44": ("index.html", 44), "file41k": ("file41k.bin", 41 * 1024)}
#: Where a guest's lighttpd keeps its files, and the port it listens on (nothing else runs
#: in a guest).
GUEST_DIR = Path("/srv/vmtax-http")
GUEST_PORT = 8080


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


def guest_files() -> dict[str, bytes]:
    files = {
        str(GUEST_DIR / "lighttpd.conf")[1:]: config(
            GUEST_DIR / "www", GUEST_PORT, GUEST_DIR / "error.log"
        ).encode()
    }
    for name, size in FILES.values():
        files[str(GUEST_DIR / "www" / name)[1:]] = body(size).encode()
    return files


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
    guest_binaries = ("/usr/sbin/lighttpd",)
    guest_files = guest_files()
    default_iterations = 20000
    default_duration = 1.0
    default_warmup = 20

    def execute(self, ctx: Context) -> Iterator[str]:
        name, _ = FILES[str(ctx.params["file"])]
        params = {"path": f"/{name}", "connections": int(ctx.params["connections"])}
        local_only(ctx, guests=True)
        if not is_local(ctx.target):
            server = f"lighttpd -D -f {GUEST_DIR / 'lighttpd.conf'}"
            yield from ctx.agent("http", {"port": GUEST_PORT, "server": server, **params})
            return
        with lighttpd() as srv:
            yield from ctx.agent("http", {"port": srv.port, **params})


def lighttpd() -> Server:
    """A started lighttpd serving both files from its temporary directory."""
    srv = Server("lighttpd", owner="www-data")
    try:
        root = srv.dir / "www"
        root.mkdir()
        for name, size in FILES.values():
            (root / name).write_text(body(size))
        port = free_port()
        conf = srv.dir / "lighttpd.conf"
        conf.write_text(config(root, port, srv.dir / "error.log"))
        srv.start(["lighttpd", "-D", "-f", str(conf)], port=port)
    except BaseException:
        srv.stop()
        raise
    return srv
