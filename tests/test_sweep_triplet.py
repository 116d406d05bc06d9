"""Study B's triplet in `vmtax sweep`: web, app and db guests, driven from this machine.

The quick tests check the step sizes (a triplet's vCPUs against the host's CPUs), the usage
errors, and the three tiers' start scripts on this machine (the same scripts, servers and
configuration as in the guests, chained over loopback). The QEMU test boots a real triplet
of TCG guests, checks that a page through the web guest came from the db guest's server,
measures one step, and makes the second step's first guest fail to boot, which keeps the
first step.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
import urllib.request
from pathlib import Path

import pytest

from vmtax.errors import UsageError
from vmtax.store import Store
from vmtax.sweep.gueststeal import StealRecorder
from vmtax.sweep.run import SweepError, SweepRunner
from vmtax.sweep.spec import SweepSpec, Timing, apply_presets
from vmtax.sweep.tiers import TRIPLET_SIZES
from vmtax.targets.base import find_agent
from vmtax.targets.local import LocalTarget
from vmtax.workloads import webapp


@pytest.fixture
def cli_agent():
    return str(find_agent())


def _triplet(**kw) -> SweepSpec:
    # One replicate in ascending order (seed 0): these test the tiers, not the statistics.
    base = {"replicates": 1, "intervals": False, "order_seed": 0}
    return SweepSpec(**{"workload": "triplet", "host_cpus": 2, **base, **kw})


# -- sizes and presets --------------------------------------------------------------------
@pytest.mark.fast
def test_a_step_of_k_triplets_has_3k_guests_and_their_vcpus_over_the_cpus():
    spec = apply_presets(_triplet(), steps="default", timing="small")
    spec.check()
    steps = spec.steps()
    # Small tiers: 1 vCPU each, so 1 to 4 triplets on 2 CPUs are 1.5 to 6:1.
    assert spec.ratios == (1.5, 3.0, 4.5, 6.0)
    assert [s.guests for s in steps] == [3, 6, 9, 12]
    assert [s.ratio for s in steps] == [1.5, 3.0, 4.5, 6.0]
    small = TRIPLET_SIZES["small"]
    assert steps[0].vcpus == (1, 1, 1)
    assert steps[1].memory_mb == (small.db[1], small.app[1], small.web[1]) * 2
    # A ratio between steps takes the nearest count of triplets, at least one.
    assert _triplet(ratios=(0.5, 2.0)).size(0, 0.5).guests == 3
    assert _triplet().size(0, 2.0).ratio == 1.5


@pytest.mark.fast
def test_study_b_tiers_and_steps_on_8_cpus_are_study_b_s_2_to_6_triplets():
    spec = apply_presets(_triplet(host_cpus=8, tiers="study-b"), steps="study-b", timing="small")
    spec.check()
    assert spec.clients == 4 and spec.triplet.vcpus == 4
    assert [s.guests // 3 for s in spec.steps()] == [2, 3, 4, 5, 6]
    assert [s.ratio for s in spec.steps()] == [1.0, 1.5, 2.0, 2.5, 3.0]
    assert spec.steps()[0].memory_mb == (1800, 2048, 750) * 2
    # On 2 CPUs study B's ratios round to 1 and 2 small triplets: two steps, not five.
    small = apply_presets(_triplet(), steps="study-b", timing="small")
    assert small.ratios == (1.5, 3.0)


@pytest.mark.fast
@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"axis": "vcpus"}, "guests axis only"),
        ({"axis": "memory", "cap_mb": 1024}, "guests axis only"),
        ({"ratios": (1.5, 2.0)}, "both give 1 triplet"),
        ({"tiers": "huge"}, "unknown tier sizes"),
        ({"clients_per_triplet": -1}, "at least 1 client"),
    ],
)
def test_bad_triplet_specs_are_usage_errors(kw, message):
    with pytest.raises(UsageError, match=message):
        _triplet(**kw).check()


@pytest.mark.fast
def test_cli_refuses_other_axes_level_l0_and_guest_sizes_in_one_line(cli, sqlite_url):
    for args in (
        ["--axis", "vcpus"],
        ["--level", "L0"],
        ["--tiers", "huge"],
        ["--guest-memory", "1024"],  # the tiers' sizes come from --tiers
    ):
        got = cli("sweep", "--workload", "triplet", *args, "--db", sqlite_url)
        assert got.returncode == 2, got.stderr
        assert got.stderr.startswith("vmtax: error:") and got.stderr.count("\n") == 1


@pytest.mark.fast
def test_cli_without_php_fails_in_one_line_naming_the_packages(cli, sqlite_url, monkeypatch):
    real = webapp.shutil.which
    monkeypatch.setattr(webapp.shutil, "which", lambda n: None if n == "php-cgi" else real(n))
    got = cli("sweep", "--workload", "triplet", "--db", sqlite_url)
    assert got.returncode == 1
    assert got.stderr.strip() == "vmtax: error: php-cgi not found: install php-cgi php-mysql"


# -- the tiers on this machine ------------------------------------------------------------
def _free_ports(n: int) -> list[int]:
    from vmtax.targets.base import free_port

    ports: list[int] = []
    while len(ports) < n:
        if (p := free_port()) not in ports:
            ports.append(p)
    return ports


def _stop(pid_file: Path, sig: int = signal.SIGTERM) -> None:
    """Stop a server by its pid file (lighttpd stops its php-cgi processes on SIGTERM)."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(pid_file.read_text().split()[0])
        os.kill(pid, sig)
        deadline = time.monotonic() + 15
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)


