"""`./scripts/test` runs the suite with ``-n auto --dist loadgroup``: a slow test goes to one
pytest-xdist worker with the rest of its module (conftest.py's ``_worker_group``), so that the
module's guest, image or server is made once. This runs a small generated suite that way, in
its own pytest process with the suite's conftest.py loaded as a plugin, and checks where each
test ran.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

TESTS = Path(__file__).resolve().parent
PYPROJECT = TESTS.parent / "pyproject.toml"
RAN = re.compile(r"^\[(gw\d+)\] \[\s*\d+%\] PASSED (\S+)", re.MULTILINE)

MODULE = """
    import pytest

    pytestmark = pytest.mark.{tier}

    @pytest.mark.parametrize("n", range(6))
    def test_one(n):
        pass

    def test_two():
        pass
"""


def run_distributed(tmp_path: Path) -> dict[str, list[tuple[str, str]]]:
    """Each test module's (worker, reported node id) pairs, from a `-n 2 --dist loadgroup` run
    of two slow modules and one fast one."""
    for name, tier in (("test_slow_a", "slow"), ("test_slow_b", "slow"), ("test_quick", "fast")):
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(MODULE.format(tier=tier)))
    # Not the calling run's worker, shared directory or options: this run is one of its own.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VMTAX_TEST_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "conftest",
         "-c", str(PYPROJECT), "--rootdir", str(tmp_path), "-n", "2", "--dist", "loadgroup",
         str(tmp_path)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    ran: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for worker, nodeid in RAN.findall(res.stdout):
        ran[nodeid.split("::", 1)[0]].append((worker, nodeid))
    assert {module: len(tests) for module, tests in ran.items()} == {
        "test_slow_a.py": 7,
        "test_slow_b.py": 7,
        "test_quick.py": 7,
    }, res.stdout[-3000:]
    return ran


def test_a_slow_modules_tests_run_on_one_worker(tmp_path):
    ran = run_distributed(tmp_path)
    for module in ("test_slow_a.py", "test_slow_b.py"):
        workers = {worker for worker, _ in ran[module]}
        assert len(workers) == 1, f"{module} ran on {sorted(workers)}: {ran[module]}"
        # the group the scheduler read: the module's, on every one of its tests
        assert all(nodeid.endswith(f"@{module}") for _, nodeid in ran[module]), ran[module]
    # A fast test goes to whichever worker is free: it has no group.
    assert not any("@" in nodeid for _, nodeid in ran["test_quick.py"]), ran["test_quick.py"]
