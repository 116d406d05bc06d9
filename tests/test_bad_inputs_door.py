"""The last classes of bad input: each is refused at the door or fails in one line on stderr,
with exit 2 for a usage error and 1 for a run-time failure, and no traceback.

Streams are the agent's real output (tests/vectors/stream_ok.jsonl), edited one field at a
time; the inventory that hangs is a real script run by the real ansible-inventory; the
unresolvable SSH host is a name under .invalid (RFC 2606: it never resolves)."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vmtax.store import Store
from vmtax.testing.report_store import populate

pytestmark = pytest.mark.fast

VECTORS = Path(__file__).parent / "vectors"


def one_line(result, code: int, *needles: str) -> str:
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-2000:]
    assert result.returncode == code, (result.returncode, result.stderr[-500:])
    assert len(lines) == 1 and lines[0].startswith("vmtax: error: "), result.stderr[-500:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# -- a sweep interrupted before its first step --------------------------------------------------


def test_sweep_show_of_a_sweep_without_a_step_is_one_line(cli, tmp_path):
    from vmtax.sweep.spec import SweepSpec, Timing

    db = f"sqlite:///{tmp_path / 'v.db'}"
    spec = SweepSpec(ratios=(1.0, 2.0, 3.0, 4.0), timing=Timing(1, 2, 1), host_cpus=2,
                     replicates=1, intervals=False)  # fmt: skip
    with Store.open(db) as store:
        exp = store.create_experiment(command=["vmtax", "sweep"], suite="sweep", seed=0,
                                      plan={"sweep": spec.as_plan(), "level": "L0"},
                                      vmtax_version="test", agent_version=None)  # fmt: skip
        store.finish_experiment(exp, "interrupted")
    r = cli("sweep", "show", "latest", "--db", db)
    one_line(r, 1, f"sweep {exp} has no step stored", f"vmtax sweep --resume {exp}")


def test_a_knee_of_no_steps_is_too_few_not_an_error():
    from vmtax.stats.knee import find_knee

    fit = find_knee([], [])
    assert fit.knee is None and fit.shape == "too-few"


# -- streams refused at the door ----------------------------------------------------------------


def _stream(tmp_path: Path, name: str, edit) -> Path:
    records = [json.loads(line) for line in (VECTORS / "stream_ok.jsonl").read_text().splitlines()]
    edit(records)
    path = tmp_path / name
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
    return path


def _end(status: str, error: str | None):
    def edit(records):
        records[-1].update(status=status, error=error)

    return edit


def _header(**fields):
    def edit(records):
        records[0].update(fields)

    return edit


def _second_samples_unit(records):
    samples = [r for r in records if r["type"] == "samples"]
    samples[-1]["unit"] = "us" if samples[-1]["unit"] != "us" else "ns"


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (_end("error", "probe crashed: boom"), "end record says the agent failed (probe crashed"),
        (_second_samples_unit, "samples are in"),
        (_header(probe="nosuchprobe"), "its header's probe 'nosuchprobe' is not one the agent has"),
        (_header(boot_id="ab\x00cd"), "boot_id must be 1 to 128 printable ASCII"),
        (_header(boot_id="ab\u202ecd"), "boot_id must be 1 to 128 printable ASCII"),
        (_header(boot_id="a" * 100_000), "got 100000 characters"),
    ],
    ids=["end-error", "unit", "probe", "boot-nul", "boot-bidi", "boot-long"],
)
def test_a_stream_refused_on_import(cli, tmp_path, edit, needle):
    path = _stream(tmp_path, "s.jsonl", edit)
    db = tmp_path / "v.db"
    line = one_line(cli("import", str(path), "--db", f"sqlite:///{db}"), 2, needle)
    assert "\x00" not in line and "\u202e" not in line and len(line) < 1000
    assert not db.exists()  # refused before a store was opened


def test_a_stream_that_timed_out_keeps_its_runs_and_says_so(cli, tmp_path):
    from vmtax.targets.base import find_agent

    # The agent's own stream of three runs, its last run and end record rewritten as a
    # timeout after two (whose summaries agree with their samples, as the import checks).
    argv = [str(find_agent()), "run", "syscall", "--runs", "3", "--iterations", "200"]
    lines = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    records = [json.loads(line) for line in lines.splitlines()]
    records = [r for r in records if r.get("run") != 2]
    records[-1].update(status="timeout", runs_completed=2)
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    r = cli("import", str(path), "--db", f"sqlite:///{tmp_path / 'v.db'}")
    one_line(r, 1, "its end record says timeout", "1 lost")


def test_import_of_dev_zero_ends_at_its_bound(cli, tmp_path):
    db = tmp_path / "v.db"
    started = time.monotonic()
    r = cli("import", "/dev/zero", "--db", f"sqlite:///{db}")
    one_line(r, 2, "/dev/zero is not a vmtax-probe stream: a line longer than 16,777,216 bytes")
    assert time.monotonic() - started < 60 and not db.exists()


def test_the_import_bounds_are_in_its_help():
    import typer.main

    from vmtax.cli import full_app

    command = typer.main.get_command(full_app()).commands["import"]  # type: ignore[attr-defined]
    text = " ".join((command.help or "").split())
    assert "a line of at most 16 MiB" in text and "64 GiB in all" in text


def test_a_read_stops_at_its_byte_bound(tmp_path):
    from vmtax import infile

    path = tmp_path / "x"
    path.write_bytes(b"a\n" * 1000)
    with pytest.raises(infile.TooLong), infile.lines(path, max_bytes=100) as got:
        list(got)


def test_the_fast_samples_path_reads_what_the_model_reads():
    """The bulk parse of a samples line (contract._samples_record) accepts only what the
    record's model accepts, with the same numbers; anything else goes to the model."""
    import numpy as np

    from vmtax.contract import _samples_record, parse_record

    for values in (b"[1.0,2.5]", b"[1e5,2E-3,0]", b"[]", b"[true,1.0]", b'["1",2]', b"[NaN]",
                   b"[-1.0]", b"[1e400]", b"[1.]", b"[01]", b"[1,,2]"):  # fmt: skip
        line = b'{"type":"samples","run":3,"unit":"ns","warmup":false,"values":' + values + b"}\n"
        fast = _samples_record(line, np)
        if fast is None:
            continue
        model = parse_record(line.decode())
        assert fast[0] == model.run and fast[1] == model.unit and fast[2] is model.warmup
        assert fast[3].tolist() == model.values


