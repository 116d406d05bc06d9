"""http: lighttpd serving study D's 44-byte page or study C's 41 KB file, every request timed.

lighttpd starts on a free loopback port with its own configuration and document root in a
temporary directory; the client is the agent's ``http`` probe (HTTP/1.1 keep-alive GETs, one
connection per thread), so one value is one request's latency and the run keeps them all.
Compare with ``vmtax compare`` for the shift and ``vmtax artifacts`` / the report for the
change of shape (Anderson-Darling, bimodality).

The target places the server (``Target.place_server``): on this machine vmtax starts it; a
guest's image carries lighttpd, its configuration and both files, and the agent there starts
it for the run and stops it after; an SSH host (which must have lighttpd installed) gets the
same files in a fresh directory, and its agent starts and stops lighttpd the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

from vmtax.targets.local import LocalTarget
from vmtax.targets.servers import PlacedServer
from vmtax.workloads.base import (
    Context,
    Needs,
    Param,
    ParamValue,
    Recipe,
    ServerSpec,
    Spot,
    Workload,
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


def command(spot: Spot) -> list[str]:
    return [LIGHTTPD, "-D", "-f", f"{spot.directory}/lighttpd.conf"]


#: lighttpd serving both files: started here as www-data, by the agent in a guest (from the
#: files its image carries) or on an SSH host (from files copied there).
SERVER = ServerSpec(
    "lighttpd",
    command=command,
    files=site_files,
    owner="www-data",
    guest_dir=str(GUEST_DIR),
    guest_port=GUEST_PORT,
)


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
    recipe = Recipe(
        programs=("lighttpd",),
        packages=("lighttpd",),
        fedora=("lighttpd",),
        binaries=(LIGHTTPD,),
        files=SERVER.guest_files(),
        needs=Needs(server=True),
    )
    default_iterations = 20000
    default_duration = 1.0
    default_warmup = 20

    def execute(self, ctx: Context) -> Iterator[str]:
        name, _ = FILES[str(ctx.params["file"])]
        params: dict[str, ParamValue] = {
            "path": f"/{name}",
            "connections": int(ctx.params["connections"]),
        }
        with ctx.target.place_server(SERVER) as placed:
            yield from ctx.agent("http", {"port": placed.port, **placed.agent_params, **params})


def lighttpd() -> AbstractContextManager[PlacedServer]:
    """lighttpd started on this machine, serving both files (for the peer benchmark)."""
    return LocalTarget().place_server(SERVER)
