"""The tier rule (tests/tiers.py): the collection refuses a test without a tier, with both, or
marked fast while it uses a server; any_url's PostgreSQL half of a fast test is slow.

Each case collects a small test file in a temporary directory in its own pytest process, with
the suite's own conftest.py loaded as a plugin and the project's markers, as `scripts/test`
collects the suite. Nothing is run: a server fixture is only named, never started.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

TESTS = Path(__file__).resolve().parent
PYPROJECT = TESTS.parent / "pyproject.toml"
USAGE_ERROR = 4  # pytest.ExitCode.USAGE_ERROR


def collect(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "test_sample.py"
    path.write_text(textwrap.dedent(source))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-p", "conftest", "-c", str(PYPROJECT), "--rootdir", str(tmp_path), *args, str(path)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip


def test_a_test_without_a_tier_is_refused_by_name(tmp_path):
    res = collect(
        tmp_path,
        """
        import pytest

        pytestmark = pytest.mark.fast

        def test_marked():
            pass

        @pytest.mark.parametrize("n", [1, 2])
        def test_unmarked_too(n):
            pass
    """,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    res = collect(
        tmp_path,
        """
        def test_marked_nowhere():
            pass

        def test_nor_this():
            pass
    """,
    )
    assert res.returncode == USAGE_ERROR, res.stdout + res.stderr
    assert "2 test(s) without a valid tier" in res.stderr
    for name in ("test_marked_nowhere", "test_nor_this"):
        assert f"test_sample.py::{name}: no tier marker" in res.stderr


def test_a_test_with_both_tiers_is_refused(tmp_path):
    res = collect(
        tmp_path,
        """
        import pytest

        pytestmark = pytest.mark.fast

        @pytest.mark.slow
        def test_both():
            pass
    """,
    )
    assert res.returncode == USAGE_ERROR, res.stdout + res.stderr
    assert "test_sample.py::test_both: both tier markers" in res.stderr


def test_a_fast_marker_cannot_hide_a_server_test(tmp_path):
    servers = ["postgres_url", "sshd", "netns_fleet", "tcg_l2_store"]
    tests = "".join(f"def test_needs_{name}({name}):\n    pass\n\n" for name in servers)
    res = collect(tmp_path, "import pytest\n\npytestmark = pytest.mark.fast\n\n" + tests)
    assert res.returncode == USAGE_ERROR, res.stdout + res.stderr
    assert f"{len(servers)} test(s) without a valid tier" in res.stderr
    for name in servers:
        (line,) = [line for line in res.stderr.splitlines() if f"test_needs_{name}:" in line]
        assert "marked fast but uses" in line and name in line and "mark it slow" in line


def test_any_urls_postgresql_half_of_a_fast_test_is_slow(tmp_path):
    source = """
        import pytest

        class TestStore:
            pytestmark = pytest.mark.fast

            def test_store(self, any_url):
                pass

        @pytest.mark.slow
        def test_long():
            pass

        @pytest.mark.fast
        def test_quick():
            pass
    """
    picked = {}
    for tier in ("fast", "slow"):
        res = collect(tmp_path, source, "-m", tier)
        assert res.returncode == 0, res.stdout + res.stderr
        picked[tier] = sorted(
            line.split("::", 1)[1] for line in res.stdout.splitlines() if "::" in line
        )
    assert picked == {
        "fast": ["TestStore::test_store[sqlite]", "test_quick"],
        "slow": ["TestStore::test_store[postgresql]", "test_long"],
    }