# -- options refused before a store is opened ---------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (("run", "--resume", "-5"), 2, "--resume must be an experiment id (1.."),
        (("run", "--resume", "1.5"), 2, "--resume must be an experiment id"),
        (("run", "--boot-cost", "90"), 2, "--boot-cost applies to guest levels"),
        (
            ("results", "list", "--db", "postgresql://u:s3cret@localhost:abc/db"),
            2,
            "its port 'abc' is not a number",
        ),
        (
            ("results", "list", "--db", "postgresql://u:s3cret@localhost:99999/db"),
            2,
            "its port 99999 is not in 1..65535",
        ),
    ],
    ids=["resume-negative", "resume-float", "boot-cost", "pg-port-text", "pg-port-range"],
)
def test_refused_at_the_door(cli, tmp_path, monkeypatch, args, code, needle):
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "none.db"
    extra = () if "--db" in args else ("--db", f"sqlite:///{missing}")
    line = one_line(cli(*args, *extra), code, needle)
    assert "s3cret" not in line and "int()" not in line and "invalid literal" not in line
    assert not missing.exists()


# -- words that name the real cause -------------------------------------------------------------


def test_out_of_sample_with_l0_as_the_vm_says_l0_has_nothing_below(cli, tmp_path):
    db = f"sqlite:///{tmp_path / 'v.db'}"
    with Store.open(db) as store:
        populate(store, levels=("L0", "L1"), probes=("cpuid",), runs=4, iterations=200)
    r = cli("model", "exp=1", "--out-of-sample", "--vm-level", "L0", "--db", db)
    line = one_line(r, 2, "L0 has none below it", "--vm-level L1")
    assert "L-1" not in line


def test_an_export_to_a_place_no_file_can_be_made_names_the_cause(tmp_path):
    from vmtax.errors import VmtaxError
    from vmtax.store.export import check_room

    with pytest.raises(VmtaxError, match=r"cannot write in /proc: .*nothing was written"):
        check_room(Path("/proc"), 1e6)  # statvfs: 0 B free; the cause is that it is /proc


def test_ansibles_warnings_are_not_the_reason():
    from vmtax.targets.fleet import ansible_reason

    said = (
        "[WARNING]: Skipping plugin (/x/y.py), cannot load: no module named z\n"
        "[WARNING]: Unable to parse /tmp/inv as an inventory source\n"
        "[WARNING]: No inventory was parsed, only implicit localhost is available\n"
    )
    assert ansible_reason(said) == "Unable to parse /tmp/inv as an inventory source"
    assert ansible_reason("[DEPRECATION WARNING]: old\n[ERROR]: host x: bad\n") == "host x: bad"
    assert ansible_reason("[WARNING]: a\nssh: connect refused\n") == "ssh: connect refused"


def test_an_inventory_script_that_hangs_is_stopped_at_the_time_limit(cli, tmp_path, monkeypatch):
    import shutil

    import vmtax.targets.fleet as fleet

    if shutil.which("ansible-inventory") is None:
        pytest.skip("no ansible-inventory here (vmtax doctor: fleet)")
    monkeypatch.setattr(fleet, "INVENTORY_TIMEOUT_S", 3.0)
    script = tmp_path / "hangs.sh"
    script.write_text("#!/bin/sh\nsleep 600\n")
    script.chmod(0o755)
    started = time.monotonic()
    r = cli("run", "--inventory", str(script), "--runs", "1", "--db",
            f"sqlite:///{tmp_path / 'v.db'}")  # fmt: skip
    one_line(r, 1, "Ansible did not read the inventory in 3 s")
    assert time.monotonic() - started < 60
    left = subprocess.run(["pgrep", "-f", str(script)], capture_output=True, text=True).stdout
    assert not [p for p in left.split() if Path(f"/proc/{p}/stat").exists()
                and Path(f"/proc/{p}/stat").read_text().split()[2] != "Z"]  # fmt: skip
    import typer.main

    from vmtax.cli import full_app

    run = typer.main.get_command(full_app()).commands["run"]  # type: ignore[attr-defined]
    inventory = next(p for p in run.params if p.name == "inventory")
    assert "read within 300 s" in inventory.help


