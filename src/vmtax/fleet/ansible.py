"""Two Ansible plays over an inventory, through ansible-runner, with its event stream.

``place``: copy the agent to each host (once per version, checked by its checksum) and ask
it for the host's fingerprint. ``measure``: run each host's part of the plan, one agent
invocation per loop item, under coreutils ``timeout``; every item's stdout is that run's
stream, handed to the caller as the item ends. Ansible does the rest: forks, ``become``,
connection options, unreachable hosts.

Each invocation is an argument list (``command``'s ``argv``), never a shell string, with no
variable or ``~`` expansion of the plan's arguments.
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vmtax.errors import VmtaxError
from vmtax.fleet.keys import PrivateAgent
from vmtax.targets.fleet import ansible_env

#: Where the agent is kept on a host unless it sets vmtax_remote_dir.
REMOTE_DIR = "~/.cache/vmtax/agents"
#: The largest loop item result ansible-runner passes on whole (a run's stream and its JSON);
#: a task's result, every item of a host at once, may be larger and is then left empty.
MAX_EVENT_RES = 64 << 20
#: Seconds between keep-alives on a host's SSH connection, and how many may go unanswered.
ALIVE_S, ALIVE_MAX = 5, 3

_PLACE = [
    {
        "name": "vmtax place",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {
                "name": "agent directory",
                "ansible.builtin.file": {
                    "path": "{{ vmtax_remote_dir | default('" + REMOTE_DIR + "') }}/"
                    "{{ vmtax_sha256 }}",
                    "state": "directory",
                    "mode": "0755",
                },
                "register": "vmtax_dir",
            },
            {
                "name": "agent",
                "ansible.builtin.copy": {
                    "src": "{{ vmtax_local_agent }}",
                    "dest": "{{ vmtax_dir.path }}/vmtax-probe",
                    "mode": "0755",
                },
            },
            {
                "name": "fingerprint",
                "ansible.builtin.command": {
                    "argv": ["{{ vmtax_dir.path }}/vmtax-probe", "env", "--format", "json"],
                    "expand_argument_vars": False,
                },
                "timeout": 180,
            },
        ],
    }
]

_MEASURE = [
    {
        "name": "vmtax measure",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {
                "name": "runs",
                "ansible.builtin.command": {
                    "argv": "{{ item.argv }}",
                    "expand_argument_vars": False,
                },
                "loop": "{{ vmtax_parts[inventory_hostname] }}",
                "loop_control": {"label": "{{ item.index }}"},
                # A run that failed is stored as such; the host goes on with the next one.
                "failed_when": False,
            }
        ],
    }
]


@dataclass
class Event:
    """One host's task or loop item ending: ok, failed or unreachable, and its result."""

    kind: str  # "item" (a loop item) or "task"
    host: str
    task: str
    status: str  # ok, failed, unreachable, skipped
    res: dict[str, Any]


