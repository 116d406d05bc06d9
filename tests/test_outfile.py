"""Every -o: regular files only, a symlink's target written in place, never half a file.

Reproduced with a symlink, a FIFO and a directory in a temporary directory; a device node
behaves as the FIFO does (both fail S_ISREG), and is never touched here."""

from __future__ import annotations

import os
import stat
import subprocess

import pytest

from vmtax import outfile
from vmtax.errors import UsageError, VmtaxError

pytestmark = pytest.mark.fast


def test_symlink_target_is_written_and_the_link_stays(tmp_path):
    target = tmp_path / "target.html"
    target.write_text("old")
    link = tmp_path / "link.html"
    link.symlink_to(target.name)
    outfile.write_text(link, "new")
    assert link.is_symlink() and os.readlink(link) == "target.html"
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.html", "target.html"]


def test_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.html"
    link.symlink_to("made.html")
    outfile.write_text(link, "x")
    assert (tmp_path / "made.html").read_text() == "x" and link.is_symlink()


@pytest.mark.parametrize("kind", ["fifo", "directory", "link to fifo"])
def test_non_regular_destinations_are_refused_and_left_alone(tmp_path, kind):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "dir").mkdir()
    path = {"fifo": fifo, "directory": tmp_path / "dir", "link to fifo": tmp_path / "l"}[kind]
    if kind == "link to fifo":
        path.symlink_to(fifo)
    with pytest.raises(UsageError, match="-o writes regular files only"):
        outfile.write_text(path, "x")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still a FIFO: not renamed over
    assert (tmp_path / "dir").is_dir()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left


def test_a_failed_write_keeps_the_old_file(tmp_path):
    out = tmp_path / "r.html"
    out.write_text("old")
    with pytest.raises(RuntimeError), outfile.open_output(out) as fh:
        fh.write("half")
        raise RuntimeError("the report failed half way")
    assert out.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_missing_directory(tmp_path):
    with pytest.raises(VmtaxError, match="does not exist"):
        outfile.destination(tmp_path / "no" / "r.html")


def test_the_mode_follows_the_umask(tmp_path):
    out = tmp_path / "r.html"
    outfile.write_text(out, "x")
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~mask


@pytest.mark.parametrize(
    "args",
    [
        ("report", "exp=latest", "-o", "{}"),
        ("results", "export", "1", "--format", "csv", "-o", "{}"),
    ],
)
def test_commands_refuse_a_fifo_and_write_through_a_symlink(tmp_path, cli, args):
    db = f"sqlite:///{tmp_path / 'o.db'}"
    suite = tmp_path / "s.toml"
    suite.write_text(
        "name = 's'\n[defaults]\nruns = 1\niterations = 50\nduration = 0.05\n"
        "[[probes]]\nprobe = 'cpuid'\n"
    )
    assert cli("run", "--suite", str(suite), "--db", db).returncode == 0
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    r = cli(*[a.replace("{}", str(fifo)) for a in args], "--db", db)
    assert r.returncode == 2 and "it is a FIFO; -o writes regular files only" in r.stderr
    assert len(r.stderr.splitlines()) == 1 and stat.S_ISFIFO(os.stat(fifo).st_mode)
    target = tmp_path / "t.out"
    target.write_text("old")
    link = tmp_path / "link.out"
    link.symlink_to(target)
    r = cli(*[a.replace("{}", str(link)) for a in args], "--db", db)
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and target.read_text() != "old"


def test_help_states_the_rule(cli):
    for args in (("report", "--help"), ("results", "export", "--help")):
        out = subprocess.run(
            ["vmtax", *args], capture_output=True, text=True, env=os.environ | {"COLUMNS": "300"}
        ).stdout
        assert "symlink's target is written" in " ".join(out.split()), args


def test_sweep_show_refuses_a_fifo_before_opening_anything(tmp_path, cli):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    r = cli("sweep", "show", "latest", "-o", str(fifo), "--db", f"sqlite:///{tmp_path / 'no.db'}")
    assert r.returncode == 2 and "it is a FIFO; -o writes regular files only" in r.stderr
    assert not (tmp_path / "no.db").exists()


def test_files_written_together_appear_together_or_not_at_all(tmp_path):
    runs, samples = tmp_path / "r.csv", tmp_path / "r.samples.csv"
    runs.write_text("old runs")
    with pytest.raises(OSError), outfile.open_outputs([runs, samples]) as (a, b):
        a.write("new runs")
        b.write("half the samples")
        raise OSError(28, "No space left on device")
    assert runs.read_text() == "old runs" and not samples.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["r.csv"]  # no temporary file left
    with outfile.open_outputs([runs, samples]) as (a, b):
        a.write("new runs")
        b.write("samples")
    assert runs.read_text() == "new runs" and samples.read_text() == "samples"


@pytest.mark.parametrize(
    "template, message",
    [
        ("{nosuchfield}-{id}.html", "'{nosuchfield}' is not a field"),
        ("r-{id:03d}.html", "'{id:03d}' is not a field"),
        ("r-{id.html", "'{id.html' is not a field"),
        ("nodir/{id}.html", "directory"),
    ],
)
def test_a_bad_report_template_is_refused_before_anything_runs(template, message, cli,
                                                               tmp_path, monkeypatch):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VMTAX_RUN_REPORT", template)
    db = tmp_path / "t.db"
    res = cli("run", "--probe", "cpuid", "--runs", "1", "--db", str(db))
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and message in res.stderr
    assert "VMTAX_RUN_REPORT" in res.stderr
    assert not db.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--levels", "L0,L1", "--preset", "bogus", "--probe", "cpuid"],
        ["run", "--target", "ssh://bench@host:99999", "--probe", "cpuid"],
        ["run", "--resume", "1"],
        ["sweep", "--resume", "999"],
        ["sweep", "--accel", "bogus"],
    ],
)
def test_a_command_that_fails_before_storing_anything_leaves_no_store(args, cli, tmp_path):
    db = tmp_path / "t.db"
    res = cli(*args, "--db", str(db))
    assert res.returncode in (1, 2) and res.stderr.count("\n") == 1, res.stderr
    assert not db.exists()
