"""crypto: study B's SSL cost, as ``openssl speed -evp aes-128-gcm``.

``aesni=on`` uses the CPU's AES instructions; ``aesni=off`` masks AES-NI and PCLMULQDQ with
``OPENSSL_ia32cap`` so that OpenSSL falls back to software AES-GCM. One value is the bytes/s
(reported as MB/s) of one ``openssl speed -seconds 1`` execution, run and read by the
agent's ``exec`` probe, so that it runs the same on this machine and in guests (whose images
carry openssl). The cost of software crypto at a level is the ratio of the two entries there
(``vmtax workloads`` and the report show it).
"""

from __future__ import annotations

from collections.abc import Iterator

from vmtax.workloads.base import Context, Param, Recipe, Workload

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
    recipe = Recipe(
        programs=("openssl",),
        packages=("openssl",),
        fedora=("openssl",),
        binaries=("/usr/bin/openssl",),
    )
    default_iterations = 3
    default_duration = 2.0

    def execute(self, ctx: Context) -> Iterator[str]:
        argv = ["openssl", "speed", "-mr", "-evp", str(ctx.params["cipher"]), "-seconds", "1"]
        argv += ["-bytes", str(ctx.params["bytes"])]
        params: dict[str, str | int | float] = {
            "cmd": " ".join(argv),
            "value_line": "+F:",  # +F:<n>:<cipher>:<bytes per second>
            "scale": 1e-6,
        }
        if ctx.params["aesni"] == "off":
            params["env"] = f"OPENSSL_ia32cap={MASK_AESNI}"
        yield from ctx.agent("exec", params)
