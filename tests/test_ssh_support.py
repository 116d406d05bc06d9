"""A real OpenSSH server on 127.0.0.1 for the SSH and fleet tests (no mocks).

Each server has its own host key, config, client key and authorized_keys under tmp_path;
it runs as this user (root) with pubkey authentication only and no PAM.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SSHD = "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@dataclass
class Sshd:
    root: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.host_key = self.root / "host_ed25519"
        self.client_key = self.root / "client_ed25519"
        self.known_hosts = self.root / "known_hosts"
        self.remote_dir = self.root / "remote-cache"
        keygen(self.host_key)
        if not self.client_key.exists():
            keygen(self.client_key)
        (self.root / "authorized_keys").write_text((self.root / "client_ed25519.pub").read_text())
        user = os.environ.get("USER") or "root"
        self.url = f"ssh://{user}@127.0.0.1:{self.port}"
        (self.root / "sshd_config").write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {self.host_key}",
                    f"PidFile {self.root / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "PermitRootLogin prohibit-password",
                    "StrictModes no",
                    "Subsystem sftp internal-sftp",
                    "LogLevel ERROR",
                    "",
                ]
            )
        )

    def trust(self) -> None:
        """Write the server's current host key into the client's known_hosts."""
        pub = (self.root / "host_ed25519.pub").read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {pub[0]} {pub[1]}\n")

    def start(self) -> None:
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.root / "sshd_config")],
            stdout=subprocess.DEVNULL,
            stderr=(self.root / "sshd.log").open("wb"),
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {(self.root / 'sshd.log').read_text()}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError("sshd did not listen")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(5)
        self.proc = None

    def session_children(self) -> list[int]:
        """PIDs of the per-connection sshd processes (children of the listener)."""
        assert self.proc is not None
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def drop_connections(self) -> None:
        for pid in self.session_children():
            os.kill(pid, signal.SIGKILL)

    def new_host_key(self) -> None:
        """Regenerate the host key (as a reinstalled host would) and restart."""
        self.stop()
        for suffix in ("", ".pub"):
            (self.root / f"host_ed25519{suffix}").unlink()
        keygen(self.host_key)
        self.start()

    def target(self, **kw: object):
        from vmtax.targets.ssh import SshTarget

        opts: dict[str, object] = {
            "known_hosts": str(self.known_hosts),
            "identity": str(self.client_key),
            "remote_dir": str(self.remote_dir),
        }
        opts.update(kw)
        return SshTarget(self.url, **opts)  # type: ignore[arg-type]


def needs_sshd() -> None:
    if not Path(SSHD).is_file() or not shutil.which("ssh-keygen"):
        # scripts/test installs it; a missing sshd is a broken set-up, not a reason to pass.
        pytest.fail("openssh-server is not installed (scripts/test installs it)")
