"""crypto: study B's SSL cost, as ``openssl speed -evp aes-128-gcm``.

``aesni=on`` uses the CPU's AES instructions; ``aesni=off`` masks AES-NI and PCLMULQDQ with
``OPENSSL_ia32cap`` so that OpenSSL falls back to software AES-GCM. One value is the bytes/s
(reported as MB/s) of one ``openssl speed -seconds 1`` execution; the cost of software
crypto at a level is the ratio of the two entries there (``vmtax workloads`` and the report
show it).
"""

from __future__ import annotations

from collections.abc import Iterator

from vmtax.workloads.base import Context, Param, Workload, WorkloadError, local_only, tool

#: ~(bit 57 AES-NI | bit 33 PCLMULQDQ) of OpenSSL's capability vector (CPUID.1:ECX << 32).
MASK_AESNI = "~0x200000200000000"


class Crypto(Workload):
    name = "crypto"
    summary = "AES-128-GCM throughput of one `openssl speed -evp` second"
    mechanism = "CPU features exposed to the guest (AES-NI, PCLMULQDQ via CPUID)"
    unit = "MB/s"
    better = "higher"
    params = (
        Param("aesni", "on", "use AES-NI, or mask it to force software AES", ("on", "off")),
        Param("cipher", "aes-128-gcm", "EVP cipher"),
        Param("bytes", 16384, "block size per operation"),
    )
    presets = {"software": {"aesni": "off"}}
    needs = ("openssl",)
    default_iterations = 3
    default_duration = 2.0

    def execute(self, ctx: Context) -> Iterator[str]:
        local_only(ctx)
        argv = ["openssl", "speed", "-mr", "-evp", str(ctx.params["cipher"]), "-seconds", "1"]
        argv += ["-bytes", str(ctx.params["bytes"])]
        env = {"OPENSSL_ia32cap": MASK_AESNI} if ctx.params["aesni"] == "off" else {}
        yield from ctx.repeat(lambda: parse_speed(tool(argv, timeout=ctx.left(), env=env)))


def parse_speed(text: str) -> float:
    """MB/s (10^6 bytes) from ``openssl speed -mr``'s ``+F:`` line."""
    for line in text.splitlines():
        if line.startswith("+F:"):
            return float(line.rsplit(":", 1)[1]) / 1e6
    raise WorkloadError("openssl speed printed no +F: result line")
