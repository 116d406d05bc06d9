"""One number everywhere: `vmtax compare` and `vmtax report` (HTML and markdown) on the same
data print the same overhead, CI and Holm-adjusted p, digit for digit."""

from __future__ import annotations

import re

import pytest

from vmtax.store import Store
from vmtax.testing.report_store import populate

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('one') / 'v.db'}"
    with Store.open(url) as store:
        # Two probes with throughput and without; 5 runs a side, as a quick suite has 7.
        populate(store, levels=("L0", "L1"), probes=("cpuid", "syscall"), runs=5,
                 iterations=400, seed=3)  # fmt: skip
    return url


def _rows(text: str) -> list[list[str]]:
    return [
        [c.strip().replace("\\", "") for c in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("|") and not line.startswith("|---")
    ]


def test_report_and_compare_print_the_same_digits(db, cli, tmp_path):
    res = cli("compare", "exp=latest", "--baseline", "level=L0", "--format", "markdown",
              "--resamples", "500", "--db", db)  # fmt: skip
    assert res.returncode == 0, res.stderr
    head, *body = _rows(res.stdout)
    col = {h: i for i, h in enumerate(head)}
    compared = {
        (r[col["probe"]], r[col["config"]]): (r[col["overhead"]], r[col["95% CI"]], r[col["p adj"]])
        for r in body
        if r[col["verdict"]] != "baseline" and r[col["probe"]] != "geomean"
    }
    assert len(compared) == 2 and all(p for _, _, p in compared.values())

    out = tmp_path / "r.md"
    res = cli("report", "exp=latest", "--baseline", "level=L0", "--format", "markdown",
              "--resamples", "500", "-o", str(out), "--db", db)  # fmt: skip
    assert res.returncode == 0, res.stderr
    text = out.read_text()
    reported = {}
    for r in _rows(text):
        if len(r) == 9 and r[0] in ("cpuid", "syscall"):  # the overhead table's rows
            reported[(r[0], r[1])] = (r[2].rstrip("×"), r[3].rstrip("×"), r[4])
    assert reported == compared
    # The summary's headline uses the same rounding as compare's geomean row.
    geo = next(r for r in body if r[col["probe"]] == "geomean")
    assert re.search(rf"{re.escape(geo[col['overhead']])}× the baseline's cost", text)

    html = tmp_path / "r.html"
    res = cli("report", "exp=latest", "--baseline", "level=L0", "--resamples", "500",
              "-o", str(html), "--db", db)  # fmt: skip
    assert res.returncode == 0, res.stderr
    page = html.read_text()
    for overhead, ci, p in compared.values():
        assert f">{p}<" in page and f"{overhead}×" in page and f"{ci}×" in page
