"""http: lighttpd serving study D's 44-byte page or study C's 41 KB file, every request timed.

lighttpd starts on a free loopback port with its own configuration and document root in a
temporary directory; the client is the agent's ``http`` probe (HTTP/1.1 keep-alive GETs, one
connection per thread), so one value is one request's latency and the run keeps them all.
Compare with ``vmtax compare`` for the shift and ``vmtax artifacts`` / the report for the
change of shape (Anderson-Darling, bimodality).
"""

from __future__ import annotations

from collections.abc import Iterator

from vmtax.workloads.base import Context, Param, Server, Workload, free_port, local_only

#: Study D's index.html was 44 bytes; study C's Apache file was 41 KB.
FILES = {"page44": ("index.html", 44), "file41k": ("file41k.bin", 41 * 1024)}


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
    default_iterations = 20000
    default_duration = 1.0
    default_warmup = 20

    def execute(self, ctx: Context) -> Iterator[str]:
        local_only(ctx)
        with lighttpd() as srv:
            name, _ = FILES[str(ctx.params["file"])]
            yield from ctx.agent(
                "http",
                {
                    "port": srv.port,
                    "path": f"/{name}",
                    "connections": int(ctx.params["connections"]),
                },
            )


def lighttpd() -> Server:
    """A started lighttpd serving both files from its temporary directory."""
    srv = Server("lighttpd", owner="www-data")
    try:
        root = srv.dir / "www"
        root.mkdir()
        for name, size in FILES.values():
            body = ("vmtax " * (size // 6 + 1))[: size - 1] + "\n"
            (root / name).write_text(body)
        port = free_port()
        conf = srv.dir / "lighttpd.conf"
        conf.write_text(
            "\n".join(
                [
                    f'server.document-root = "{root}"',
                    'server.bind = "127.0.0.1"',
                    f"server.port = {port}",
                    f'server.errorlog = "{srv.dir / "error.log"}"',
                    "server.max-keep-alive-requests = 1000000",
                    "server.max-keep-alive-idle = 600",
                    'index-file.names = ("index.html")',
                    'mimetype.assign = (".html" => "text/html", "" => "application/octet-stream")',
                    "",
                ]
            )
        )
        srv.start(["lighttpd", "-D", "-f", str(conf)], port=port)
    except BaseException:
        srv.stop()
        raise
    return srv
