"""Builds the Rust agent together with the Python package, so `pip install .` puts
`vmtax-probe` on PATH beside `vmtax`. Everything else is declared in pyproject.toml."""

import subprocess
from pathlib import Path

from setuptools import setup
from setuptools_rust import RustBin


def host_triple() -> str:
    # An explicit --target keeps the static-CRT rustflags of .cargo/config.toml away from
    # the proc-macros that cargo builds for the host.
    out = subprocess.run(["rustc", "-vV"], check=True, capture_output=True, text=True).stdout
    return next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("host: "))


def agent_triple() -> str:
    """The host's musl target when the toolchain has its standard library (`rustup target
    add x86_64-unknown-linux-musl`): musl is made to be linked statically, and its resolver
    reads the guest's /etc/hosts and /etc/resolv.conf itself. Else the host's own target,
    whose C runtime .cargo/config.toml links statically."""
    host = host_triple()
    if not host.endswith("-linux-gnu"):
        return host
    musl = host.removesuffix("gnu") + "musl"
    sysroot = subprocess.run(
        ["rustc", "--print", "sysroot"], check=True, capture_output=True, text=True
    )
    has_std = (Path(sysroot.stdout.strip()) / "lib" / "rustlib" / musl / "lib").is_dir()
    return musl if has_std else host


setup(
    rust_extensions=[
        RustBin(
            "vmtax-probe",
            path="probe/Cargo.toml",
            args=["--target", agent_triple()],
            # Always optimised: an editable install would otherwise build a debug agent,
            # which measures its own slowness (4x the cost of writing 200,000 samples).
            debug=False,
        )
    ],
)
