"""A report loads scipy.stats (about half a CPU-second, and most of scipy with it) only where
a test calls it: the shape test against a baseline. A report of one configuration (the one a
plain `vmtax run` writes) loads none of it; a report with a baseline loads it once, before
its workers fork, not once in each."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from vmtax.store import Store
from vmtax.testing.report_store import populate

pytestmark = pytest.mark.fast


def _report_loads_scipy_stats(url: str, selector: str, out: str) -> dict[str, object]:
    code = textwrap.dedent(
        f"""
        import json, sys
        from pathlib import Path
        from vmtax.experiment.report import stored_report
        from vmtax.stats.compare_options import CompareOptions
        stored_report({url!r}, [{selector!r}], Path({out!r}), argv=["report"],
                      options=CompareOptions())
        print(json.dumps({{"stats": "scipy.stats" in sys.modules}}))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_report_of_one_configuration_loads_no_scipy_stats(tmp_path):
    url = f"sqlite:///{tmp_path / 'one.db'}"
    with Store.open(url) as store:
        populate(store, levels=("L1",), probes=("cpuid", "syscall"), runs=4, iterations=400)
        populate(store, levels=("L0", "L1"), probes=("cpuid",), runs=4, iterations=400, seed=2)
    one = _report_loads_scipy_stats(url, "exp=1", str(tmp_path / "one.html"))
    assert one == {"stats": False}
    # The probe can fail: the same process with a baseline to test against loads it.
    two = _report_loads_scipy_stats(url, "exp=2", str(tmp_path / "two.html"))
    assert two == {"stats": True}


def test_the_workers_inherit_scipy_stats_when_a_shape_test_needs_it():
    # The workers fork from the report's process: what it has loaded when they start, they
    # have; what they load after, each loads again. A fresh process, as a report's.
    code = textwrap.dedent(
        """
        import json, sys
        import numpy as np
        from vmtax.report import analysis
        from vmtax.stats import artifacts

        loaded_at_fork = []

        def fork(calls):
            loaded_at_fork.append("scipy.stats" in sys.modules)
            return [call() for call in calls]

        analysis.run_forked, analysis.workers_for = fork, lambda _count: 2
        rng = np.random.default_rng(4)
        big = [rng.normal(100, 5, analysis.PARALLEL_CELLS // 4) for _ in range(4)]
        detect, as_matrix = artifacts.detect, artifacts.as_matrix
        alone = analysis._detect_all({"cpuid": {"L0": big}}, [], detect, as_matrix, 0)
        runs = {"cpuid": {"L0": big, "L1": [r * 2 for r in big]}}
        found = analysis._detect_all(runs, ["L0"], detect, as_matrix, 0)
        shape = found[("cpuid", "L1")].shape.p_value
        print(json.dumps({"at_fork": loaded_at_fork, "shape_p": shape}))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # Alone, nothing needs it; against a baseline, it is there before the fork.
    assert out["at_fork"] == [False, True]
    assert out["shape_p"] is not None
