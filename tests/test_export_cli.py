"""`vmtax results export`: Parquet with every sample by default; CSV and JSON run-level unless
--samples; the size estimated before writing. A real store and the real CLI."""

from __future__ import annotations

import json
import os
import subprocess

import pandas as pd
import pytest

from test_faults_sqlite_disk import small_disk  # noqa: F401 - the fixture: a 1 MiB tmpfs
from test_fleet_netns import vmtax_cmd, vmtax_env
from vmtax.store import Store
from vmtax.store.export import BYTES_PER_SAMPLE
from vmtax.testing.report_store import populate

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('exp') / 'v.db'}"
    with Store.open(url) as store:
        populate(store, levels=("L0", "L1"), probes=("cpuid",), runs=3, iterations=2000)
    return url


def test_parquet_by_default_with_every_sample(db, cli, tmp_path):
    out = tmp_path / "runs.parquet"
    res = cli("results", "export", "latest", "-o", str(out), "--db", db)
    assert res.returncode == 0, res.stderr
    assert "exporting 12,000 samples: about" in res.stderr
    samples = pd.read_parquet(tmp_path / "runs.samples.parquet")
    assert (~samples["warmup"]).sum() == 12_000 and len(pd.read_parquet(out)) == 6


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_text_formats_are_run_level_unless_samples_are_asked_for(fmt, db, cli, tmp_path):
    out = tmp_path / f"runs.{fmt}"
    res = cli("results", "export", "latest", "--format", fmt, "-o", str(out), "--db", db)
    assert res.returncode == 0, res.stderr
    assert "run-level rows only" in res.stderr and "--samples" in res.stderr
    assert not (tmp_path / f"runs.samples.{fmt}").exists()
    res = cli("results", "export", "latest", "--format", fmt, "--samples", "-o", str(out),
              "--db", db)  # fmt: skip
    assert res.returncode == 0, res.stderr
    written = tmp_path / f"runs.samples.{fmt}"
    rows = pd.read_csv(written) if fmt == "csv" else pd.DataFrame(json.loads(written.read_text()))
    assert (~rows["warmup"].astype(bool)).sum() == 12_000
    # The estimate said the right order of magnitude (synthetic labels are shorter).
    estimate = 12_000 * BYTES_PER_SAMPLE[fmt]
    assert estimate / 4 < written.stat().st_size < estimate * 4


@pytest.mark.parametrize("fmt", ["parquet", "json", "csv"])
def test_samples_written_in_several_chunks_read_back_whole(fmt, db, cli, tmp_path, monkeypatch):
    import vmtax.store.export as export

    monkeypatch.setattr(export, "_SAMPLES_PER_CHUNK", 2500)  # 6 runs of 2000: 3 chunks
    out = tmp_path / f"runs.{fmt}"
    res = cli("results", "export", "latest", "--format", fmt, "--samples", "-o", str(out),
              "--db", db)  # fmt: skip
    assert res.returncode == 0, res.stderr
    written = tmp_path / f"runs.samples.{fmt}"
    rows = {
        "parquet": pd.read_parquet,
        "csv": pd.read_csv,
        "json": lambda p: pd.DataFrame(json.loads(p.read_text())),
    }[fmt](written)
    measured = rows[~rows["warmup"].astype(bool)]
    assert len(measured) == 12_000 and measured.groupby("run_id").size().eq(2000).all()


def test_stdout_carries_the_runs_and_nothing_else(db, tmp_path):
    out = tmp_path / "out.parquet"
    with out.open("wb") as fh:
        proc = subprocess.run([*vmtax_cmd(), "results", "export", "latest", "-o", "-", "--db", db],
                              stdout=fh, stderr=subprocess.PIPE, text=True, timeout=300,
                              env=vmtax_env())  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert len(pd.read_parquet(out)) == 6  # a whole Parquet file: no message appended
    said = proc.stderr.splitlines()
    assert said == ["run-level rows only on stdout; the 12,000 raw samples need -o FILE",
                    "wrote stdout (6 runs)"]  # fmt: skip


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_samples_to_stdout_are_refused_in_one_line(fmt, db, cli):
    res = cli("results", "export", "latest", "--format", fmt, "--samples", "-o", "-", "--db", db)
    assert res.returncode == 2 and res.stdout == "" and res.stderr.count("\n") == 1
    assert "--samples needs -o FILE" in res.stderr