# -- checks that need no boot come before any boot ----------------------------------------------


def test_an_unresolvable_ssh_host_is_found_before_anything_boots(cli, tmp_path, monkeypatch):
    import vmtax.experiment.run as use_case

    def no_boot(*_a, **_k):
        raise AssertionError("reached the levels' packages and boots")

    monkeypatch.setattr(use_case, "_require_level_packages", no_boot)
    monkeypatch.setattr(use_case, "make_targets", no_boot)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ssh_config alias
    db = tmp_path / "v.db"
    r = cli("run", "--levels", "L0,L1", "--target", "ssh://u@no-such-host.invalid",
            "--db", f"sqlite:///{db}")  # fmt: skip
    one_line(r, 1, "cannot resolve host 'no-such-host.invalid'", "nothing was started")
    assert not db.exists()


# -- the console script catches SIGTERM sooner --------------------------------------------------


def test_the_entry_point_loads_no_package_metadata_before_its_handlers():
    """Until vmtax.entry installs its handlers a SIGTERM ends the process silently (143);
    the package's __init__ read the version from the installed metadata first (30 ms of
    importlib.metadata), which is now read only when asked for."""
    code = (
        "import sys; import vmtax.entry; "
        "print(sorted(m for m in ('importlib.metadata', 'vmtax.version') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    import vmtax

    assert re.match(r"\d+\.\d+", vmtax.__version__)


# -- item 3: the table fits 80 columns, the progress total grows --------------------------------


def test_the_run_table_fits_80_columns_without_cutting_a_number():
    import pandas as pd
    from rich.console import Console

    from vmtax.report.terminal import fmt_short, studya_table

    rows = [("cpu", 736.1, "events/s", 6.13, 1_534_786.0, 150_238.0, 9.79, 2_663_587.0, "ns"),
            ("cpuid", None, None, None, 3_486.0, 187.8, 5.39, 3_296.0, "tsc_cycles"),
            ("pagefault", 654_378.0, "pages/s", 5.96, 1_646.0, 104.1, 6.32, 2_893.0, "ns"),
            ("ctxswitch", None, None, None, 4_249.0, 191.7, 4.51, 4_563.0, "ns")]  # fmt: skip
    d = pd.DataFrame(
        [
            {
                "config": "L0",
                "probe": p,
                "throughput_mean": t,
                "throughput_unit": tu,
                "throughput_stderr_pct": tp,
                "resp_mean": m,
                "resp_stderr": se,
                "resp_stderr_pct": sp,
                "p95": p95,
                "unit": u,
                "n_runs": 21,
            }
            for p, t, tu, tp, m, se, sp, p95, u in rows
        ]  # fmt: skip
    )
    buf = io.StringIO()
    Console(file=buf, width=80).print(studya_table(d, title="experiment 1", width=80))
    text = buf.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    for number in ("1.535M", "150.2k", "2.664M", "654.4k", "3,486", "9.79%"):
        assert number in text, number
    assert [fmt_short(x) for x in (99_999, 100_000, 999_960, 2.5e12)] == [
        "99,999", "100.0k", "1.000M", "2.500T",
    ]  # fmt: skip
    wide = io.StringIO()
    Console(file=wide, width=160).print(studya_table(d, title="experiment 1", width=160))
    assert "1,534,786" in wide.getvalue()  # room enough: every digit, as before


def test_the_progress_total_grows_with_the_runs_adaptive_sampling_adds():
    from rich.console import Console

    from vmtax.cli.run_cmd import RichProgress

    progress = RichProgress(Console(file=io.StringIO(), force_terminal=True, width=100))
    progress.__enter__()
    try:
        progress.add_target("L0", 2)
        for i in range(5):
            progress.advance("L0", f"run {i}")
            task = progress._bar.tasks[0]
            assert task.completed <= task.total, (task.completed, task.total)
    finally:
        progress.__exit__(None)
    assert (task.completed, task.total) == (5, 5)


@pytest.mark.parametrize("option", ["--kernel", "--agent"])
def test_a_path_too_long_for_the_system_is_refused_in_one_line(cli, option):
    # A 100,000-character path reached os.stat and ended in an OSError traceback.
    res = cli("image", "build", option, "k" * 100_000)
    one_line(res, 2, f"{option} is not a path this system can open", "100000 bytes")
