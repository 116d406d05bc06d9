"""What `vmtax compare` of boot-level runs loads, and what opening a current store reads.

scipy.stats (most of a second of CPU to import) stays out of a comparison whose sides are
boots (``vmtax.stats.dist`` has its t, chi-square and F numbers); Alembic stays out of
opening a store already at the newest revision (``store.migrate.HEAD``); pydantic, which
typer loads to coerce an option's value, stays out of ``vmtax run --help``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from vmtax.store import Store, migrate
from vmtax.testing.runs import Config
from vmtax.testing.stored import store_experiment

pytestmark = pytest.mark.fast

HEAVY = ("scipy.stats", "alembic", "statsmodels", "matplotlib", "pydantic")


def loaded(argv: list[str]) -> dict[str, object]:
    """Run ``vmtax ARGV`` in a process of its own; its exit code and the HEAVY modules it
    loaded."""
    code = (
        "import json, sys\n"
        "from vmtax.cli import main\n"
        f"sys.argv = ['vmtax', *{argv!r}]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
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


def test_comparing_boots_loads_no_scipy_stats(boots_db: str):
    found = loaded(["compare", "exp=latest", "--baseline", "level=L0", "--db", boots_db])
    assert found["code"] == 0
    assert not {"scipy.stats", "alembic", "statsmodels", "matplotlib"} & set(found["heavy"])


def test_help_loads_no_pydantic():
    for argv in (["run", "--help"], ["--help"], ["compare", "--help"]):
        found = loaded(argv)
        assert found["code"] == 0 and found["heavy"] == [], (argv, found)