def test_the_counts_said_before_and_after_agree(db, cli, tmp_path):
    res = cli("results", "export", "latest", "-o", str(tmp_path / "r.parquet"), "--db", db)
    assert res.returncode == 0 and res.stdout == ""
    before, after = res.stderr.splitlines()
    assert before.startswith("exporting 12,000 samples")
    warm = int((pd.read_parquet(tmp_path / "r.samples.parquet")["warmup"]).sum())
    assert after == (f"wrote {tmp_path / 'r.parquet'} (6 runs) and "
                     f"{tmp_path / 'r.samples.parquet'} (12,000 samples and {warm:,} warm-up "
                     "samples)")  # fmt: skip


def test_every_run_carries_its_start_and_end_times(cli, tmp_path):
    db = f"sqlite:///{tmp_path / 't.db'}"
    suite = tmp_path / "s.toml"
    suite.write_text("name = 's'\n[defaults]\nruns = 3\niterations = 50\nduration = 0.05\n"
                     "[[probes]]\nprobe = 'cpuid'\n")  # fmt: skip
    assert cli("run", "--suite", str(suite), "--db", db).returncode == 0
    res = cli("results", "export", "1", "--format", "csv", "-o", str(tmp_path / "r.csv"),
              "--db", db)  # fmt: skip
    assert res.returncode == 0, res.stderr
    runs = pd.read_csv(tmp_path / "r.csv", parse_dates=["started_at", "ended_at"])
    assert runs["started_at"].notna().all() and (runs["ended_at"] > runs["started_at"]).all()
    shown = cli("results", "show", "1", "--executed", "--format", "json", "--db", db)
    assert shown.returncode == 0 and shown.stderr.strip() == "experiment 1"
    executed = pd.DataFrame(json.loads(shown.stdout))
    assert list(executed["run_id"]) == list(runs.sort_values("started_at")["run_id"])
    by_id = runs.set_index("run_id")
    for row in executed.itertuples():
        assert pd.Timestamp(row.started_at) == by_id.loc[row.run_id, "started_at"]
        assert pd.Timestamp(row.ended_at) == by_id.loc[row.run_id, "ended_at"]


def test_an_export_larger_than_the_free_space_is_refused_before_writing(
    db,
    cli,
    small_disk,  # noqa: F811
):
    old = _fill(small_disk)
    free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
    assert 12_000 * BYTES_PER_SAMPLE["csv"] > free  # the disk cannot take the samples
    res = cli("results", "export", "latest", "--format", "csv", "--samples", "-o", str(old),
              "--db", db)  # fmt: skip
    assert res.returncode == 1 and "not enough room in" in res.stderr, res.stderr
    assert res.stderr.splitlines()[-1].startswith("vmtax: error: ")
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "runs.csv"]
    assert old.read_text() == "older export\n"
    # The run-level rows alone fit, and are written.
    res = cli("results", "export", "latest", "--format", "csv", "-o", str(old), "--db", db)
    assert res.returncode == 0 and len(pd.read_csv(old)) == 6


def test_a_write_that_fills_the_disk_leaves_neither_file(
    db,
    cli,
    monkeypatch,
    small_disk,  # noqa: F811
):
    import vmtax.store.export as export

    old = _fill(small_disk)
    # An estimate far too low passes the check; the disk then fills while the samples are
    # written (12,000 rows of about 80 bytes, 256 KiB free).
    monkeypatch.setitem(export.BYTES_PER_SAMPLE, "csv", 1.0)
    res = cli("results", "export", "latest", "--format", "csv", "--samples", "-o", str(old),
              "--db", db)  # fmt: skip
    assert res.returncode == 1 and res.stderr.count("\n") == 2, res.stderr
    assert res.stderr.splitlines()[1] == (
        f"vmtax: error: cannot write {old} and {small_disk / 'runs.samples.csv'}: "
        "No space left on device; nothing was written"
    )
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "runs.csv"]  # no partial file
    assert old.read_text() == "older export\n"  # the runs are not replaced without samples


def _fill(disk):
    """An older export on ``disk``, and a filler that leaves 256 KiB free."""
    old = disk / "runs.csv"
    old.write_text("older export\n")
    st = os.statvfs(disk)
    (disk / "filler").write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - 256 * 1024))
    return old