class Ansible:
    """ansible-runner over one inventory, in a private directory removed at the end."""

    def __init__(
        self, inventory: str, limit: str | None, forks: int, *, accept_new_host_key: bool
    ) -> None:
        self.inventory = inventory
        self.limit = limit
        self.forks = forks
        self.accept_new_host_key = accept_new_host_key
        self._dir = Path(tempfile.mkdtemp(prefix="vmtax-ansible-"))
        self.keys = PrivateAgent(self._dir)
        self._stop = False
        #: The end of ansible-playbook's own output in the last play, for messages.
        self.last_output = ""

    def close(self) -> None:
        self.keys.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def cancel(self) -> None:
        self._stop = True

    def envvars(self) -> dict[str, str]:
        strict = "accept-new" if self.accept_new_host_key else "yes"
        ssh_args = [
            "-o",
            "ControlMaster=auto",
            "-o",
            "ControlPersist=120s",
            "-o",
            f"StrictHostKeyChecking={strict}",
            "-o",
            f"ServerAliveInterval={ALIVE_S}",
            "-o",
            f"ServerAliveCountMax={ALIVE_MAX}",
        ]
        env = {k: v for k, v in ansible_env().items() if k.startswith("ANSIBLE_")}
        env.update(
            {
                "ANSIBLE_HOST_KEY_CHECKING": "True",
                "ANSIBLE_SSH_ARGS": shlex.join(ssh_args),
                "ANSIBLE_PIPELINING": "True",  # one SSH round trip per module, not three
                "ANSIBLE_PYTHON_INTERPRETER": "auto_silent",
                "ANSIBLE_SSH_CONTROL_PATH_DIR": str(self._dir / "cp"),
                # ansible-runner empties an event's result above this many characters
                # (700,000 by default, a 1.5 s run of cpuid): one run's stream must fit.
                "MAX_EVENT_RES": str(MAX_EVENT_RES),
            }
        )
        if self.keys.running:
            env["SSH_AUTH_SOCK"] = str(self.keys.sock)
        return env

    def play(
        self,
        name: str,
        extravars: dict[str, Any],
        on_event: Callable[[Event], None],
        limit: list[str],
    ) -> str:
        """Run play ``name`` (place or measure) and call ``on_event`` as each host's task or
        item ends; returns ansible-runner's status (successful, failed or canceled)."""
        import ansible_runner  # type: ignore[import-untyped]  # noqa: PLC0415 - loaded only when an inventory is run

        book = self._dir / f"{name}.yml"
        book.write_text(yaml.safe_dump(_PLACE if name == "place" else _MEASURE, sort_keys=False))
        private = self._dir / name
        private.mkdir(exist_ok=True)

        def handler(ev: dict[str, Any]) -> bool:
            found = _event(ev)
            if found is not None:
                on_event(found)
            return False  # ansible-runner need not keep the event on disk for us

        # The plan's arguments are data, never templates: tagged !unsafe, Ansible does not
        # render a '{{' in them.
        varfile = self._dir / f"{name}-vars.yml"
        varfile.write_text(yaml.dump(_unsafe(extravars), Dumper=_Dumper, sort_keys=False))
        # The hosts by name, one a line (Ansible's --limit @file): they are already within the
        # user's --limit, and a file has no pattern syntax to trip over.
        hosts = self._dir / f"{name}-hosts"
        hosts.write_text("".join(f"{h}\n" for h in limit))
        result = ansible_runner.run(
            private_data_dir=str(private),
            playbook=str(book),
            inventory=self.inventory,
            limit=f"@{hosts}",
            forks=self.forks,
            cmdline=shlex.join(["--extra-vars", f"@{varfile}"]),
            envvars=self.envvars(),
            event_handler=handler,
            cancel_callback=lambda: self._stop,
            quiet=True,
            suppress_env_files=True,
        )
        # Ansible reports a failed or unreachable host in the events (and rc 2 or 4); any
        # other end means ansible-playbook itself could not run the play.
        said = ""
        with contextlib.suppress(Exception):  # the output is only for a message
            said = " ".join((result.stdout.read() if result.stdout else "").split())
        self.last_output = said[-400:]
        shutil.rmtree(private, ignore_errors=True)
        if result.status not in ("successful", "failed", "canceled"):
            raise VmtaxError(f"Ansible's {name} play ended {result.status}: {self.last_output}")
        return str(result.status)


class _Unsafe(str):
    __slots__ = ()


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Unsafe, lambda d, v: d.represent_scalar("!unsafe", str(v)))


def _unsafe(value: Any) -> Any:
    if isinstance(value, str):
        return _Unsafe(value)
    if isinstance(value, dict):
        return {str(k): _unsafe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_unsafe(v) for v in value]
    return value


_KINDS = {
    "runner_item_on_ok": ("item", "ok"),
    "runner_item_on_failed": ("item", "failed"),
    "runner_item_on_unreachable": ("item", "unreachable"),
    "runner_on_ok": ("task", "ok"),
    "runner_on_failed": ("task", "failed"),
    "runner_on_unreachable": ("task", "unreachable"),
    "runner_on_skipped": ("task", "skipped"),
}


def _event(ev: dict[str, Any]) -> Event | None:
    kind = _KINDS.get(str(ev.get("event")))
    if kind is None:
        return None
    data = ev.get("event_data") or {}
    res = data.get("res") or {}
    status = kind[1]
    if res.get("unreachable"):
        status = "unreachable"
    return Event(kind[0], str(data.get("host")), str(data.get("task")), status, res)
