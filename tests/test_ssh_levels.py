"""`vmtax run --target ssh://... --levels L0,L1`: an SSH host beside this machine's levels.

Reported once as an experiment marked failed while every one of its runs was ok. One L1 boot
and one run a configuration: the three configurations, their runs and the experiment's
status must all say ok.
"""

from __future__ import annotations

import re
import shutil

import platformdirs
import pytest

from vmtax.store import Store

pytestmark = pytest.mark.slow


def test_an_ssh_host_beside_levels_l0_l1_ends_ok(cli, sshd, tmp_path, monkeypatch):
    # The guest image comes from the usual cache; the SSH client finds the test's key and
    # known_hosts where a user's are, under $HOME (the URL carries no key).
    monkeypatch.setenv("VMTAX_CACHE_DIR", platformdirs.user_cache_dir("vmtax"))
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copy(sshd.client_key, home / ".ssh" / "id_ed25519")
    shutil.copy(sshd.known_hosts, home / ".ssh" / "known_hosts")
    monkeypatch.setenv("HOME", str(home))
    db = f"sqlite:///{tmp_path / 'e.db'}"
    res = cli("run", "--target", sshd.url, "--levels", "L0,L1", "--accel", "tcg",
              "--boots", "1", "--probe", "cpuid", "--runs", "1", "--db", db)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    with Store.open(db, read_only=True) as store:
        runs = store.runs()
        status = store.experiment(1)["status"]
    configs = {(r.level, "host" in r.labels) for r in runs.itertuples()}
    assert configs == {("L0", False), ("L0", True), ("L1", False)}, runs[["config", "status"]]
    assert (runs["status"] == "ok").all() and len(runs) == 3, runs[["config", "error"]]
    assert status == "ok"
    assert re.search(r"experiment 1 · suite \S+ · ok\b", res.stdout), res.stdout[:500]
