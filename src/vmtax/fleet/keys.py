"""Encrypted identity keys for Ansible's ssh: unlocked once, into a private ssh-agent.

Ansible's ssh asks no passphrase (it has no terminal). A host whose inventory names
``vmtax_passphrase_env`` (``passphrase_env`` in hosts.toml) has its key added to an ssh-agent
of this run's own, with the passphrase read from that environment variable by ssh-add's
askpass program; the passphrase never reaches a file, an argument or a message. The agent
lives as long as the run.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path

# The askpass program ssh-add runs: it prints the variable the caller named, from its own
# environment, so the secret is never written anywhere.
_ASKPASS = '#!/bin/sh\nexec printenv "$VMTAX_ASKPASS_VAR"\n'


class PrivateAgent:
    """An ssh-agent on a socket in ``directory``, started when the first key is added."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.sock = directory / "agent.sock"
        self._proc: subprocess.Popen[bytes] | None = None
        self._added: set[str] = set()

    def _start(self) -> None:
        self._proc = subprocess.Popen(
            ["ssh-agent", "-D", "-a", str(self.sock)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not self.sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        askpass = self.directory / "askpass"
        askpass.write_text(_ASKPASS)
        askpass.chmod(0o700)

    def add(self, key: str, passphrase_env: str) -> str | None:
        """Add ``key``, unlocked with ``$passphrase_env``; a one-line reason when it cannot."""
        if key in self._added:
            return None
        why = (
            f"cannot unlock identity {key}: wrong or missing passphrase "
            f"(set ${passphrase_env} or add the key to ssh-agent)"
        )
        if not os.environ.get(passphrase_env):
            return why
        if self._proc is None:
            self._start()
        env = {**os.environ, "SSH_AUTH_SOCK": str(self.sock), "DISPLAY": ":0",
               "SSH_ASKPASS": str(self.directory / "askpass"), "SSH_ASKPASS_REQUIRE": "force",
               "VMTAX_ASKPASS_VAR": passphrase_env}  # fmt: skip
        done = subprocess.run(
            ["ssh-add", "--", os.path.expanduser(key)], env=env, stdin=subprocess.DEVNULL,
            capture_output=True, timeout=60, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            return why
        self._added.add(key)
        return None

    @property
    def running(self) -> bool:
        return self._proc is not None

    def close(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(5)
            self._proc = None
