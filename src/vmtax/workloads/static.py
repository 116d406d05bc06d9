"""static: one GET of a small static page from busybox's httpd, a new connection each time.

busybox httpd forks a process for every connection and closes it after one response
(``Connection: close``), so one value is a TCP connect, a fork, the request and the close:
where ``http`` (lighttpd, kept-alive connections) times the network path alone, this
workload adds process creation and connection set-up, both of which exit to the hypervisor
more often in a guest. The client is the agent's ``http`` probe, which reconnects whenever
the server closes. Guest images already carry busybox, so the recipe adds only the page.
"""

from __future__ import annotations

from collections.abc import Iterator

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

BUSYBOX = "/bin/busybox"
#: Where a guest's httpd serves from, and its port there (nothing else runs in a guest).
GUEST_DIR = "/srv/vmtax-static"
GUEST_PORT = 8081


def page(size: int) -> bytes:
    """A page of exactly ``size`` bytes."""
    return (b"vmtax " * (size // 6 + 1))[: size - 1] + b"\n"


def files(_directory: str, _port: int) -> dict[str, bytes]:
    return {"www/index.html": page(44), "www/file4k.html": page(4096)}


def command(spot: Spot) -> list[str]:
    # -f: stay in the foreground, so the target can stop it; -h: the document root.
    return [BUSYBOX, "httpd", "-f", "-p", f"127.0.0.1:{spot.port}", "-h", f"{spot.directory}/www"]


SERVER = ServerSpec(
    "busybox-httpd",
    command=command,
    files=files,
    owner="www-data",
    guest_dir=GUEST_DIR,
    guest_port=GUEST_PORT,
)


class Static(Workload):
    name = "static"
    summary = "one HTTP GET of a static page from busybox httpd, on a new connection"
    mechanism = "process creation and TCP set-up: a fork and a connect per request"
    unit = "ns"
    better = "lower"
    throughput_unit = "req/s"
    params = (
        Param(
            "file", "index.html", "what to GET: 44 bytes or 4 KiB", ("index.html", "file4k.html")
        ),
        Param("connections", 1, "concurrent clients (one thread each)"),
    )
    recipe = Recipe(
        programs=("busybox",),
        packages=("busybox-static",),
        fedora=("busybox",),
        files=SERVER.guest_files(),
        needs=Needs(server=True),
    )
    default_iterations = 5000
    default_duration = 1.0
    default_warmup = 10

    def execute(self, ctx: Context) -> Iterator[str]:
        params: dict[str, ParamValue] = {
            "path": f"/{ctx.params['file']}",
            "connections": int(ctx.params["connections"]),
        }
        with ctx.target.place_server(SERVER) as placed:
            yield from ctx.agent("http", {"port": placed.port, **placed.agent_params, **params})
