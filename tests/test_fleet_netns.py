"""A fleet of real sshd servers, each in its own network namespace, measured by `vmtax run
--inventory` through Ansible into one real PostgreSQL server.

Every host is an sshd started with `ip netns exec` in a namespace the test creates, reached
over a veth pair whose two addresses the test picks in a 10.x range no interface of this
machine uses; each sshd has its own host key, checked against the known_hosts the test
writes. Traffic stays on those veths. Everything
(namespaces, veths, sshd processes) is removed at the end, and the test checks that.

The other modules of fault tests (test_faults_*.py) build their fleets with the same
``NetnsFleet``.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import random
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SSHD = "/usr/sbin/sshd"
#: The hosts are this machine: Ansible's modules run on its system Python, which has no
#: version manager's shims in front of it.
HOST_PYTHON = "/usr/bin/python3"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")

TINY_SUITE = """
name = "fleet-tiny"
seed = 5
[defaults]
runs = {runs}
iterations = 2000
duration = 0.05
warmup = 10
timeout = 60
[[probes]]
probe = "cpuid"
"""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _keygen(path: Path, passphrase: str = "") -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f", str(path)], check=True
    )


def _free_subnet() -> int:
    """A second octet X such that no address or route of this machine is in 10.X.0.0/16."""
    used = _ip("-4", "route", "show", "table", "all").stdout + _ip("-4", "addr").stdout
    candidates = list(range(100, 250))
    random.shuffle(candidates)
    for x in candidates:
        if f"10.{x}." not in used:
            return x
    pytest.fail("no free 10.x.0.0/16 range for the fleet's veths")


class NetnsHost:
    """One sshd in its own network namespace, reached over a veth pair."""

    def __init__(self, fleet: NetnsFleet, index: int) -> None:
        self.fleet = fleet
        self.index = index
        self.ns = f"vmtax-{fleet.tag}-{index}"
        self.veth = f"vx{fleet.tag}{index:02d}"  # host side; <= 15 characters
        self.peer = f"vy{fleet.tag}{index:02d}"  # moved into the namespace
        self.host_addr = f"10.{fleet.octet}.{index}.1"
        self.addr = f"10.{fleet.octet}.{index}.2"
        self.name = f"node{index:02d}"
        self.root = fleet.root / self.name
        self.root.mkdir(parents=True)
        self.host_key = self.root / "host_ed25519"
        _keygen(self.host_key)
        self.proc: subprocess.Popen[bytes] | None = None
        (self.root / "sshd_config").write_text(
            "\n".join(
                [
                    "Port 22",
                    f"ListenAddress {self.addr}",
                    f"HostKey {self.host_key}",
                    f"PidFile {self.root / 'sshd.pid'}",
                    f"AuthorizedKeysFile {fleet.root / 'authorized_keys'}",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "PermitRootLogin prohibit-password",
                    "StrictModes no",
                    "UseDNS no",
                    "MaxStartups 100",
                    "Subsystem sftp internal-sftp",
                    "LogLevel ERROR",
                    "",
                ]
            )
        )

    @property
    def url(self) -> str:
        return f"ssh://{self.fleet.user}@{self.addr}"

    def public_key(self) -> str:
        kind, blob = (self.root / "host_ed25519.pub").read_text().split()[:2]
        return f"{kind} {blob}"

    def create_network(self) -> None:
        self.fleet.created_ns.append(self.ns)
        _ip("netns", "add", self.ns)
        _ip("link", "add", self.veth, "type", "veth", "peer", "name", self.peer)
        self.fleet.created_links.append(self.veth)
        _ip("link", "set", self.peer, "netns", self.ns)
        _ip("addr", "add", f"{self.host_addr}/30", "dev", self.veth)
        _ip("link", "set", self.veth, "up")
        _ip("-n", self.ns, "addr", "add", f"{self.addr}/30", "dev", self.peer)
        _ip("-n", self.ns, "link", "set", self.peer, "up")
        _ip("-n", self.ns, "link", "set", "lo", "up")

    def start(self) -> None:
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
        # `ip netns exec` execs sshd, so this pid is the listener itself.
        self.proc = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                self.ns,
                SSHD,
                "-D",
                "-e",
                "-f",
                str(self.root / "sshd_config"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=(self.root / "sshd.log").open("wb"),
        )

    def wait_listening(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                pytest.fail(f"sshd of {self.name} exited: {(self.root / 'sshd.log').read_text()}")
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex((self.addr, 22)) == 0:
                    return
            time.sleep(0.05)
        pytest.fail(f"sshd of {self.name} did not listen on {self.addr}:22")

    def session_children(self) -> list[int]:
        """PIDs of the per-connection sshd processes of this host."""
        if self.proc is None or self.proc.poll() is not None:
            return []
        try:
            text = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split()]

    def agents(self) -> list[int]:
        """PIDs of vmtax-probe processes running under this host's sshd."""
        out = []
        todo = self.session_children()
        while todo:
            pid = todo.pop()
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/comm").read_text().strip() == "vmtax-probe":
                    out.append(pid)
                text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
                todo.extend(int(p) for p in text.split())
        return out

    def drop_sessions(self) -> None:
        """The SSH session goes away: SIGKILL its sshd processes (the listener stays)."""
        for pid in self.session_children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def stop(self) -> None:
        for pid in self.session_children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


