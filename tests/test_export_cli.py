"""`vmtax results export`: Parquet with every sample by default; CSV and JSON run-level unless
--samples; the size estimated before writing. A real store and the real CLI."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from vmtax.store import Store
from vmtax.store.export import BYTES_PER_SAMPLE
from vmtax.testing.report_store import populate


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
