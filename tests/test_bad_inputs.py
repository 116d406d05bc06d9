"""Bad inputs: each gets exactly one line on stderr, starting `vmtax: error:`, and a non-zero
exit. The real agent is used everywhere except where noted (a hanging agent)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vmtax.store import Store
from vmtax.targets.base import find_agent

pytestmark = pytest.mark.fast

VECTORS = Path(__file__).parent / "vectors"
TINY = """
name = "tiny"
[defaults]
runs = 1
iterations = 500
duration = 0.05
timeout = 30
[[probes]]
probe = "cpuid"
"""


@pytest.fixture(scope="module")
def agent() -> str:
    return str(find_agent())


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'v.db'}"


@pytest.fixture
def tiny(tmp_path: Path) -> str:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return str(path)


def vmtax(
    *args: str, agent: str, prefix: tuple[str, ...] = (), timeout: float = 120, **popen
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "VMTAX_DB"}
    env["VMTAX_PROBE"] = agent
    return subprocess.run(
        [*prefix, sys.executable, "-c", "from vmtax.entry import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        **popen,
    )


@pytest.fixture
def cli_agent(agent: str) -> str:
    return agent


def one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    assert result.returncode != 0, result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("vmtax: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_malformed_suite_toml(tmp_path, db, cli):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = 'x'\n[[probes]\nprobe = 'cpuid'\n")
    r = cli("run", "--suite", str(bad), "--db", db)
    one_line_error(r, f"suite {bad}: invalid TOML")
    assert r.returncode == 2


def test_suite_with_a_bad_value(tmp_path, db, cli):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = 'x'\n[[probes]]\nprobe = 'cpuid'\nruns = -2\n")
    one_line_error(cli("run", "--suite", str(bad), "--db", db), f"suite {bad}: probes[0].runs:")


def test_suite_with_an_unknown_key(tmp_path, db, cli):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = 'x'\n[defaults]\nwarmpu = 3\n[[probes]]\nprobe = 'cpuid'\n")
    one_line_error(cli("run", "--suite", str(bad), "--db", db), "defaults.warmpu: unknown key")


def test_suite_with_an_unknown_probe_parameter(tmp_path, db, cli):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = 'x'\n[[probes]]\nprobe = 'cpuid'\nparams = { leef = 1 }\n")
    one_line_error(
        cli("run", "--suite", str(bad), "--db", db), "probe 'cpuid' has no parameter 'leef'"
    )


def test_unknown_probe(db, cli):
    r = cli("run", "--probe", "nosuchprobe", "--db", db)
    one_line_error(r, "unknown probe 'nosuchprobe'", "cpuid")
    with Store.open(db) as store:
        assert store.experiments().empty  # rejected before an experiment was created


def test_unknown_suite_name(db, cli):
    one_line_error(
        cli("run", "--suite", "nosuchsuite", "--db", db), "unknown suite 'nosuchsuite'", "quick"
    )


@pytest.mark.parametrize("label", ["novalue", "=x", "a b=c", "level=L9"])
def test_bad_label(db, label, cli):
    one_line_error(cli("run", "--label", label, "--db", db), "--label")


def test_negative_runs(db, cli):
    one_line_error(cli("run", "--runs", "-3", "--db", db), "--runs must be in 1..10000")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--runs", "99999999999999999999999"), "--runs must be in 1..10000"),
        (("--seed", "1000000000000000000000000000000"), "--seed must be in 0..9223372036854775807"),
        (("--seed", "-1"), "--seed must be in 0.."),
        (("--duration", "nan"), "--duration must be a number of seconds in (0, 86400]"),
        (("--duration", "inf"), "--duration must be a number of seconds in (0, 86400]"),
        (("--duration", "1e30"), "--duration must be a number of seconds in (0, 86400]"),
        (("--timeout", "-inf"), "--timeout must be a number of seconds"),
        (("--probe", "timer", "--param", "delay_us=1e30"), "delay_us"),
        (("--probe", "timer", "--param", "delay_us=0"), "must be in 1..1000000"),
        (("--probe", "cpuid", "--param", "peer=host"), "--param peer: no selected probe has it"),
        (("--param", "novalue"), "--param must be key=value"),
    ],
)
def test_absurd_sizes_and_numbers_refused_before_anything_starts(db, cli, args, needle):
    # Each of these reached the agent (or SQLite, for the seed: a 66-line traceback) before.
    r = cli("run", *args, "--db", db)
    one_line_error(r, needle)
    assert r.returncode == 2
    with Store.open(db) as store:
        assert store.experiments().empty


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("[defaults]\nruns = 1000000000000\n", "defaults.runs: Input should be less than"),
        ("[defaults]\nduration = 1e30\n", "defaults.duration: Input should be less than"),
        ("[defaults]\nduration = nan\n", "defaults.duration:"),
        ("seed = 100000000000000000000\n", "seed:"),
    ],
)
def test_absurd_suite_values_refused(tmp_path, db, cli, body, needle):
    suite = tmp_path / "s.toml"
    head, _, rest = body.partition("[defaults]")
    text = f"name = 's'\n{head}" + (f"[defaults]{rest}" if rest else "")
    suite.write_text(text + "[[probes]]\nprobe = 'cpuid'\n")
    r = cli("run", "--suite", str(suite), "--db", db)
    one_line_error(r, needle)
    assert r.returncode == 2


def test_suite_param_past_the_agents_range_refused(tmp_path, db, cli):
    suite = tmp_path / "s.toml"
    suite.write_text("name = 's'\n[[probes]]\nprobe = 'timer'\nparams.delay_us = 1e30\n")
    r = cli("run", "--suite", str(suite), "--db", db)
    one_line_error(r, "timer: parameter delay_us=1e+30 must be in 1..1000000")
    assert r.returncode == 2


def test_bad_levels_and_target(db, cli):
    one_line_error(cli("run", "--levels", "L0,L9", "--db", db), "--levels")
    one_line_error(
        cli("run", "--target", "http://host", "--db", db), "--target must look like ssh://"
    )


def test_bad_depth(db, cli):
    one_line_error(cli("run", "--depth", "4", "--db", db), "--depth must be 1, 2 or 3")
    one_line_error(
        cli("run", "--depth", "1", "--levels", "L0,L1", "--db", db), "--depth or --levels"
    )


def test_unreachable_database(cli):
    # Port 1 on loopback: nothing listens, the connection is refused at once.
    r = cli("run", "--db", "postgresql://vmtax:sekrit@127.0.0.1:1/vmtax")
    line = one_line_error(r, "cannot connect")
    assert "sekrit" not in line


def test_read_only_database_file(tmp_path, tiny, agent):
    path = tmp_path / "ro.db"
    Store.open(f"sqlite:///{path}").close()
    path.chmod(0o444)
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:
        # root ignores file modes; without CAP_DAC_OVERRIDE the mode applies to it too.
        setpriv = shutil.which("setpriv")
        assert setpriv, "setpriv (util-linux) is needed to drop root's override"
        prefix = (setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner", "--")
    r = vmtax("run", "--suite", tiny, "--db", f"sqlite:///{path}", agent=agent, prefix=prefix)
    one_line_error(r, "read-only")


def test_missing_agent_binary(db, tiny, cli):
    one_line_error(
        cli("run", "--suite", tiny, "--db", db, agent_path="/nonexistent"),
        "agent binary not found or not executable: /nonexistent",
    )


def test_truncated_agent_stream(tmp_path, db, agent):
    # A truncated stream is what the controller sees when the agent dies mid-run (OOM killer,
    # a crashed guest). The real agent produces one when killed: start a long cpu run and
    # SIGKILL the agent process once its header is out.
    suite = tmp_path / "long.toml"
    suite.write_text(
        "name = 'long'\n[defaults]\nruns = 1\nduration = 60\ntimeout = 120\n"
        "[[probes]]\nprobe = 'cpu'\niterations = 1000000\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "VMTAX_DB"}
    env["VMTAX_PROBE"] = agent
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from vmtax.entry import main; main()",
            "run",
            "--suite",
            str(suite),
            "--db",
            db,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    child = _wait_for_agent_run(proc.pid, agent)
    time.sleep(0.5)  # let the header reach the controller
    os.kill(child, signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    r = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    one_line_error(r, "1 lost", "stream ended without an end record")
    assert r.returncode == 1
    with Store.open(db) as store:
        runs = store.runs(["exp=latest"])
        assert list(runs["status"]) == ["lost"]
        assert store.experiment(int(runs["experiment_id"][0]))["status"] == "failed"


def test_agent_that_hangs_past_the_timeout(tmp_path, db, cli):
    # A fake agent: the real one stops itself at its own --timeout, so a hang (a wedged
    # guest, a stuck kernel) cannot be produced with it on demand. This one answers `list`
    # and `env` from the shared contract vectors and then never answers `run`.
    fake = tmp_path / "hanging-agent"
    fake.write_text(
        "#!/bin/sh\n"
        f'case "$1" in\n'
        f'  list) cat "{VECTORS / "probe_list.json"}" ;;\n'
        f'  env) cat "{VECTORS / "env.json"}" ;;\n'
        "  *) sleep 300 ;;\n"
        "esac\n"
    )
    fake.chmod(0o755)
    suite = tmp_path / "one.toml"
    suite.write_text("name = 'one'\n[defaults]\nruns = 1\n[[probes]]\nprobe = 'cpuid'\n")
    t0 = time.monotonic()
    r = cli("run", "--suite", str(suite), "--timeout", "1", "--db", db, agent_path=str(fake))
    one_line_error(r, "did not finish within", "was killed")
    assert time.monotonic() - t0 < 60


def test_resume_of_a_nonexistent_experiment(db, cli):
    Store.open(db).close()
    one_line_error(cli("run", "--resume", "999", "--db", db), "no experiment 999")


@pytest.mark.parametrize(
    "args",
    [
        ("results", "show", "999"),
        ("results", "export", "999", "-o", "x.csv", "--format", "csv"),
        ("run", "--resume", "999"),
        ("exits", "999"),
        ("sweep", "show", "999"),
        ("compare", "exp=999", "--baseline", "level=L0"),
        ("report", "exp=999", "-o", "r.html"),
    ],
)
def test_a_missing_experiment_id_is_not_found_everywhere(tmp_path, monkeypatch, db, cli, args):
    # One exit code for "no such experiment": 1, a run-time "not found" (the command line is
    # well-formed; the store lacks the id), as git and benchstat treat a missing object or file.
    # compare exp=999 said "no completed runs match" with exit 2 before.
    monkeypatch.chdir(tmp_path)
    Store.open(db).close()
    r = cli(*args, "--db", db)
    one_line_error(r, "no experiment 999 in ")
    assert r.returncode == 1


@pytest.mark.parametrize(
    "args",
    [
        ("compare", "exp=1", "--baseline", "level=L0"),
        ("report", "exp=latest", "-o", "r.html"),
        ("results", "show", "1"),
        ("results", "list"),
        ("results", "export", "1", "-o", "x.csv", "--format", "csv"),
        ("exits", "1"),
        ("artifacts", "exp=1"),
        ("model", "exp=latest"),  # it left an empty new.db behind
        ("model", "exp=latest", "--out-of-sample"),
        ("explain", "exp=latest"),
    ],
)
def test_read_only_commands_never_create_a_store(tmp_path, monkeypatch, cli, args):
    # compare on a missing --db said "no completed runs" and left an empty new.db behind.
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "new.db"
    r = cli(*args, "--db", f"sqlite:///{missing}")
    one_line_error(r, "new.db: no such file")
    assert r.returncode == 1
    assert not missing.exists()
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "x.csv").exists()


def test_results_show_of_a_nonexistent_experiment(db, cli):
    Store.open(db).close()
    one_line_error(cli("results", "show", "42", "--db", db), "no experiment 42")


def test_export_with_an_unknown_format(tmp_path, db, cli):
    r = cli("results", "export", "1", "--format", "xls", "-o", str(tmp_path / "x"), "--db", db)
    one_line_error(r, "--format must be csv, json, parquet or openmetrics")


def _wait_for_agent_run(parent: int, agent: str, limit: float = 30) -> int:
    """The pid of the agent's `run` process that `parent` started."""
    deadline = time.monotonic() + limit
    real = os.path.realpath(agent)
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if (
                ppid == parent
                and len(argv) > 1
                and argv[1] == b"run"
                and (os.path.realpath(argv[0].decode()) == real)
            ):
                return int(entry.name)
        time.sleep(0.05)
    pytest.fail("the agent's run process did not appear")


