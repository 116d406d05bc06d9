"""`vmtax compare --fail-on / --max-overhead`: the gate a CI job runs, on stores made here.

Exit codes: 0 passed, 3 tripped (docs/statistics.md, "The gate"), 2 bad input, 1 a failure."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from vmtax.gate.rule import EXIT_TRIPPED
from vmtax.testing.runs import Config
from vmtax.testing.stored import store_experiment

pytestmark = pytest.mark.fast

PROBES = ("syscall", "cpuid")


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    """Four experiments of L0 and L1 (L1 in 3 boots of 4 runs): 1 slowed by 10%, 2 an A/A,
    3 an A/A whose L1 syscall adaptive sampling left imprecise, 4 slowed by 50% but L1 in one
    boot (no verdict about the configuration is possible)."""
    from vmtax.store import Store

    url = f"sqlite:///{tmp_path_factory.mktemp('gate') / 'v.db'}"
    with Store.open(url) as store:
        for factor, boots, seed in ((1.10, 3, 1), (1.0, 3, 2), (1.0, 3, 3), (1.5, 1, 4)):
            exp = store_experiment(
                store,
                [Config("L0"), Config("L1", {"accel": "tcg"}, factor)],
                probes=PROBES,
                runs=4,
                boots=boots,
                boot_sigma=0.01,
                seed=seed,
            )
        l1 = int(store.configurations().query("experiment_id == 3 and level == 'L1'").iloc[0, 0])
        store.sampling.set_outcomes(
            l1,
            [
                {
                    "configuration_id": l1,
                    "experiment_id": 3,
                    "probe": "syscall",
                    "n_runs": 8,
                    "mean": 100.0,
                    "half_width": 0.05,
                    "target": 0.01,
                    "status": "imprecise",
                    "reason": "budget",
                    "duration_s": 1.0,
                    "iterations": 200,
                    "updated_at": datetime.now(UTC),
                }
            ],
        )
        assert exp == 4
    return url


def compare(cli, db: str, exp: int, *extra: str):
    return cli(
        "compare", f"exp={exp}", "--baseline", "level=L0", "--db", db,
        "--resamples", "2000", *extra,
    )  # fmt: skip


def test_slowed_configuration_fails_after_the_whole_output(cli, db):
    plain = compare(cli, db, 1)
    assert plain.returncode == 0, plain.stderr
    gated = compare(cli, db, 1, "--fail-on", "slower")
    assert gated.returncode == EXIT_TRIPPED == 3
    assert gated.stdout == plain.stdout  # everything it prints without the gate, unchanged
    last = gated.stderr.strip().splitlines()[-1]
    assert last.startswith("gate: failed (exit 3): 3 of 3 rows judged trip --fail-on slower")
    for probe in (*PROBES, "geomean"):
        found = re.search(rf"{probe} mean L1 accel=tcg \(slower, overhead ([0-9.]+) \[", last)
        assert found and float(found.group(1)) == pytest.approx(1.10, abs=0.03), last


def test_fail_on_faster_alone_passes_a_slowdown(cli, db):
    r = compare(cli, db, 1, "--fail-on", "faster")
    assert r.returncode == 0, r.stderr
    assert "gate: passed: --fail-on faster not tripped (3 of 3 rows judged)" in r.stderr


def test_words_repeat_or_come_as_a_comma_list(cli, db):
    for words in (["--fail-on", "faster,slower"], ["--fail-on", "faster", "--fail-on", "slower"]):
        r = compare(cli, db, 1, *words)
        assert r.returncode == 3, r.stderr
        assert "trip --fail-on any" in r.stderr


def test_tolerance_trips_only_on_an_interval_wholly_above_it(cli, db):
    above = compare(cli, db, 1, "--max-overhead", "1.05")
    assert above.returncode == 3, above.stderr
    assert "lies above 1.05" in above.stderr
    # The 10% slowdown's interval contains 1.10: too wide to tell, named, and not a failure.
    inside = compare(cli, db, 1, "--max-overhead", "1.10")
    assert inside.returncode == 0, inside.stderr
    assert "could not be judged and do not count" in inside.stderr
    assert "contains 1.1: too wide to tell" in inside.stderr
    below = compare(cli, db, 1, "--max-overhead", "1.3")
    assert below.returncode == 0 and "could not be judged" not in below.stderr


def test_an_aa_passes_both_gates(cli, db):
    r = compare(cli, db, 2, "--fail-on", "any", "--max-overhead", "1.10", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("{")  # stdout keeps the JSON alone
    assert r.stderr.strip().splitlines()[-1] == (
        "gate: passed: --fail-on any --max-overhead 1.1 not tripped (3 of 3 rows judged)"
    )


def test_an_imprecise_row_never_trips_and_is_named(cli, db):
    r = compare(cli, db, 3, "--fail-on", "any")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[-2].startswith("gate: 2 of 3 rows could not be judged and do not count: ")
    assert "syscall mean L1 accel=tcg (imprecise: adaptive sampling" in lines[-2]
    assert "geomean mean L1 accel=tcg (imprecise" in lines[-2]
    assert lines[-1] == "gate: passed: --fail-on any not tripped (1 of 3 rows judged)"


def test_a_row_that_can_reach_no_verdict_never_trips(cli, db):
    # 50% slower, but L1 was measured in one boot: no verdict about the configuration, and its
    # geomean rests on the same boot.
    r = compare(cli, db, 4, "--fail-on", "slower", "--max-overhead", "1.2")
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().splitlines() == [
        "gate: 3 of 3 rows could not be judged and do not count: "
        "cpuid mean L1 accel=tcg (one boot: no verdict possible); "
        "syscall mean L1 accel=tcg (one boot: no verdict possible); "
        "geomean mean L1 accel=tcg (one boot: no verdict possible)",
        "gate: passed: --fail-on slower --max-overhead 1.2 not tripped (0 of 3 rows judged)",
    ]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--fail-on", "slow"], "--fail-on: unknown verdict 'slow' (choose from slower, faster"),
        (["--fail-on", ","], "--fail-on must not be empty"),
        (["--max-overhead", "0.9"], "--max-overhead must be an overhead ratio in [1, 1e+06]"),
        (["--max-overhead", "nan"], "got nan"),
        (["--max-overhead", "inf"], "got inf"),
        (["--max-overhead", "-1"], "got -1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, tmp_path, args, says):
    # The store does not exist: the option is refused before any store is opened.
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    r = cli("compare", "exp=latest", "--baseline", "level=L0", "--db", missing, *args)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and says in r.stderr, r.stderr
    assert r.stdout == ""


def test_a_gate_on_a_reference_dataset_alone_is_a_usage_error(cli):
    r = cli("compare", "--dataset", "fitzgerald2014", "--fail-on", "slower")
    assert r.returncode == 2
    assert "judges measured configurations" in r.stderr