class NetnsFleet:
    """``n`` hosts, one namespace + veth pair + sshd each, sharing one client key."""

    def __init__(self, root: Path, n: int) -> None:
        if os.geteuid() != 0 or not shutil.which("ip") or not Path(SSHD).is_file():
            pytest.fail("the netns fleet needs root, iproute2 and openssh-server (scripts/test)")
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.tag = secrets.token_hex(2)
        self.octet = _free_subnet()
        self.user = os.environ.get("USER") or "root"
        self.created_ns: list[str] = []
        self.created_links: list[str] = []
        self.client_key = root / "client_ed25519"
        _keygen(self.client_key)
        (root / "authorized_keys").write_text((root / "client_ed25519.pub").read_text())
        self.known_hosts = root / "known_hosts"
        self.remote_dir = root / "remote-cache"  # one home for all: the agent is copied once
        self.hosts = [NetnsHost(self, i) for i in range(n)]

    def start(self) -> None:
        for h in self.hosts:
            h.create_network()
        for h in self.hosts:
            h.start()
        deadline = time.monotonic() + 30
        for h in self.hosts:
            h.wait_listening(deadline)
        self.trust()

    def trust(self) -> None:
        self.known_hosts.write_text("".join(f"{h.addr} {h.public_key()}\n" for h in self.hosts))

    def hosts_toml(self, limit: int, **extra: str) -> Path:
        lines = [f"max_concurrency = {limit}", "", "[defaults]"]
        lines += [f'identity = "{self.client_key}"', f'known_hosts = "{self.known_hosts}"']
        lines += [f'remote_dir = "{self.remote_dir}"', f'python = "{HOST_PYTHON}"']
        lines += [f"{k} = {v}" for k, v in extra.items()]
        for h in self.hosts:
            lines += ["", "[[hosts]]", f'url = "{h.url}"', f'name = "{h.name}"']
            lines += [f'labels = {{ rack = "r{h.index % 3}" }}']
        path = self.root / "hosts.toml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def inventory_ini(self, forks: int, groups: dict[str, list[NetnsHost]]) -> Path:
        """An Ansible INI inventory of these hosts in ``groups``, plus a group ``spare``
        whose one host nothing answers for."""
        lines = ["[all:vars]", f"vmtax_forks={forks}", f"ansible_user={self.user}",
                 f"ansible_ssh_private_key_file={self.client_key}",
                 f"ansible_ssh_common_args='-o UserKnownHostsFile={self.known_hosts}'",
                 f"vmtax_remote_dir={self.remote_dir}",
                 f"ansible_python_interpreter={HOST_PYTHON}"]  # fmt: skip
        for group, hosts in groups.items():
            lines += ["", f"[{group}]"]
            lines += [
                f"{h.name} ansible_host={h.addr} vmtax_label_rack=r{h.index % 3}" for h in hosts
            ]
        lines += ["", "[spare]", f"gone ansible_host=10.{self.octet}.255.2"]
        path = self.root / "inventory.ini"
        path.write_text("\n".join(lines) + "\n")
        return path

    def teardown(self) -> None:
        for h in self.hosts:
            h.stop()
        for ns in self.created_ns:
            _ip("netns", "del", ns, check=False)  # takes the peer end, and so the pair, along
        for link in self.created_links:
            _ip("link", "del", link, check=False)

    def leftovers(self) -> list[str]:
        """Anything of this fleet still present on the machine."""
        out = [
            ns for ns in _ip("netns", "list").stdout.split() if ns.startswith(f"vmtax-{self.tag}-")
        ]
        out += [
            ln for ln in self.created_links if _ip("link", "show", ln, check=False).returncode == 0
        ]
        out += [f"sshd {h.name}" for h in self.hosts if h.proc and h.proc.poll() is None]
        return out


def vmtax_cmd() -> list[str]:
    return [sys.executable, "-c", "from vmtax.entry import main; main()"]


def vmtax_env() -> dict[str, str]:
    from vmtax.targets.base import find_agent

    env = {k: v for k, v in os.environ.items() if k != "VMTAX_DB"}
    env["VMTAX_PROBE"] = str(find_agent())
    return env


def suite_file(tmp_path: Path, runs: int = 2) -> Path:
    path = tmp_path / "fleet-tiny.toml"
    path.write_text(TINY_SUITE.format(runs=runs))
    return path


