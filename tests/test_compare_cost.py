"""What `vmtax compare` of boot-level runs and `vmtax report` load, and what opening a current
store reads.

scipy.stats (most of a second of CPU to import) stays out of a comparison whose sides are
boots (``vmtax.stats.dist`` has its t, chi-square and F numbers); so do scipy.optimize and
scipy.integrate (the Behrens–Fisher table's roots come from ``vmtax.stats.brent``, scipy's
roots without it, and its far tail from a Gauss–Legendre rule on numpy's nodes), and
SQLAlchemy with the store's models and the contract's pydantic models (a SQLite store at the
newest revision is read through ``store.reader``), and pydantic (typer from 0.29 loads it
to coerce every option's value; pyproject.toml keeps typer below). Alembic stays out of
opening a store already at the newest revision (``store.migrate.HEAD``). `vmtax report` of a
SQLite store reads it through ``store.reader`` too, into the same report as through ``Store``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from vmtax.hostprof.store import save_profile
from vmtax.store import Store, migrate
from vmtax.testing.report_store import populate
from vmtax.testing.runs import Config
from vmtax.testing.stored import store_experiment

pytestmark = pytest.mark.fast

HEAVY = ("scipy.stats", "alembic", "statsmodels", "matplotlib", "pydantic")
#: What a comparison of boots in a SQLite store leaves out, beside scipy.stats: each costs
#: a tenth of a second of CPU or more to import, and none of them is needed there.
LEFT_OUT = (
    "scipy.stats",
    "scipy.optimize",  # the Behrens–Fisher table's roots: vmtax.stats.brent
    "scipy.integrate",  # its far tail: Gauss–Legendre in stats.intervals
    "sqlalchemy",  # a SQLite store at the newest revision: vmtax.store.reader
    "vmtax.store.store",
    "vmtax.store.models",
    "vmtax.contract",  # its pydantic models
    "pydantic",  # typer from 0.29 coerces options with it: pyproject keeps typer below
    "vmtax.experiment.calibrate",  # only where noise profiles are stored
    "alembic",
    "statsmodels",
    "matplotlib",
)


def loaded(argv: list[str], watch: tuple[str, ...] = HEAVY, before: str = "") -> dict[str, object]:
    """Run ``vmtax ARGV`` in a process of its own (after the code ``before``); its exit code
    and which of the ``watch`` modules it loaded."""
    code = (
        "import json, sys\n"
        f"{before}\n"
        "from vmtax.cli import main\n"
        f"sys.argv = ['vmtax', *{argv!r}]\n"
        "code = 0\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        f"heavy = sorted(m for m in {watch!r} if m in sys.modules)\n"
        "sys.stderr.write(json.dumps({'code': code, 'heavy': heavy}) + '\\n')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return json.loads(done.stderr.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def boots_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('cost') / 'v.db'}"
    with Store.open(url) as store:
        store_experiment(
            store,
            [Config("L0"), Config("L1", {"accel": "tcg"}, 1.3)],
            probes=("syscall", "cpuid"),
            runs=4,
            boots=3,
            boot_sigma=0.02,
            seed=5,
        )
    return url


def test_the_head_known_without_alembic_is_alembics():
    assert migrate.head() == migrate.HEAD


def test_a_current_store_opens_without_alembic(boots_db: str):
    code = (
        "import sys\nfrom vmtax.store import Store\n"
        f"Store.open({boots_db!r}, read_only=True).close()\n"
        f"Store.open({boots_db!r}).close()\n"
        "print('alembic' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr


def test_help_loads_no_pydantic():
    for argv in (["run", "--help"], ["--help"], ["compare", "--help"]):
        found = loaded(argv)
        assert found["code"] == 0 and found["heavy"] == [], (argv, found)


def _boots_argv(db: str, *extra: str) -> list[str]:
    return ["compare", "exp=latest", "--baseline", "level=L0", "--db", db, *extra]


def test_comparing_boots_reaches_the_table_and_the_far_tail(boots_db: str):
    """The fixture exercises what the next test holds: boot means against one boot's runs
    (the Behrens–Fisher quantile) with p-values below 0.01 (its far tail, by quadrature)."""
    from vmtax.experiment.compare import measured
    from vmtax.stats.compare_options import CompareOptions

    rows = measured(["exp=latest"], "level=L0", CompareOptions(), db=boots_db).rows
    tested = rows[(rows["probe"] != "geomean") & ~rows["is_baseline"]]
    assert (tested["boots"] == 3).all() and (tested["p_value"] < 0.01).all()
    assert rows["ci_low"].notna().sum() == len(tested) + 1  # and a geomean interval


def test_comparing_boots_leaves_the_heavy_modules_out(boots_db: str):
    found = loaded(_boots_argv(boots_db), LEFT_OUT)
    assert found == {"code": 0, "heavy": []}


#: What the comparison once loaded, each put back beside it, and what the check then sees.
PUT_BACK = {
    "import scipy.optimize": "scipy.optimize",
    "import scipy.integrate": "scipy.integrate",
    "import vmtax.store.store": "sqlalchemy",
    "import vmtax.contract": "vmtax.contract",
    "import pydantic": "pydantic",
}


def test_the_check_sees_a_heavy_import_put_back(boots_db: str):
    found = loaded(_boots_argv(boots_db), LEFT_OUT, before="\n".join(PUT_BACK))
    assert found["code"] == 0 and set(PUT_BACK.values()) <= set(found["heavy"])


def test_noise_profiles_are_looked_up_only_where_stored(boots_db: str, tmp_path):
    """Without a stored profile there is nothing to borrow, and the profiles' use case
    (vmtax.experiment.calibrate, with SQLAlchemy) is not loaded; with one it is
    (tests/test_noise.py checks what compare then takes from it)."""
    from datetime import UTC, datetime

    from vmtax.store.reader import StoreReader

    url = f"sqlite:///{tmp_path / 'p.db'}"
    with Store.open(url) as store:
        store_experiment(store, [Config("L0"), Config("L1", {}, 1.2)], runs=5, boots=2)
        now = datetime.now(UTC)
        store.noise.save(
            [
                {
                    "machine": "m" * 64, "machine_fields": {}, "configuration": "L1",
                    "labels": {}, "probe": "syscall", "metric": "mean", "between": 1e-4,
                    "between_low": 0.0, "between_high": 1e-3, "df_between": 5.0,
                    "within": 1e-4, "within_low": 0.0, "within_high": 1e-3, "df_within": 20.0,
                    "boots": 6, "runs": 24, "boot_cost_s": None, "run_cost_s": None,
                    "sources": [], "made_at": now, "updated_at": now,
                }
            ]
        )  # fmt: skip
    with StoreReader.open(url) as with_one, StoreReader.open(boots_db) as without:
        assert with_one.direct and without.direct
        assert with_one.has_noise_profiles() and not without.has_noise_profiles()


#: What `vmtax report` of a SQLite store at the newest revision leaves out: the store's
#: SQLAlchemy door (``store.reader`` reads it), and the contract's pydantic models and
#: pydantic itself (the report reads stored runs, not streams).
REPORT_LEFT_OUT = (
    "sqlalchemy", "vmtax.store.store", "vmtax.store.models", "alembic", "vmtax.contract",
    "pydantic",
)  # fmt: skip


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """`vmtax report` of a small SQLite store with exit profiles, in a process of its own:
    what it loaded and wrote; then, in the same process, the same report with the reader
    made to ask Store for everything, and what that loaded."""
    tmp = tmp_path_factory.mktemp("report-cost")
    url = f"sqlite:///{tmp / 'r.db'}"
    with Store.open(url) as store:
        exp = populate(store, levels=("L0", "L1"), probes=("cpuid",), runs=4, iterations=300)
        runs = store.runs([f"exp={exp},level=L1"])
        for i, run in enumerate(runs["run_id"]):
            reasons = [{"code": 0x72, "count": 300 + i, "time_ns": 9000, "timed": 300}]
            profile = {"isa": "svm", "complete": True, "reasons": reasons}
            save_profile(store, int(run), "L0", profile)
    out = tmp / "report.html"
    argv = ["report", "exp=latest", "--db", url, "-o", str(out), "--resamples", "100"]
    code = (
        "import json, os, sys\n"
        "from vmtax.cli import main\n"
        "def report():\n"
        f"    sys.argv = ['vmtax', *{argv!r}]\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit as exc:\n"
        "        return exc.code\n"
        "    return 0\n"
        "def heavy():\n"
        f"    return sorted(m for m in {REPORT_LEFT_OUT!r} if m in sys.modules)\n"
        "first = {'code': report(), 'heavy': heavy()}\n"
        f"os.replace({str(out)!r}, {str(out)!r} + '.reader')\n"
        "from vmtax.store.reader import StoreReader\n"
        "StoreReader.direct = property(lambda self: False)\n"
        "second = {'code': report(), 'heavy': heavy()}\n"
        "sys.stderr.write(json.dumps([first, second]) + '\\n')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    first, second = json.loads(done.stderr.strip().splitlines()[-1])
    return {
        "reader": first,
        "store": second,
        "html": (Path(f"{out}.reader").read_text(), out.read_text()),
    }


def test_a_report_of_a_sqlite_store_leaves_sqlalchemy_out(reports: dict):
    assert reports["reader"] == {"code": 0, "heavy": []}
    # the check sees the store's SQLAlchemy door where the report goes through it
    assert reports["store"]["code"] == 0
    heavy = set(reports["store"]["heavy"])
    assert {"sqlalchemy", "vmtax.store.store", "vmtax.store.models"} <= heavy


def test_the_report_read_by_the_reader_is_the_one_read_by_store(reports: dict):
    stamp = re.compile(r"Generated \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")
    (by_reader, n), (by_store, m) = (stamp.subn("Generated", html) for html in reports["html"])
    assert n == m == 1
    assert by_reader == by_store
    assert "cpuid" in by_reader and "exit" in by_reader.lower()