HUGE_ID = str(10**23)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("compare", "exp=1", "--baseline", "level=L0", "--seed", "-1"), "--seed must be in 0.."),
        (("report", "--seed", "-1"), "--seed must be in 0.."),
        (("artifacts", "exp=1", "--seed", "-1"), "--seed must be in 0.."),
        (("sweep", "--order-seed", "-1"), "--order-seed must be in 0.."),
        (("compare", f"exp={HUGE_ID}", "--baseline", "level=L0"), "exp must be in 1.."),
        (("compare", "run=0", "--baseline", "level=L0"), "run must be in 1.."),
        (("results", "show", HUGE_ID), "an experiment id must be in 1.."),
        (("results", "export", HUGE_ID, "-o", "x.csv"), "an experiment id must be in 1.."),
        (("exits", f"exp={HUGE_ID}"), "an experiment id must be in 1.."),
        (("sweep", "show", HUGE_ID), "an experiment id must be in 1.."),
        (("sweep", "--resume", HUGE_ID), "an experiment id must be in 1.."),
        (("run", "--resume", HUGE_ID), "an experiment id must be in 1.."),
        (("run", "--resume", "-5"), "--resume must be an experiment id (1.."),
        (("sweep", "--resume", "-5"), "--resume must be an experiment id (1.."),
        (("run", "--boot-cost", "90"), "--boot-cost applies to guest levels"),
        (("sweep", "--slo", "nan"), "--slo must be a number of seconds in (0, 86400]"),
        (("sweep", "--slo", "inf"), "--slo must be a number of seconds"),
        (("run", "--budget", "1e12s"), "--budget must be a number of seconds in (0, 604800]"),
        (("run", "--budget", "nan"), "--budget must be a positive duration"),
        (("run", "--levels", ""), "--levels must not be empty"),
        (("run", "--levels", " , "), "--levels must not be empty"),
        (("run", "--probe", ""), "--probe must not be empty"),  # a pydantic traceback before
        (("compare", "exp=1", "--baseline", "level=L0", "--metric", ""), "--metric must not be"),
        (("compare", "exp=1", "--baseline", "level=L0", "--noise", "nan"), "--noise must be a"),
        (("compare", "exp=1", "--baseline", "level=L0", "--resamples", "1e9"), "--resamples"),
        (("compare", "exp=1", "--baseline", "level=L0", "--resamples", "10000000"), "--resamples"),
        (("model", "--exits-per-exit", "nan"), "--exits-per-exit must be a number in [1,"),
    ],
)
def test_one_set_of_limits_refused_at_the_door(tmp_path, monkeypatch, cli, args, needle):
    # Each was accepted and broke later: a traceback from SQLite (ids, seeds), a sweep whose
    # `show` crashed on a NaN objective, a budget that never ended, --levels '' running L0.
    # Refused before any store is opened: the store named here does not exist, and stays so.
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "none.db"
    r = cli(*args, "--db", f"sqlite:///{missing}")
    one_line_error(r, needle)
    assert r.returncode == 2
    assert not missing.exists()


