"""`vmtax report --boot-cost S` sets what a boot costs in Kalibera and Jones' runs per boot, as
compare's option does, with the same limits: a value that is not a positive number of seconds
(at most the longest timeout) is refused in one line with exit 2, and nothing is written."""

from __future__ import annotations

import pytest

from vmtax.errors import VmtaxError
from vmtax.stats.compare_options import BOOT_COST_S
from vmtax.store import Store
from vmtax.testing.report_store import populate

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('bootcost') / 'v.db'}"
    with Store.open(url) as store:
        populate(store, levels=("L0", "L1"), probes=("cpuid",), runs=4, iterations=200)
    return url


class _Stop(VmtaxError):
    """Ends the report once its comparison was asked for: the figures are not this test's."""


@pytest.mark.parametrize(("given", "expected"), [([], BOOT_COST_S), (["--boot-cost", "90"], 90.0)])
def test_the_boot_cost_reaches_the_reports_comparison(cli, db, tmp_path, monkeypatch, given,
                                                      expected):  # fmt: skip
    from vmtax.report import analysis

    seen: list[float] = []

    def compare(*args, **kwargs):
        seen.append(kwargs["options"].boot_cost_s)
        raise _Stop("stop")

    monkeypatch.setattr(analysis, "compare", compare)
    out = tmp_path / "r.html"
    r = cli("report", "--baseline", "level=L0", *given, "-o", str(out), "--db", db)
    assert r.returncode == 1 and "stop" in r.stderr, r.stderr
    assert seen == [expected]


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e12", "abc"])
def test_a_bad_boot_cost_is_one_line_and_exit_2(cli, db, tmp_path, value):
    out = tmp_path / "r.html"
    r = cli("report", "--baseline", "level=L0", "--boot-cost", value, "-o", str(out), "--db", db)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith("vmtax: error: ") and "boot-cost" in lines[0], lines
    assert not out.exists()