@pytest.mark.slow
def test_the_three_tiers_chain_on_this_machine(tmp_path):
    """The guests' start scripts run here too (busybox sh, the same servers): a page through
    the web tier comes from the app's PHP and the db's rows; the agent's client reads it."""
    site = tmp_path / "image"
    for path, data in webapp.guest_files().items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_bytes(data)
    scripts = site / str(webapp.GUEST_DIR)[1:]
    db, app, web = _free_ports(3)
    local = LocalTarget(find_agent())

    def start(tier: str, **kw) -> None:
        cmd = webapp.tier_command(tier, workdir=str(tmp_path / tier), **kw)
        cmd = cmd.replace(str(webapp.GUEST_DIR), str(scripts))
        from vmtax.sweep.triplet import start_tier

        assert start_tier(local, tier, cmd) >= 0

    try:
        start("db", port=db, server_id=4242, rows=200, buffer_mb=16)
        start("app", port=app, backend=("127.0.0.1", db), rows=200, children=1)
        start("web", port=web, backend=("127.0.0.1", app))
        page = urllib.request.urlopen(f"http://127.0.0.1:{web}/app.php?id=7", timeout=30)
        text = page.read().decode()
        assert '<p id="server">db server 4242</p>' in text
        assert re.search(r'<p id="row">row 7: [0-9-]{119}</p>', text)
        assert text.count("<tr>") == 10
        lines = list(local.run_agent(["run", "http", "--runs", "1", "--iterations", "5",
                                      "--param", f"port={web}", "--param", "path=/app.php"],
                                     60))  # fmt: skip
        assert any('"run_summary"' in line and '"n":5' in line for line in lines)
    finally:
        _stop(tmp_path / "web" / "lighttpd.pid")
        _stop(tmp_path / "app" / "lighttpd.pid")
        _stop(tmp_path / "db" / "data" / "mysqld.pid", signal.SIGKILL)  # a throwaway database


