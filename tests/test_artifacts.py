"""Timing artifacts: synthetic matrices with planted effects, and real agent streams."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from vmtax.contract import read_stream
from vmtax.stats import artifacts
from vmtax.stats.artifacts import (
    PERIODIC_MAX_ITERATIONS,
    TIE_SINGLE,
    _acf,
    _onsets,
    _pair_acf,
    _pair_bound,
    _pair_floor,
    _shuffled_ones,
    _shuffles,
    as_matrix,
    cross_run,
    detect,
    mvalue,
    periodic,
)
from vmtax.targets.base import find_agent

pytestmark = pytest.mark.fast

RNG = np.random.default_rng(42)


def _noise(runs=10, n=4000, seed=0):
    return np.random.default_rng(seed).lognormal(np.log(100), 0.05, (runs, n))


def test_periodic_spikes_in_every_run_give_period_and_indices():
    m = _noise()
    m[:, 24::25] *= 2.0  # study D's horizontal lines: the same indices, 2x, every run
    a = detect(m)
    assert a.periodic.found and a.periodic.period == 25
    assert a.periodic.indices[:3] == [24, 49, 74]
    assert a.cross_run.found and a.cross_run.drift == 0
    assert a.outliers.count >= m[:, 24::25].size  # reported...
    assert m.shape == (10, 4000)  # ...and nothing dropped


def test_bursts_of_slow_iterations_do_not_hide_a_period():
    # Seen on a real buffered write on a busy host: a flush every 50 writes among bursts of
    # several consecutive slow ones, whose autocorrelation lobe out-ranked the period.
    m = _noise(runs=5)
    m[:, 0::50] *= 3.0
    rng = np.random.default_rng(4)
    for r in range(5):
        for start in rng.choice(4000 - 12, 40, replace=False):
            m[r, start : start + rng.integers(3, 12)] *= 3.0
    a = detect(m)
    assert a.periodic.found and a.periodic.period == 50, a.periodic


def test_period_with_two_spikes_per_cycle_is_the_cycle_not_their_gap():
    # Seen on a real buffered write: the flush every 50 writes and a second slow write 36
    # after it. The autocorrelation has half-height peaks at 14 and 36 and its full peak at 50.
    m = _noise(runs=5)
    m[:, 0::50] *= 3.0
    m[:, 36::50] *= 3.0
    stray = np.random.default_rng(3).random(m.shape) < 0.01  # and 1% slow writes at random
    m[stray] *= 3.0
    a = detect(m)
    assert a.periodic.found and a.periodic.period == 50, a.periodic


def test_a_period_among_more_random_spikes_than_its_own_is_found():
    # Seen on a real buffered write on a busy host: a flush every 16 writes (6% of them) and
    # 10% slow writes at random, so most spikes are not the period's: 0.36 at lag 16.
    m = _noise(runs=4, n=3000, seed=11)
    m[:, 0::16] *= 3.0
    m[np.random.default_rng(12).random(m.shape) < 0.10] *= 3.0
    a = detect(m)
    assert a.periodic.found and a.periodic.period == 16, a.periodic
    assert 0.25 < a.periodic.acf < 0.5  # the case the threshold is for, not an easy one


def test_slow_stretches_are_not_a_period():
    # A busy host's clustering: one stretch of a run is slow far more often than the rest.
    # Its autocorrelation is positive at every short lag, significant, and not a period.
    rng = np.random.default_rng(13)
    m = _noise(runs=6, n=4000, seed=14)
    rate = np.where(np.arange(4000) < 1500, 0.15, 0.02)
    m[rng.random(m.shape) < rate] *= 3.0
    a = detect(m)
    assert not a.periodic.found, a.periodic


def test_diagonal_spikes_drift_between_runs():
    m = _noise(runs=12, n=3000, seed=1)
    for r in range(12):
        m[r, 500 + 7 * r] *= 4.0  # study D's diagonal: the spike moves 7 iterations per run
        m[r, 1700 + 7 * r] *= 4.0
    a = detect(m)
    assert a.cross_run.found and a.cross_run.drift == 7
    assert a.cross_run.p_value < 0.01
    assert not a.periodic.found


def test_clean_noise_has_no_artifacts():
    a = detect(_noise(seed=2))
    assert a.found() == []
    assert a.periodic.period is None
    assert a.outliers.count > 0  # lognormal tails cross Tukey fences; reported, not an artifact


def test_warmup():
    m = _noise(runs=8, n=2000, seed=3)
    m[:, :60] *= np.linspace(3.0, 1.6, 60)
    a = detect(m)
    assert a.warmup.found
    assert 50 <= a.warmup.n_slow <= 65
    assert a.warmup.p_value < 0.01


def test_shape_change_and_bimodality():
    base = _noise(runs=5, n=2000, seed=4)
    rng = np.random.default_rng(5)
    two = np.where(rng.random(base.shape) < 0.5, base, base * 1.6)
    a = detect(two, baseline=base)
    assert a.shape.changed and a.shape.p_value < 0.01
    assert a.shape.modality == "bimodal" and a.shape.modality_baseline == "unimodal"
    # a pure shift or scale is not a shape change
    b = detect(base * 1.3 + 5, baseline=_noise(runs=5, n=2000, seed=6))
    assert not b.shape.changed and b.shape.modality == "unimodal"


def test_the_kernel_density_is_scipys():
    from scipy import stats

    from vmtax.stats.artifacts import gaussian_density

    rng = np.random.default_rng(4)
    x = np.r_[rng.lognormal(3, 0.2, 1500), rng.normal(40, 2, 500)]
    at = np.linspace(x.min() - 5, x.max() + 5, 512)
    sd = x.std(ddof=1)
    for width in (sd * x.size ** (-1 / 5), 0.5, 7.0):  # Scott's rule, narrower, wider
        want = stats.gaussian_kde(x, bw_method=width / sd)(at)
        assert np.allclose(gaussian_density(x, at, width), want, rtol=1e-9, atol=1e-15)


def test_mvalue_scale():
    rng = np.random.default_rng(0)
    assert mvalue(rng.normal(0, 1, 5000)) == pytest.approx(2.0, abs=0.2)
    assert mvalue(np.r_[rng.normal(0, 1, 2500), rng.normal(8, 1, 2500)]) == pytest.approx(
        4.0, abs=0.3
    )


def test_to_dict_is_json():
    a = detect(_noise(runs=3, n=500, seed=7))
    text = json.dumps(a.to_dict(), allow_nan=False)
    assert set(json.loads(text)) >= {"periodic", "cross_run", "warmup", "shape", "outliers"}


def test_shuffles_keep_each_runs_spike_count_and_place_them_uniformly():
    rng = np.random.default_rng(8)
    ind = np.zeros((3, 40), dtype=bool)
    ind[0, :4] = True  # sparse: positions of the ones are drawn
    ind[1, :30] = True  # dense: positions of the zeros are drawn
    shuffled = _shuffles(ind, 4000, rng)
    assert shuffled.shape == (4000, 3, 40)
    assert (shuffled.sum(axis=-1) == ind.sum(axis=-1)).all()
    for r in (0, 1):
        freq = shuffled[:, r, :].sum(axis=0)  # each position equally likely
        assert stats.chisquare(freq).pvalue > 1e-3
        assert freq[:4].sum() < 0.5 * freq.sum()  # not left where they were
    assert not shuffled[:, 2, :].any()


def test_periodic_acf_matches_direct_autocorrelation():
    rng = np.random.default_rng(9)
    slow = rng.random((4, 600)) < 0.03
    slow[:, 9::10] |= rng.random((4, 60)) < 0.8  # a noisy period of 10
    res = periodic(slow)
    assert res.found and res.period == 10
    n = slow.shape[1]
    direct = []
    onsets = slow & ~np.pad(slow, ((0, 0), (1, 0)))[:, :-1]  # a burst counts where it starts
    for row in onsets.astype(float):
        x = row - row.mean()
        ac = np.correlate(x, x, mode="full")[n - 1 :]
        direct.append(ac[10] / ac[0] * n / (n - 10))
    assert res.acf == pytest.approx(np.mean(direct), rel=1e-9)


@pytest.mark.parametrize("runs", [2, 10, 30])
@pytest.mark.parametrize("rate", [0.001, 0.02, 0.45])
def test_the_shuffles_single_precision_correlation_is_within_a_tenth_of_the_tie(runs, rate):
    # The period test draws its null in float32 and counts a draw within TIE_SINGLE of the data
    # as a match; its rounding must stay far below that, at the longest runs it reads.
    rng = np.random.default_rng(runs)
    ind = rng.random((runs, PERIODIC_MAX_ITERATIONS)) < rate
    ind[:, ::37] = True
    mean = ind.mean(axis=1)
    weights = 1 / (runs * ind.sum(axis=1) * (1 - mean))
    drawn = _shuffles(ind, 8, rng)
    double = _acf(drawn, mean, weights, PERIODIC_MAX_ITERATIONS // 4)
    single = _acf(drawn, mean, weights, PERIODIC_MAX_ITERATIONS // 4, np.float32)
    assert 0 < np.abs(single - double).max() < TIE_SINGLE / 10  # rounded, but far below the tie
    assert np.abs(single[:, 2:].max(axis=-1) - double[:, 2:].max(axis=-1)).max() < TIE_SINGLE / 10


@pytest.mark.parametrize("batch", [1, 7, 40])
def test_the_positions_drawn_are_the_shuffles_ones(batch):
    # The pair count draws each shuffle's onset positions, not its (runs, n) matrix: the same
    # draws from the generator, so the same shuffles (batch: the calls _shuffles would get).
    rng = np.random.default_rng(14)
    ind = _onsets(rng.random((5, 300)) < np.array([[0.0], [0.004], [0.05], [0.3], [0.6]]))
    ones = ind.sum(axis=1)
    assert ones[0] == 0 and ones.max() <= 150  # a run without onsets, and a dense one
    a, b = np.random.default_rng(15), np.random.default_rng(15)
    dense = np.concatenate([_shuffles(ind, min(batch, 40 - i), a) for i in range(0, 40, batch)])
    drawn = _shuffled_ones(ones, 300, 40, b, batch)
    for run, positions in enumerate(drawn):
        assert positions.shape == (40, ones[run])
        for i in range(40):
            assert (positions[i] == np.flatnonzero(dense[i, run])).all()
    assert a.integers(1 << 40) == b.integers(1 << 40)  # and the generator is left alike


@pytest.mark.parametrize("shape", [(12, 20_000), (3, 1), (4, 2), (5, 7), (2, 10), (1, 4001)])
@pytest.mark.parametrize("kind", ["continuous", "ticks", "nan", "inf"])
def test_run_quartiles_are_numpys_percentiles_to_the_bit(shape, kind):
    rng = np.random.default_rng(shape[1])
    m = rng.lognormal(5, 0.4, shape)
    if kind == "ticks":
        m = np.round(m / 10) * 10  # a coarse clock: ties everywhere
    elif kind == "nan":
        m[0, shape[1] // 2] = np.nan
    elif kind == "inf":
        m[-1, 0] = np.inf
    with np.errstate(invalid="ignore"):  # inf - inf, in numpy's percentile as in ours
        q1, q3, iqr = artifacts.run_quartiles(m)
        want = np.percentile(m, [25, 75], axis=1, keepdims=True)
    assert np.array_equal(q1, want[0], equal_nan=True)
    assert np.array_equal(q3, want[1], equal_nan=True)
    floor = artifacts.resolution(m)[:, None]
    assert np.array_equal(iqr, np.maximum(want[1] - want[0], floor), equal_nan=True)


@pytest.mark.parametrize("n", [16, 301, 4096])
def test_the_pair_count_is_the_fft_autocorrelation(n):
    rng = np.random.default_rng(n)
    ind = _onsets(rng.random((6, n)) < np.array([[0.0], [0.002], [0.01], [0.05], [0.2], [0.4]]))
    ind[1, :2] = True  # a run with its onsets at the start, another at the end
    ind[2, -1] = True
    ones = ind.sum(axis=1)
    mean = ind.mean(axis=1)
    energy = ones * (1 - mean)
    weights = np.divide(1.0, 6 * energy, out=np.zeros(6), where=energy > 0)
    drawn = _shuffles(ind, 9, np.random.default_rng(1))
    positions = [np.stack([np.flatnonzero(d[r]) for d in drawn]) for r in range(6)]
    fft = _acf(drawn, mean, weights, n // 4)
    pairs = _pair_acf(positions, n, mean, weights, n // 4)
    assert pairs.shape == fft.shape
    assert np.abs(pairs - fft).max() < 1e-12


@pytest.mark.parametrize("n", [16, 301, 4096])
def test_the_pair_bound_is_never_below_the_statistic(n):
    # The shuffles whose bound is below the data's peak are not counted exactly: the bound
    # must hold for every arrangement, a periodic one (the data's) as well as shuffles.
    rng = np.random.default_rng(n + 1)
    slow = rng.random((5, n)) < np.array([[0.001], [0.01], [0.03], [0.1], [0.2]])
    slow[:, 3::7] |= rng.random((5, len(range(3, n, 7)))) < 0.8
    ind = _onsets(slow)
    ones = ind.sum(axis=1)
    mean = ind.mean(axis=1)
    weights = 1 / (5 * ones * (1 - mean))
    drawn = _shuffled_ones(ones, n, 50, rng, 50)
    rows = [np.vstack([np.flatnonzero(ind[r]), drawn[r]]) for r in range(5)]
    exact = _pair_acf(rows, n, mean, weights, n // 4)[:, 2:].max(axis=-1)
    floor = _pair_floor(ones, n, mean, weights, n // 4)
    bound = _pair_bound(rows, n, n // 4, float(weights.max()), floor)
    assert (bound >= exact - 1e-12).all()


@pytest.mark.parametrize("cost", [0.0, np.inf])
@pytest.mark.parametrize("case", ["period", "none", "sparse"])
def test_the_period_test_gives_one_p_value_whichever_way_it_counts(monkeypatch, cost, case):
    # PAIR_COST 0: every shuffle is counted from its pairs; infinite: by FFT.
    rng = np.random.default_rng(16)
    slow = rng.random((5, 3000)) < (0.002 if case == "sparse" else 0.02)
    if case != "none":
        slow[:, 11::60] |= rng.random((5, 50)) < 0.7
    expected = periodic(slow, resamples=2000, seed=3)
    monkeypatch.setattr(artifacts, "PAIR_COST", cost)
    got = periodic(slow, resamples=2000, seed=3)
    assert got == expected
    if case != "none":
        assert got.period == 60 and got.p_value == pytest.approx(1 / 2001)


@pytest.mark.parametrize("memory", [0.0, 0.045, 0.05, 0.3])
def test_cross_run_blocks_give_the_p_value_of_the_full_sums(monkeypatch, memory):
    # A block of one lag bounds nothing away: every resample is summed in full.
    rng = np.random.default_rng(17)
    slow = rng.random((6, 3000)) < 0.02
    for r in range(1, 6):
        slow[r] |= np.roll(slow[r - 1], 5) & (rng.random(3000) < memory)  # drift 5 per run
    blocks = cross_run(slow, resamples=3000)
    monkeypatch.setattr(artifacts, "CROSS_BLOCK", 1)
    assert blocks == cross_run(slow, resamples=3000)
    if memory == 0.3:
        assert blocks.found and blocks.drift == 5 and blocks.p_value == pytest.approx(1 / 3001)


def test_periodic_reads_only_the_first_iterations_of_long_runs():
    slow = np.zeros((3, PERIODIC_MAX_ITERATIONS + 3000), dtype=bool)
    slow[:, 39::40] = True
    slow[:, PERIODIC_MAX_ITERATIONS:] = np.random.default_rng(10).random((3, 3000)) < 0.2
    long_, cut = periodic(slow), periodic(slow[:, :PERIODIC_MAX_ITERATIONS])
    assert long_.found and long_.period == 40
    assert (long_.acf, long_.p_value) == (cut.acf, cut.p_value)
    assert long_.spike_rate > cut.spike_rate  # the rate and indices still use every iteration


def test_cross_run_correlation_matches_direct_circular_correlation():
    rng = np.random.default_rng(11)
    slow = rng.random((4, 200)) < 0.05
    for r in range(1, 4):
        slow[r] |= np.roll(slow[r - 1], 3) & (rng.random(200) < 0.7)  # drift 3 per run
    res = cross_run(slow)
    z = slow - slow.mean(axis=1, keepdims=True)
    z = z / z.std(axis=1, keepdims=True)
    lags = range(-50, 51)  # n // 4
    prof = [np.mean([np.mean(z[r] * np.roll(z[r + 1], -d)) for r in range(3)]) for d in lags]
    assert res.correlation == pytest.approx(max(prof), rel=1e-9)
    assert res.drift == 3 and res.found


# -- real agent streams ------------------------------------------------------------------
#
# Streams the agent printed, captured once (tests/fixtures/artifacts/README.md): a live run's
# timings depend on the machine's load (under `stress-ng --cpu 2` a buffered-write run once
# had slow iterations every 25 writes as well as every 50), and timings belong in bench/.

FIXTURES = Path(__file__).parent / "fixtures" / "artifacts"


def _captured_matrix(name: str) -> tuple[np.ndarray, dict]:
    with gzip.open(FIXTURES / f"{name}.jsonl.gz", "rt") as fh:
        stream = read_stream(fh.read().splitlines())
    assert stream.complete, stream.problem
    return as_matrix([r.values for r in stream.runs]), stream.runs[0].summary.extra


@pytest.mark.parametrize("buffer, length, period", [(512, 32, 16), (1600, 32, 50)])
def test_real_buffered_write_flushes_every_k_iterations(buffer, length, period):
    m, extra = _captured_matrix(f"write-buffered-{buffer}-{length}")
    assert m.shape == (5, 4000)
    assert extra["flush_period"] == period  # the agent's own account of the planted effect
    a = detect(m)
    assert a.periodic.found, a.periodic
    assert a.periodic.period == period
    assert a.periodic.p_value < 0.01


def test_real_syscall_has_no_period():
    m, _ = _captured_matrix("syscall")
    a = detect(m)
    assert not a.periodic.found, a.periodic
    assert a.periodic.period is None


def test_the_agent_still_reports_the_flush_period_it_plants():
    # The live agent, for what does not depend on timing: the stream and its planted period.
    res = subprocess.run(
        [str(find_agent()), "run", "write", "--runs", "1", "--iterations", "200",
         "--param", "mode=buffered", "--param", "buffer=1600", "--param", "len=32"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    stream = read_stream(res.stdout.splitlines())
    assert stream.complete, (stream.problem, res.stderr)
    assert stream.runs[0].summary.extra["flush_period"] == 50


# -- the command, on a real store ------------------------------------------------------


def _store_stream(store, exp, level, labels, lines):
    stream = read_stream(lines)
    assert stream.complete
    header = stream.header.model_dump(by_alias=True)
    cfg = store.configuration(
        experiment_id=exp,
        level=level,
        labels=labels,
        fingerprint=header["env"],
        target="local",
        provenance={},
    )
    for run in stream.runs:
        store.add_run(
            experiment_id=exp,
            configuration_id=cfg,
            probe=header["probe"],
            plan_index=0,
            run_index=run.summary.run,
            header=header,
            summary=run.summary.model_dump(),
            values=run.values,
            warmup_values=run.warmup_values,
            status="ok",
        )


def test_artifacts_command_reports_the_period(tmp_path, cli):
    from vmtax.store import Store

    url = f"sqlite:///{tmp_path / 'v.db'}"
    agent = str(find_agent())
    store = Store.open(url)
    exp = store.create_experiment(
        command=["test"], suite="t", seed=0, plan={}, vmtax_version="0", agent_version=None
    )
    for level, labels, args in (
        ("L0", {}, ["--param", "mode=direct"]),
        ("L1", {"buf": "512"}, ["--param", "mode=buffered", "--param", "buffer=512"]),
    ):
        out = subprocess.run(
            [agent, "run", "write", "--runs", "4", "--iterations", "3000", *args],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        _store_stream(store, exp, level, labels, out.splitlines())
    store.finish_experiment(exp, "ok")
    store.close()

    res = cli("artifacts", "level=L1", "--baseline", "level=L0", "--db", url, "--format", "json")
    assert res.returncode == 0, res.stderr
    (found,) = json.loads(res.stdout)
    assert found["config"] == "L1 buf=512" and found["periodic"]["period"] == 16
    assert found["shape"]["p_value"] is not None
    for fmt, needle in (
        ("table", "period 16 iterations"),
        ("markdown", "| periodic | yes |"),
        ("csv", 'periodic,yes,"period 16 iterations'),
    ):
        res = cli("artifacts", "level=L1", "--db", url, "--format", fmt)
        assert res.returncode == 0, res.stderr
        assert needle in res.stdout
        if fmt == "table":  # the family and its control are named
            assert re.search(r"Holm-adjusted over \d tests, family-wise 1%", res.stdout)
    res = cli("artifacts", "level=L3", "--db", url)
    assert res.returncode == 2 and res.stderr.startswith("vmtax: error: no completed runs")
