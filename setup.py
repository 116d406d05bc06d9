"""Builds the Rust agent together with the Python package, so `pip install .` puts
`vmtax-probe` on PATH beside `vmtax`. Everything else is declared in pyproject.toml."""

import subprocess

from setuptools import setup
from setuptools_rust import RustBin


def host_triple() -> str:
    # An explicit --target keeps the static-CRT rustflags of .cargo/config.toml away from
    # the proc-macros that cargo builds for the host.
    out = subprocess.run(["rustc", "-vV"], check=True, capture_output=True, text=True).stdout
    return next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("host: "))


setup(
    rust_extensions=[
        RustBin(
            "vmtax-probe",
            path="probe/Cargo.toml",
            args=["--target", host_triple()],
            # Always optimised: an editable install would otherwise build a debug agent,
            # which measures its own slowness (4x the cost of writing 200,000 samples).
            debug=False,
        )
    ],
)
