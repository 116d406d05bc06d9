"""One resolver for the baseline of compare, report and artifacts: a positional experiment
selector (exp=latest) scopes --baseline, and an ambiguous baseline lists what tells its
candidates apart (experiment, start time, labels). Real SQLite stores, the real CLI."""

from __future__ import annotations

import json

import pytest

from vmtax.errors import UsageError
from vmtax.store import Store
from vmtax.store.select import resolve, scoped_baseline
from vmtax.testing.report_store import populate

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def two_experiments(tmp_path_factory) -> str:
    """The worked example run twice: two experiments with the same L0 and L1 configurations."""
    url = f"sqlite:///{tmp_path_factory.mktemp('sel') / 'v.db'}"
    with Store.open(url) as store:
        for seed in (1, 2):
            populate(store, levels=("L0", "L1"), probes=("syscall",), runs=5, iterations=300,
                     seed=seed)  # fmt: skip
    return url


def test_scoped_baseline():
    assert scoped_baseline(["exp=latest"], "level=L0") == ["exp=latest,level=L0"]
    assert scoped_baseline(["3", "exp=4,probe=cpuid"], "level=L0") == [
        "exp=3,level=L0",
        "exp=4,level=L0",
    ]
    # A baseline with its own experiment, or selectors that may match any experiment: as given.
    assert scoped_baseline(["exp=latest"], "exp=1,level=L0") == ["exp=1,level=L0"]
    assert scoped_baseline(["probe=cpuid"], "level=L0") == ["level=L0"]
    assert scoped_baseline([], "level=L0") == ["level=L0"]


def test_resolve_takes_the_latest_experiments_l0(two_experiments):
    with Store.open(two_experiments) as store:
        got = resolve(store, ["exp=latest"], "level=L0")
        base = got.runs[got.baseline_mask]
        assert set(base["experiment_id"]) == {2} and set(base["level"]) == {"L0"}
        assert set(got.runs["experiment_id"]) == {2}
        with pytest.raises(UsageError) as err:
            resolve(store, ["1", "2"], "level=L0")
    text = err.value.message
    assert "matches 2 configurations" in text and "\n" not in text
    assert "experiment 1 started" in text and "experiment 2 started" in text
    assert "labels vcpus=2" in text and "--baseline exp=2,level=L0" in text


def test_compare_report_and_artifacts_accept_the_worked_example(two_experiments, cli, tmp_path):
    res = cli("compare", "exp=latest", "--baseline", "level=L0", "--format", "json",
              "--resamples", "200", "--db", two_experiments)  # fmt: skip
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)["rows"]
    assert {r["config"] for r in rows} == {
        "L0 vcpus=2",
        "L1 accel=tcg vcpus=2",
    }
    assert json.loads(res.stdout)["baseline"] == "level=L0"
    out = tmp_path / "r.md"
    res = cli("report", "exp=latest", "--baseline", "level=L0", "--format", "markdown",
              "--resamples", "200", "-o", str(out), "--db", two_experiments)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "#1 " not in out.read_text()  # only the latest experiment is in it
    res = cli("artifacts", "exp=latest", "--baseline", "level=L0", "--format", "json",
              "--db", two_experiments)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert {r["config"] for r in json.loads(res.stdout)} == {"L0 vcpus=2", "L1 accel=tcg vcpus=2"}


def test_an_ambiguous_baseline_is_the_same_error_in_every_command(two_experiments, cli, tmp_path):
    lines = set()
    for args in (
        ("compare", "1", "2"),
        ("report", "1", "2", "-o", str(tmp_path / "r.html")),
    ):
        res = cli(*args, "--baseline", "level=L0", "--db", two_experiments)
        assert res.returncode == 2, res
        assert res.stderr.count("\n") == 1 and res.stderr.startswith("vmtax: error: baseline")
        lines.add(res.stderr)
    assert len(lines) == 1
    assert not (tmp_path / "r.html").exists()