@pytest.fixture
def two_levels(tmp_path) -> str:
    """A store of one experiment at L0 and L1 (cpuid, no exit profiles)."""
    from vmtax.testing.report_store import populate

    url = f"sqlite:///{tmp_path / 'two.db'}"
    with Store.open(url) as store:
        populate(store, levels=("L0", "L1"), probes=("cpuid",), runs=4, iterations=200)
    return url


def test_db_info_on_a_newer_schema_says_to_upgrade_vmtax(tmp_path, cli):
    # It said "run 'vmtax db upgrade'", which refuses a schema it does not know.
    import sqlite3

    url = f"sqlite:///{tmp_path / 'future.db'}"
    Store.open(url).close()
    with sqlite3.connect(tmp_path / "future.db") as c:
        c.execute("UPDATE alembic_version SET version_num = '0099_future'")
    info = cli("db", "info", "--db", url)
    assert info.returncode == 0, info.stderr
    assert "newer than this vmtax" in info.stdout and "upgrade vmtax" in info.stdout
    assert "db upgrade" not in info.stdout
    upgrade = cli("db", "upgrade", "--db", url)
    one_line_error(upgrade, "newer than this vmtax", "upgrade vmtax")


def test_a_missing_exit_profile_is_exit_1_in_exits_and_explain(two_levels, cli):
    # The same absence exited 1 in exits and 2 in explain: it is the store's, not the input's.
    exits = cli("exits", "1", "--db", two_levels)
    one_line_error(exits, "no exit profiles")
    explain = cli("explain", "exp=1", "--db", two_levels)
    one_line_error(explain, "exit profile")
    assert exits.returncode == explain.returncode == 1


