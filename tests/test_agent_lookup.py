"""Which vmtax-probe the controller runs when none is named."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from vmtax.targets.base import find_agent

pytestmark = pytest.mark.fast


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def test_the_agent_installed_beside_this_python_comes_before_path(tmp_path, monkeypatch):
    # A version manager's shim on PATH (pyenv's is a shell script costing ~0.2 s a call)
    # must not be what every run starts when pip put the real agent beside this Python.
    installed = _exe(tmp_path / "venv" / "bin" / "vmtax-probe")
    shim = _exe(tmp_path / "shims" / "vmtax-probe")
    monkeypatch.delenv("VMTAX_PROBE", raising=False)
    monkeypatch.setenv("PATH", str(shim.parent))
    monkeypatch.setattr(sys, "executable", str(installed.parent / "python"))
    assert find_agent() == installed.resolve()
    installed.unlink()  # not installed beside this Python: PATH's is the one
    assert find_agent() == shim.resolve()
    monkeypatch.setenv("VMTAX_PROBE", str(shim))  # named: always that one
    assert find_agent() == shim.resolve()