class PtyRun:
    """`vmtax ...` with stderr on a pseudo-terminal (so the live display is drawn, as for a
    user) and stdout on a pipe; the terminal's output is collected by a thread."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        import fcntl
        import termios

        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 160, 0, 0))
        run_env = dict(env or vmtax_env())
        run_env.update({"TERM": "xterm", "COLUMNS": "160", "LINES": "60"})
        run_env.pop("NO_COLOR", None)
        self.proc = subprocess.Popen(
            [*vmtax_cmd(), *args], stdout=subprocess.PIPE, stderr=slave, text=True, env=run_env
        )
        os.close(slave)
        self._master = master
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._master, 65536)
            except OSError:
                return
            if not data:
                return
            self._chunks.append(data)

    def wait(self, timeout: float) -> tuple[int, str, str]:
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            raise
        self._reader.join(5)
        os.close(self._master)
        return self.proc.returncode, out, self.terminal()

    def terminal(self) -> str:
        return ANSI.sub("", b"".join(self._chunks).decode("utf-8", "replace"))


class ConcurrencyWatch:
    """Samples, every 50 ms, how many hosts have an SSH session open."""

    def __init__(self, hosts: list[NetnsHost]) -> None:
        self.hosts = hosts
        self.peak = 0
        self.peak_agents = 0
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            busy = [h.name for h in self.hosts if h.session_children()]
            self.peak = max(self.peak, len(busy))
            self.seen.update(busy)
            # A session's sshd can outlive vmtax's close by a moment, overlapping the next
            # host's; an agent runs only while vmtax measures that host.
            measuring = sum(1 for h in self.hosts if h.agents())
            self.peak_agents = max(self.peak_agents, measuring)
            time.sleep(0.05)

    def __enter__(self) -> ConcurrencyWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def drew_complete(terminal: str, name: str, total: int) -> bool:
    """Whether the live display drew host ``name``'s line with all ``total`` runs done."""
    return re.search(rf"\b{name}\b[^\n]*?\b{total}/{total}\b", terminal) is not None


def test_an_inventory_of_eight_hosts_through_ansible_into_one_postgresql(
    netns_fleet, postgres_url, tmp_path
):
    """Eight hosts of an INI inventory in two groups, run by Ansible with 3 forks; a third
    group that --limit leaves out lists an address nothing answers on. (bench/fleet_scale.py
    runs 20 hosts and more: too long for CI.)"""
    from vmtax.store import Store

    fleet = netns_fleet(8)
    forks = 3
    inventory = fleet.inventory_ini(forks, groups={"kvm_hosts": fleet.hosts[:4],
                                                   "bare": fleet.hosts[4:]})  # fmt: skip
    suite = suite_file(tmp_path, runs=2)
    assert len({h.public_key() for h in fleet.hosts}) == 8  # eight distinct host keys
    args = ["run", "--inventory", str(inventory), "--limit", "all:!spare", "--suite", str(suite),
            "--db", postgres_url]  # fmt: skip
    with ConcurrencyWatch(fleet.hosts) as watch:
        code, out, terminal = PtyRun(args).wait(timeout=600)
    assert code == 0, terminal[-3000:]
    # Ansible's forks bound the hosts measured at once; more than one host was connected at a
    # time (an agent runs for a few ms of each item, too briefly to be seen twice at once).
    assert watch.peak_agents <= forks, watch.peak_agents
    assert watch.peak >= 2, watch.peak
    assert watch.seen == {h.name for h in fleet.hosts}
    # The live display drew a line per host, each ended complete, and the hosts' tally.
    assert all(drew_complete(terminal, h.name, 2) for h in fleet.hosts), terminal[-3000:]
    assert "hosts: 8 done, 0 running, 0 failed" in terminal, terminal[-3000:]
    exp = int(re.search(r"^experiment (\d+)$", out, re.M).group(1))
    with Store.open(postgres_url, read_only=True) as store:
        runs = store.runs([f"exp={exp}"])
        info = store.experiment(exp)
    assert info["status"] == "ok"
    assert len(info["configurations"]) == 8
    assert (runs["status"] == "ok").all() and len(runs) == 8 * 2
    assert not runs.duplicated(["target", "plan_index", "run_index"]).any()
    assert sorted(set(runs["target"])) == [h.name for h in fleet.hosts]
    labels = {c["labels"]["host"]: c["labels"] for c in info["configurations"]}
    assert set(labels) == {h.name for h in fleet.hosts}
    assert {labels[h.name]["group"] for h in fleet.hosts[:4]} == {"kvm_hosts"}
    assert {labels[h.name]["group"] for h in fleet.hosts[4:]} == {"bare"}
    # The agent was copied once to the hosts' shared directory and checked on every host.
    sums = {c["provenance"]["agent_sha256"] for c in info["configurations"]}
    assert len(sums) == 1
    # The tax of one inventory group against another, hosts as the unit: four hosts a side,
    # each entering as the mean of its runs (the hosts are one machine's namespaces, so the
    # verdict is not asked for, only its unit and its scope).
    res = subprocess.run([sys.executable, "-c", "from vmtax.entry import main; main()", "compare",
                          f"exp={exp}", "--by", "group", "--baseline", "group=bare", "--format",
                          "json", "--db", postgres_url], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr
    rows = [r for r in json.loads(res.stdout)["rows"] if r["probe"] != "geomean"]
    assert {r["config"] for r in rows} == {"group=bare", "group=kvm_hosts"}
    for r in rows:
        assert r["boots"] == 4 and r["n_runs"] == 8, r  # four hosts, two runs each
        assert not any("one host" in w for w in r["warnings"]), r
