"""SSH hosts as targets (asyncssh): ``ssh://user@host[:port]``.

- Host keys are checked against known_hosts. A changed key is always refused; an unknown
  host is refused unless ``accept_new_host_key`` (then its key is added, like OpenSSH's
  ``StrictHostKeyChecking=accept-new``).
- The agent is copied once per version into a per-user cache dir on the host
  (``~/.cache/vmtax/agents/<sha256>/vmtax-probe``, or ``remote_dir/<sha256>/``) and its
  sha256 is checked there.
- Servers that workloads start on the host get a fresh directory from the host's own
  ``mktemp -d`` (its temporary directory, not a home that may be shared over NFS), filled
  over SFTP and removed after the run.
- Remote commands are built from argument lists with ``shlex.quote``; nothing from the URL
  or the plan reaches a shell unquoted. Passwords and key material are never logged.
- An encrypted identity key is unlocked with the passphrase in the environment variable the
  host names (``passphrase_env``, default ``VMTAX_SSH_PASSPHRASE``), or through ssh-agent.
  The passphrase itself is never written to a file, a message or the store.

asyncssh is asynchronous and targets are synchronous, so each target runs a private event
loop in a daemon thread and waits on it with timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import queue
import secrets
import shlex
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

import asyncssh

from vmtax.errors import UsageError
from vmtax.targets.agent import file_sha256
from vmtax.targets.base import (
    EOF_MARK,
    Capabilities,
    Target,
    TargetError,
    agent_free_port,
    find_agent,
    lines_until_eof,
)
from vmtax.targets.servers import (
    TMP_PREFIX,
    HostEnd,
    Listener,
    PlacedServer,
    ServerError,
    ServerSpec,
    Spot,
    free_ports,
    hostport,
)

T = TypeVar("T")
CONNECT_TIMEOUT = 20.0
REMOTE_CACHE = ".cache/vmtax/agents"
PASSPHRASE_ENV = "VMTAX_SSH_PASSPHRASE"  # noqa: S105 - the variable's name, not a secret


def parse_url(url: str) -> tuple[str | None, str, int]:
    """``ssh://user@host[:port]`` -> (user, host, port); UsageError when malformed."""
    bad = f"not an ssh URL: {redact(url)} (expected ssh://user@host[:port])"
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        # urlsplit would quietly drop some of them (a leading tab, a newline).
        raise UsageError(f"not an ssh URL: {redact(url)!r} contains spaces or control characters")
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError:  # e.g. an unclosed [IPv6 bracket
        raise UsageError(bad) from None
    if parts.scheme != "ssh" or not hostname:
        raise UsageError(bad)
    if parts.password is not None:
        raise UsageError("passwords in ssh URLs are not accepted; use a key or ssh-agent")
    try:
        port = parts.port or 22
    except ValueError:
        raise UsageError(f"bad port in {redact(url)}") from None
    return (unquote(parts.username) if parts.username else None), hostname, port