@pytest.mark.fast
def test_steal_script_reads_proc_stat_at_the_interval(tmp_path):
    script = tmp_path / "steal.sh"
    script.write_text(webapp.STEAL_SCRIPT)
    rec = StealRecorder(LocalTarget(find_agent()), str(script), 0.2, 4)
    rec.run()
    assert rec.error is None and len(rec.readings) == 4
    t = [r[0] for r in rec.readings]
    assert all(0.1 < b - a < 0.6 for a, b in zip(t, t[1:], strict=False))
    share = rec.steal(t[0], t[-1])
    assert share is not None and 0 <= share <= 1
    assert rec.steal(t[0] - 10, t[-1]) is None  # not covered by the readings


# -- a real triplet -----------------------------------------------------------------------
@pytest.fixture
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VMTAX_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


@pytest.mark.slow
def test_a_triplet_of_tcg_guests_serves_pages_from_its_db_and_a_failed_boot_keeps_step_1(
    store: Store, cache
):
    from vmtax.sweep.guests import qemu_factory

    spec = _triplet(ratios=(1.5, 3.0), timing=Timing(2, 4, 2), accel="tcg", events=5)
    spec.check()
    exp = store.create_experiment(command=["vmtax", "sweep"], suite="sweep", seed=0,
                                  plan={"sweep": spec.as_plan(), "level": "L1"},
                                  vmtax_version="test", agent_version=None)  # fmt: skip
    real = qemu_factory(spec, boot_timeout=240)
    booted = []

    class Factory:
        def __call__(self, size, index, vcpus, memory_mb):
            # Step 2's first guest (the second triplet's db) gets 40 MiB: QEMU cannot hold
            # the kernel and initramfs in it.
            guest = real(size, index, vcpus, 40 if index == 3 else memory_mb)
            booted.append((guest.pid, guest.target.guest.workdir))
            return guest

        def clients(self, guests, end, out):
            return real.clients(guests, end, out)

        def close(self):
            real.close()

    pages = []

    class Runner(SweepRunner):
        """Reads a page through each step's triplet while its guests are still up."""

        def run_step(self, size, replicate=0):
            outcome = super().run_step(size, replicate)
            if outcome.status == "ok":
                db, _app, web = outcome.detail["guests"]
                url = f"http://127.0.0.1:{web['port']}/app.php?id=5"
                body = urllib.request.urlopen(url, timeout=60).read().decode()
                pages.append((db["db_server_id"], body))
            return outcome

    with pytest.raises(SweepError) as err:
        Runner(store, spec, Factory()).execute(exp)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("step 2 (3:1): guest 4 of 6 failed to boot")

    # web -> app -> db: the page through the web guest names the db guest's server id.
    [(server_id, body)] = pages
    assert f'<p id="server">db server {server_id}</p>' in body
    assert re.search(r'<p id="row">row 5: [0-9-]{119}</p>', body)

    rows = store.sweeps.steps(exp)
    assert list(rows["status"]) == ["ok", "failed"]
    detail = rows["detail"].iloc[0]
    assert [g["tier"] for g in detail["guests"]] == ["db", "app", "web"]
    assert detail["window_transactions"] > 0 and detail["resp_p95_s"] > 0
    samples = store.sweeps.samples([int(rows["id"].iloc[0])])
    window = samples[samples["phase"] == "window"]
    assert len(window) == 2 and (window["throughput"] > 0).all()
    assert (window["guest_util"] > 0).all()
    # Each guest's own steal was read inside it (TCG has no steal clock: 0).
    assert all(r["steal"] is not None for pg in window["per_guest"] for r in pg)
    # Only the web guest is driven by clients; its throughput is the triplet's.
    for pg, total in zip(window["per_guest"], window["throughput"], strict=True):
        assert [r["throughput"] is None for r in pg] == [True, True, False]
        assert pg[2]["throughput"] == pytest.approx(total)

    # Nothing left: the guests' QEMU processes and their temporary directories are gone.
    assert len(booted) == 3
    for pid, workdir in booted:
        assert not Path(f"/proc/{pid}").exists() or _zombie(pid)
        assert workdir is None or not Path(workdir).exists()


def _zombie(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    return True
