"""SshTarget against a real OpenSSH server on 127.0.0.1 (see test_ssh_support.py)."""

from __future__ import annotations

import threading
import time

import pytest

from test_ssh_support import Sshd, needs_sshd
from vmtax.contract import read_stream
from vmtax.targets.agent import file_sha256
from vmtax.targets.base import AgentTimeout, TargetError, find_agent
from vmtax.targets.ssh import SshTarget, parse_url, redact

pytestmark = pytest.mark.slow


def test_a_normal_run_streams_a_whole_stream_and_copies_the_agent_once(sshd):
    target = sshd.target()
    try:
        stream = read_stream(target.run_agent(["run", "cpuid", "--runs", "2"], timeout=60))
        assert stream.complete and len(stream.runs) == 2, stream.problem
        prov = target.provenance()
        assert prov["agent_copied"] is True
        assert prov["agent_sha256"] == file_sha256(find_agent())
        assert prov["remote_agent"].startswith(str(sshd.remote_dir / prov["agent_sha256"]))
        assert prov["host_key"].startswith("SHA256:")
    finally:
        target.close()
    again = sshd.target()
    try:
        again.prepare()
        assert again.provenance()["agent_copied"] is False  # checksum matched: not re-sent
    finally:
        again.close()


def test_a_changed_host_key_is_refused_with_one_clear_line(sshd):
    sshd.new_host_key()  # the host was "reinstalled"; known_hosts still has the old key
    for accept in (False, True):  # accepting new keys never accepts a changed one
        target = sshd.target(accept_new_host_key=accept)
        with pytest.raises(TargetError) as err:
            target.prepare()
        msg = str(err.value)
        assert "host key changed" in msg and "refused" in msg and "\n" not in msg
        assert target.remote_agent is None


def test_an_unknown_host_needs_the_accept_flag_which_records_its_key(sshd):
    sshd.known_hosts.write_text("")
    with pytest.raises(TargetError, match="host key unknown.*--accept-new-host-key"):
        sshd.target().prepare()
    target = sshd.target(accept_new_host_key=True)
    try:
        target.prepare()
    finally:
        target.close()
    assert f"[127.0.0.1]:{sshd.port} ssh-ed25519 " in sshd.known_hosts.read_text()
    strict = sshd.target()  # now known: no flag needed
    try:
        strict.prepare()
    finally:
        strict.close()


def test_arguments_reach_the_agent_quoted_never_through_a_shell(sshd, tmp_path):
    canary = tmp_path / "injected"
    target = sshd.target()
    try:
        lines = list(
            target.run_agent(
                ["run", "cpuid", "--param", f"leaf=0; touch {canary}", "--runs", "1"], timeout=60
            )
        )
    finally:
        target.close()
    assert not canary.exists()
    assert lines == [] and "leaf" in target.last_stderr  # the agent refused the odd value


def test_a_host_that_drops_the_connection_mid_run_keeps_its_completed_runs(sshd):
    target = sshd.target()
    got: list[str] = []
    try:
        target.prepare()
        it = target.run_agent(["run", "cpu", "--runs", "100", "--duration", "0.2"], timeout=120)
        with pytest.raises(TargetError, match="connection lost|closed"):
            for line in it:
                got.append(line)
                if '"run_summary"' in line and '"run":1,' in line.replace(" ", ""):
                    # Two runs are in: the host goes away (its session sshd is killed).
                    threading.Thread(target=sshd.drop_connections).start()
    finally:
        target.close()
    stream = read_stream(got)
    assert len(stream.runs) >= 2 and stream.end is None
    assert all(len(r.values) == r.summary.n for r in stream.runs)


def test_a_run_past_its_timeout_is_stopped(sshd):
    target = sshd.target()
    try:
        t0 = time.monotonic()
        with pytest.raises(AgentTimeout):
            for _ in target.run_agent(
                ["run", "cpu", "--runs", "100", "--duration", "0.5"], timeout=3
            ):
                pass
        assert time.monotonic() - t0 < 20
        # The connection survives: the next run works.
        assert read_stream(target.run_agent(["run", "syscall", "--runs", "1"], 60)).complete
    finally:
        target.close()


def test_a_host_that_is_down_fails_with_one_line(tmp_path):
    needs_sshd()
    down = Sshd(tmp_path / "down")  # configured but never started
    down.trust()
    with pytest.raises(TargetError, match="cannot connect"):
        down.target(connect_timeout=5).prepare()


def test_urls_are_parsed_and_passwords_refused():
    assert parse_url("ssh://bench@node1:2222") == ("bench", "node1", 2222)
    assert parse_url("ssh://node1") == (None, "node1", 22)
    with pytest.raises(Exception, match="passwords in ssh URLs"):
        SshTarget("ssh://bench:hunter2@node1")
    assert "hunter2" not in redact("ssh://bench:hunter2@node1")


def test_through_the_runner_a_host_that_goes_away_keeps_its_completed_runs(sshd, tmp_path):
    import os
    import shutil
    import signal
    import subprocess

    from vmtax.store import Store

    vmtax = shutil.which("vmtax") or pytest.fail("the vmtax command is not installed")
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(
        f'[[hosts]]\nurl = "{sshd.url}"\nname = "gone"\nidentity = "{sshd.client_key}"\n'
        f'known_hosts = "{sshd.known_hosts}"\nremote_dir = "{sshd.remote_dir}"\n'
        'python = "/usr/bin/python3"\n'  # Ansible's modules run on the system Python
    )
    db = f"sqlite:///{tmp_path / 'gone.db'}"
    proc = subprocess.Popen(
        [vmtax, "run", "--targets", str(hosts), "--probe", "cpu", "--runs", "30", "--db", db],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        deadline = time.monotonic() + 90
        ok = 0
        while ok < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.3)
            if (tmp_path / "gone.db").exists():
                try:
                    with Store.open(db, read_only=True) as store:
                        ok = int((store.runs()["status"] == "ok").sum())
                except Exception:  # the schema may still be being created
                    ok = 0
        assert ok >= 2, "no completed runs before the host went away"
        sessions = sshd.session_children()
        sshd.stop()  # the host goes away: listener and live sessions
        for pid in sessions:
            os.kill(pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and "gone" in err
    with Store.open(db, read_only=True) as store:
        runs = store.runs()
        ok_runs = runs[runs["status"] == "ok"]
        samples = store.samples(ok_runs["run_id"])
    assert len(ok_runs) >= 2 and (runs["status"] != "ok").any()
    assert all(len(samples[r.run_id]) == r.n for r in ok_runs.itertuples())