def redact(url: str) -> str:
    """The URL without any password, for messages."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "(malformed URL)"
    if password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return parts._replace(netloc=netloc).geturl()


def _local_path(value: str, what: str) -> Path:
    """A path on this machine, ``~`` expanded; UsageError for one that cannot be a path."""
    try:
        path = Path(value).expanduser()
        os.fspath(path).encode()
    except (RuntimeError, ValueError, UnicodeError):  # ~nosuchuser, surrogates
        raise UsageError(f"{what}: not a usable path: {value!r}") from None
    if "\0" in str(path):
        raise UsageError(f"{what}: a path cannot contain a NUL byte")
    return path


def known_hosts_key(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


class SshTarget(Target):
    """Run the agent on an SSH host; level L0 of that host unless told otherwise."""

    def __init__(
        self,
        url: str,
        *,
        accept_new_host_key: bool = False,
        known_hosts: str | None = None,
        identity: str | None = None,
        level: str = "L0",
        name: str | None = None,
        agent: str | None = None,
        labels: dict[str, str] | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
        remote_dir: str | None = None,
        passphrase_env: str = PASSPHRASE_ENV,
    ) -> None:
        self.url = url
        self.user, self.host, self.port = parse_url(url)
        self.accept_new_host_key = accept_new_host_key
        self.known_hosts = _local_path(known_hosts or "~/.ssh/known_hosts", "known_hosts")
        self.identity = str(_local_path(identity, "identity")) if identity else None
        self.level = level
        self.name = name or f"ssh://{self.user + '@' if self.user else ''}{self.host}:{self.port}"
        self._agent_arg = agent
        self._labels = dict(labels or {})
        self.connect_timeout = connect_timeout
        self.remote_dir = remote_dir
        self.passphrase_env = passphrase_env
        self.last_stderr = ""
        self.remote_agent: str | None = None
        self.agent_sha256: str | None = None
        self.agent_copied = False
        self.host_key_fingerprint: str | None = None
        self._conn: asyncssh.SSHClientConnection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- event loop plumbing ------------------------------------------------------------------
    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(
                target=self._loop.run_forever, daemon=True, name=f"vmtax-ssh-{self.host}"
            )
            self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout)
        except TimeoutError:
            fut.cancel()
            raise

    # -- connection ---------------------------------------------------------------------------
    def _options(self, known_hosts: Any) -> dict[str, Any]:
        opts: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "known_hosts": known_hosts,
            "connect_timeout": self.connect_timeout,
            "keepalive_interval": 15,
            "keepalive_count_max": 3,
        }
        if self.user:
            opts["username"] = self.user
        if self.identity:
            opts["client_keys"] = [self.identity]
        passphrase = os.environ.get(self.passphrase_env)
        if passphrase:
            opts["passphrase"] = passphrase
        return opts

    def _host_is_known(self) -> bool:
        if not self.known_hosts.is_file():
            return False
        try:
            entries = asyncssh.read_known_hosts(str(self.known_hosts))
        except (OSError, ValueError):
            return False
        trusted = entries.match(self.host, "", self.port)
        return any(trusted[:3])

    async def _connect(self) -> asyncssh.SSHClientConnection:
        known = str(self.known_hosts) if self.known_hosts.is_file() else ()
        try:
            return await asyncssh.connect(**self._options(known))
        except asyncssh.HostKeyNotVerifiable:
            if self.accept_new_host_key and not self._host_is_known():
                conn = await asyncssh.connect(**self._options(None))
                self._remember_host_key(conn)
                return conn
            raise

    def _remember_host_key(self, conn: asyncssh.SSHClientConnection) -> None:
        key = conn.get_server_host_key()
        if key is None:
            return
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        line = f"{known_hosts_key(self.host, self.port)} {key.export_public_key().decode().strip()}"
        with self.known_hosts.open("a") as fh:
            fh.write(line + "\n")

    def prepare(self) -> None:
        if self._conn is not None:
            return
        try:
            self._conn = self._call(self._connect(), self.connect_timeout + 5)
            key = self._conn.get_server_host_key()
            self.host_key_fingerprint = key.get_fingerprint() if key else None
            self._install_agent()
        except asyncssh.HostKeyNotVerifiable as exc:
            self.close()
            known = "changed" if self._host_is_known() else "unknown"
            hint = (
                "if the host was reinstalled, remove its old key with "
                f"ssh-keygen -R '{known_hosts_key(self.host, self.port)}'"
                if known == "changed"
                else "pass --accept-new-host-key to trust it"
            )
            raise TargetError(
                f"{self.name}: host key {known} ({exc.reason}); refused; {hint}"
            ) from None
        except TargetError:
            self.close()
            raise
        except asyncssh.PermissionDenied:
            self.close()
            raise TargetError(f"{self.name}: authentication refused") from None
        except asyncssh.KeyImportError:
            # asyncssh's message can quote the key file's contents: never show it.
            self.close()
            raise TargetError(
                f"{self.name}: cannot unlock identity {self.identity}: wrong or missing "
                f"passphrase (set ${self.passphrase_env} or add the key to ssh-agent)"
            ) from None
        except asyncssh.KeyEncryptionError:
            self.close()
            raise TargetError(
                f"{self.name}: cannot unlock identity {self.identity}: an encrypted "
                "OpenSSH-format key needs the bcrypt package (pip install bcrypt), or "
                "ssh-agent, or the key re-encrypted as PEM (ssh-keygen -p -m PEM)"
            ) from None
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            self.close()
            reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
            raise TargetError(
                f"{self.name}: cannot connect: {reason or type(exc).__name__}"
            ) from None

    # -- agent copy ---------------------------------------------------------------------------
    def _install_agent(self) -> None:
        local = find_agent(self._agent_arg)
        digest = file_sha256(local)
        self.agent_sha256 = digest
        self.remote_agent, self.agent_copied = self._call(self._copy_agent(local, digest), 300)

    async def _copy_agent(self, local: Path, digest: str) -> tuple[str, bool]:
        assert self._conn is not None
        async with self._conn.start_sftp_client() as sftp:
            base = self.remote_dir or f"{await sftp.realpath('.')}/{REMOTE_CACHE}"
            directory = f"{base}/{digest}"
            path = f"{directory}/vmtax-probe"
            if await sftp.exists(path) and await self._remote_sha256(path) == digest:
                return path, False
            await sftp.makedirs(directory, exist_ok=True)
            # Unique per copy: hosts of one fleet may share a home directory (NFS), and
            # several threads of this process may copy to it at the same time.
            part = f"{path}.part{os.getpid()}-{secrets.token_hex(4)}"
            await sftp.put(str(local), part)
            await sftp.chmod(part, 0o755)
            got = await self._remote_sha256(part)
            if got != digest:
                await sftp.remove(part)
                raise TargetError(
                    f"{self.name}: agent copy corrupted (sha256 {got[:12]} != {digest[:12]})"
                )
            await sftp.posix_rename(part, path)
            return path, True

    async def _remote_sha256(self, path: str) -> str:
        assert self._conn is not None
        res = await self._conn.run(shlex.join(["sha256sum", "--", path]), check=False)
        out = str(res.stdout or "")
        if res.exit_status == 0 and out:
            return out.split()[0]
        # No sha256sum on the host: read the file back and hash it here.
        h = hashlib.sha256()
        async with self._conn.start_sftp_client() as sftp, sftp.open(path, "rb") as fh:
            while True:
                chunk: bytes = await fh.read(1 << 20)  # a file opened "rb" reads bytes
                if not chunk:
                    break
                h.update(chunk)
        return h.hexdigest()

    @contextlib.contextmanager
    def place_server(self, spec: ServerSpec) -> Iterator[PlacedServer]:
        """A port free on the host's loopback and a fresh scratch directory there holding
        the server's files; the agent there starts the server for the run and stops it
        after, and the directory is removed after."""
        try:
            port = agent_free_port(self)
        except TargetError as exc:
            raise ServerError(exc.message) from None
        directory = self.make_scratch(f"{TMP_PREFIX}{spec.name}-")
        try:
            self.put_files(directory, spec.files(directory, port))
            spot = Spot(directory, port, spec.remote_user)
            params = {"server": " ".join(spec.command(spot))} if spec.command else {}
            yield PlacedServer(port, directory, directory, agent_params=params)
        finally:
            self.remove_scratch(directory)

    def host_end(self, what: str) -> HostEnd:
        here, _ = self.link_addresses()
        return HostEnd(here, here)

    def listeners(self, count: int, what: str) -> list[Listener]:
        _, there = self.link_addresses()
        ports = free_ports(count, lambda: agent_free_port(self))
        return [Listener(hostport(there, p), hostport(there, p)) for p in ports]

    def capabilities(self) -> Capabilities:
        return Capabilities(
            free_port=lambda: agent_free_port(self),
            make_scratch=self.make_scratch,
            remove_scratch=self.remove_scratch,
            put_files=self.put_files,
            link_addresses=self.link_addresses,
        )

    def link_addresses(self) -> tuple[str, str]:
        """(this machine's address, the host's address) on the SSH connection: where each
        end reaches the other, for workloads with one end here and one there."""
        self.prepare()
        assert self._conn is not None
        here = self._conn.get_extra_info("sockname")
        there = self._conn.get_extra_info("peername")
        return str(here[0]), str(there[0])

    # -- scratch directories for servers -------------------------------------------------------
    def make_scratch(self, prefix: str) -> str:
        """A fresh directory in the host's temporary directory, named ``prefix`` and a
        random suffix; ``remove_scratch`` removes it."""
        self.prepare()
        return self._call(self._make_scratch(prefix), 60)

    async def _make_scratch(self, prefix: str) -> str:
        assert self._conn is not None
        argv = ["mktemp", "-d", "-t", f"{prefix}XXXXXXXX"]
        res = await self._conn.run(shlex.join(argv), check=False)
        directory = str(res.stdout or "").strip()
        if res.exit_status != 0 or not directory.startswith("/"):
            why = str(res.stderr or "").strip() or f"exit status {res.exit_status}"
            raise TargetError(f"{self.name}: cannot make a scratch directory: {why}")
        async with self._conn.start_sftp_client() as sftp:
            await sftp.chmod(directory, 0o755)  # servers may run as another user
        return directory

    def put_files(self, directory: str, files: dict[str, bytes]) -> None:
        """Write ``files`` (path relative to ``directory`` -> content) on the host."""
        self.prepare()
        self._call(self._put_files(directory, files), 120)

    async def _put_files(self, directory: str, files: dict[str, bytes]) -> None:
        assert self._conn is not None
        async with self._conn.start_sftp_client() as sftp:
            for rel, data in files.items():
                path = f"{directory}/{rel}"
                await sftp.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
                async with sftp.open(path, "wb") as fh:
                    await fh.write(data)

    def remove_scratch(self, directory: str) -> None:
        """Remove a directory ``make_scratch`` made (and what servers wrote in it)."""
        argv = ["rm", "-rf", "--", directory]
        with contextlib.suppress(Exception):
            self.prepare()  # reconnects if the run lost the connection
            assert self._conn is not None
            self._call(self._conn.run(shlex.join(argv), check=False), 60)

    # -- running ------------------------------------------------------------------------------
    def run_agent(self, args: list[str], timeout: float) -> Iterator[str]:
        self.prepare()
        assert self.remote_agent is not None
        assert self._loop is not None  # prepare() connected, on this loop
        command = shlex.join([self.remote_agent, *(str(a) for a in args)])
        lines: queue.Queue[object] = queue.Queue()
        done = threading.Event()
        task = asyncio.run_coroutine_threadsafe(self._stream(command, lines, done), self._loop)
        deadline = time.monotonic() + timeout
        try:
            yield from lines_until_eof(
                lines,
                deadline,
                f"{self.name}: agent did not finish within {timeout:g} s and was stopped",
            )
        finally:
            if not done.is_set():
                # Closing the channel hangs up the remote agent (SIGPIPE on its next write).
                task.cancel()

    async def _stream(
        self, command: str, lines: queue.Queue[object], done: threading.Event
    ) -> None:
        proc = None
        err_task: asyncio.Future[str] | None = None
        try:
            assert self._conn is not None
            proc = await self._conn.create_process(command, encoding="utf-8", errors="replace")
            # stderr is drained alongside stdout so a chatty agent cannot stall on it.
            err_task = asyncio.ensure_future(proc.stderr.read())
            async for line in proc.stdout:
                if line:  # asyncssh ends the iteration with an empty string at EOF
                    lines.put(line.rstrip("\n"))
            await proc.wait(check=False)
            self.last_stderr = (await err_task)[-2048:]
            if proc.exit_status is None and proc.exit_signal is None:
                raise asyncssh.ConnectionLost("the channel closed without an exit status")
            lines.put(EOF_MARK)
        except asyncio.CancelledError:
            if proc is not None:
                with contextlib.suppress(Exception):
                    proc.kill()
                proc.close()
            raise
        except (OSError, asyncssh.Error) as exc:
            self._conn = None  # the connection is gone; the next run reconnects
            reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
            lines.put(TargetError(f"{self.name}: connection lost: {reason}"))
        finally:
            if err_task is not None and not err_task.done():
                err_task.cancel()
            elif err_task is not None and not err_task.cancelled():
                err_task.exception()  # retrieved, so asyncio does not warn about it
            done.set()

    # -- description --------------------------------------------------------------------------
    def labels(self) -> dict[str, str]:
        # Each host is its own configuration, so the label must tell hosts apart.
        host = self.host if self.port == 22 else f"{self.host}:{self.port}"
        return {"host": host, **self._labels}

    def provenance(self) -> dict[str, Any]:
        return {
            "kind": "ssh",
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "host_key": self.host_key_fingerprint,
            "remote_agent": self.remote_agent,
            "agent_sha256": self.agent_sha256,
            "agent_copied": self.agent_copied,
        }

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and self._loop is not None:
            conn.close()
            with contextlib.suppress(Exception):
                self._call(conn.wait_closed(), 5)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join(5)
            with contextlib.suppress(RuntimeError):
                self._loop.close()
            self._loop = None
            self._thread = None