def test_explain_config_names_config(two_levels, cli):
    # --config garbage complained about --baseline.
    r = cli("explain", "exp=1", "--config", "garbage", "--db", two_levels)
    line = one_line_error(r, "--config must be KEY=VAL")
    assert "--baseline" not in line and r.returncode == 2


@pytest.mark.parametrize("level", ["L9", "L3", "l99999999999999999999999", "x"])
def test_model_vm_level_is_a_level_vmtax_nests(two_levels, cli, level):
    # --vm-level L9 answered about "L10", the nested level that cannot exist.
    r = cli("model", "exp=1", "--vm-level", level, "--db", two_levels)
    line = one_line_error(r, "--vm-level must be L0, L1 or L2", repr(level))
    assert "L10" not in line and r.returncode == 2


def test_results_list_counts_runs_by_outcome(tmp_path, cli):
    # After a resume the lost run stays beside its replacement: "40/41" read as one missing.
    url = f"sqlite:///{tmp_path / 'r.db'}"
    from vmtax.testing.report_store import populate

    with Store.open(url) as store:
        exp = populate(store, levels=("L0",), probes=("cpuid",), runs=3, iterations=50)
        run = int(store.runs([f"exp={exp}"])["run_id"].iloc[0])
        with store._engine.begin() as c:  # one run recorded as lost, as a killed agent's is
            c.exec_driver_sql(f"UPDATE runs SET status = 'lost' WHERE id = {run}")
    out = cli("results", "list", "--db", url).stdout
    assert "2 ok, 1 failed or lost" in out and "2/3" not in out


def test_doctor_with_an_unusable_image_cache_is_one_line(tmp_path, monkeypatch, cli):
    # A cache directory that is a file gave a NotADirectoryError traceback.
    blocker = tmp_path / "cache"
    blocker.write_text("")
    monkeypatch.setenv("VMTAX_CACHE_DIR", str(blocker / "x"))
    r = cli("doctor")
    one_line_error(r, "cannot build images in", "Not a directory")
    assert r.returncode == 1
