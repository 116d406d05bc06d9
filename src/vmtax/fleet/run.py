"""A plan's missing steps on the hosts of an inventory, through Ansible.

The same contract as :class:`vmtax.runner.Runner` (``execute(experiment_id, done)`` ->
Outcome), with Ansible as the engine: the ``place`` play copies the agent and fingerprints
every host at once; each host that answered gets its configuration, then the ``measure``
play runs every host's part of the plan, ``forks`` hosts at a time. Each run is stored as
its loop item ends (runner's event stream), so what a host finished is kept whatever happens
to it or to the others later; a run whose agent was killed or whose connection broke is
stored ``lost``, one the agent refused ``failed``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from vmtax.contract import Fingerprint, read_stream
from vmtax.errors import UsageError, VmtaxError
from vmtax.execution import NoProgress, Progress, Storing
from vmtax.fleet.ansible import MAX_EVENT_RES, Ansible, Event
from vmtax.plan.plan import Plan, Step
from vmtax.runner import (
    MAX_CONSECUTIVE_LOST,
    Outcome,
    TargetOutcome,
    configuration_labels,
    final_line,
    has_problems,
    one_line,
)
from vmtax.store.runtimes import RunTimes
from vmtax.targets.agent import file_sha256
from vmtax.targets.base import InventoryEntry, Target, find_agent
from vmtax.targets.fleet import ansible_reason, release_inventory
from vmtax.workloads import is_workload

if TYPE_CHECKING:
    from vmtax.store import Store

_EMPTY = np.empty(0, dtype=np.float64)
#: Seconds coreutils' timeout waits after its TERM before it KILLs an agent.
KILL_AFTER_S = 5
#: What ssh says when a host's key differs from the one known for it.
_CHANGED = re.compile(r"REMOTE HOST IDENTIFICATION HAS CHANGED|Host key for .* has changed")
_UNKNOWN = re.compile(r"Host key verification failed|No .* host key is known")


def is_inventory(targets: Iterable[Any]) -> bool:
    """Whether these targets are the hosts of an inventory (run by :class:`AnsibleRunner`)."""
    listed = list(targets)
    return bool(listed) and all(t.capabilities().ansible is not None for t in listed)


class AnsibleRunner:
    """Runs a stored plan's missing steps on an inventory's hosts through ansible-runner."""

    def __init__(
        self,
        store: Store,
        plan: Plan,
        targets: list[Target],
        *,
        level: str | None = None,
        labels: dict[str, str] | None = None,
        progress: Progress | None = None,
        max_workers: int = 4,
        fingerprints: dict[int, Fingerprint] | None = None,
        observers: Iterable[Any] = (),
        step_source: Any = None,
        accept_new_host_key: bool = False,
    ) -> None:
        del fingerprints  # a host's fingerprint comes from Ansible's place play
        if step_source is not None:
            raise UsageError(
                "adaptive sampling (--precision, --budget) does not run on an inventory; "
                "give --runs N"
            )
        if list(observers):
            raise UsageError("--exits does not run on an inventory")
        #: Each host's inventory entry, in the hosts' order.
        self.entries: list[InventoryEntry] = [
            e for e in (t.capabilities().ansible for t in targets) if e is not None
        ]
        if len(targets) != len(plan.targets) or not targets or len(self.entries) != len(targets):
            raise VmtaxError("an inventory's plan must name its hosts only")
        self.store = store
        self.plan = plan
        self.hosts = list(targets)
        self.level = level
        self.labels = dict(labels or {})
        self.progress: Progress = progress or NoProgress()
        inv = self.entries[0].inventory
        self.ansible = Ansible(
            inv.source, inv.limit, max(1, max_workers), accept_new_host_key=accept_new_host_key
        )

    # -- the whole inventory ----------------------------------------------------------------
    def execute(self, experiment_id: int, done: set[int] | None = None) -> Outcome:
        try:
            return self._execute(experiment_id, done)
        finally:
            release_inventory(self.entries[0].inventory.source)

    def _execute(self, experiment_id: int, done: set[int] | None) -> Outcome:
        done = set(done or ())
        self._outcomes = {
            h.name: TargetOutcome(name=h.name, level=self.level or h.level) for h in self.hosts
        }
        self._slot = {h.name: slot for slot, h in enumerate(self.hosts)}
        self._todo: dict[str, list[Step]] = {}
        for slot, host in enumerate(self.hosts):
            steps = self.plan.steps_for(slot)
            todo = [s for s in steps if s.index not in done]
            for s in todo:
                if is_workload(self.plan.entries[s.entry]["probe"]):
                    raise UsageError(
                        f"{s.entry}: workloads run from this machine against one host "
                        "(--target ssh://...), not on an inventory (docs/fleet.md)"
                    )
            self._outcomes[host.name].skipped = len(steps) - len(todo)
            if todo:
                self._todo[host.name] = todo
        self._finished: set[str] = set()
        self._failed: set[str] = set()
        self.progress.add_target("hosts", len(self._todo))
        for name, todo in self._todo.items():
            self.progress.add_target(name, len(todo))
        # Stored as the other executions store (execution.Storing): runs committed as they end,
        # the status once, after Ansible is stopped, however this ends.
        self._storing = storing = Storing(self.store, experiment_id)
        with storing.settling(self.ansible.close):
            try:
                if self._todo:
                    self._run()
            except BaseException:
                self.ansible.cancel()
                raise
            if any(has_problems(o) for o in self._outcomes.values()):
                storing.status = "failed"
        return Outcome(experiment_id, storing.status, [self._outcomes[h.name] for h in self.hosts])

    def _run(self) -> None:
        agent = find_agent()
        sha = file_sha256(agent)
        self._fp: dict[str, Fingerprint] = {}
        self._agent_path: dict[str, str] = {}
        self._copied: dict[str, bool] = {}
        names = []
        for name in self._todo:
            hv = self.entries[self._slot[name]].hostvars
            key, var = hv.get("ansible_ssh_private_key_file"), hv.get("vmtax_passphrase_env")
            locked = self.ansible.keys.add(str(key), str(var)) if key and var else None
            if locked:
                self._outcomes[name].error = locked
            else:
                names.append(name)
        if names:
            self.ansible.play(
                "place",
                {"vmtax_local_agent": str(agent), "vmtax_sha256": sha},
                self._placed,
                limit=names,
            )
        ready = []
        for name in self._todo:
            out = self._outcomes[name]
            if name in self._fp and not out.error:
                self._configure(name, sha)
                ready.append(name)
            elif not out.error:
                out.error = "Ansible gave no fingerprint for this host"
            if out.error:
                self._host_done(name)
        if not ready:
            return
        parts = {name: [self._item(name, s) for s in self._todo[name]] for name in ready}
        self._pending = {name: list(self._todo[name]) for name in ready}
        self._lost_in_a_row = dict.fromkeys(ready, 0)
        self.ansible.play("measure", {"vmtax_parts": parts}, self._measured, limit=ready)
        for name in ready:
            out = self._outcomes[name]
            if self._pending[name] and not out.error:
                said = self.ansible.last_output[-300:].replace(";", ",") or "no output"
                out.error = f"{len(self._pending[name])} runs were never started (Ansible: {said})"
            self._host_done(name)

    # -- place: the agent and the fingerprint -----------------------------------------------
    def _placed(self, ev: Event) -> None:
        if ev.host not in self._outcomes or ev.kind != "task":
            return
        out = self._outcomes[ev.host]
        if ev.status in ("failed", "unreachable"):
            out.error = out.error or _why(ev, self._address(ev.host))
            return
        if ev.task == "agent directory":
            self._agent_path[ev.host] = f"{ev.res.get('path')}/vmtax-probe"
        elif ev.task == "agent":
            self._copied[ev.host] = bool(ev.res.get("changed"))
        elif ev.task == "fingerprint":
            try:
                self._fp[ev.host] = Fingerprint.model_validate_json(str(ev.res.get("stdout")))
            except ValueError:
                out.error = "bad fingerprint from the agent"

    def _address(self, name: str) -> str:
        """The host as known_hosts names it: its address, and its port unless 22."""
        hv = self.entries[self._slot[name]].hostvars
        host, port = str(hv.get("ansible_host", name)), str(hv.get("ansible_port", 22))
        return host if port == "22" else f"[{host}]:{port}"

    def _configure(self, name: str, sha: str) -> None:
        host = self.hosts[self._slot[name]]
        fp = self._fp[name]
        level = self.level or host.level
        labels = configuration_labels(host, fp, level, self.labels)
        provenance = dict(host.provenance())
        provenance.update(
            {
                "remote_agent": self._agent_path.get(name),
                "agent_sha256": sha,
                "agent_copied": self._copied.get(name, False),
            }
        )
        self._config = getattr(self, "_config", {})
        self._config[name] = self._storing.call(
            self.store.configuration,
            experiment_id=self._storing.experiment_id,
            level=level,
            labels=labels,
            fingerprint=fp.model_dump(mode="json", by_alias=True),
            target=name,
            provenance=provenance,
        )
        self._outcomes[name].config = " ".join(
            [level, *(f"{k}={v}" for k, v in sorted(labels.items()))]
        )

    # -- measure: one stored run per loop item ----------------------------------------------
    def _item(self, name: str, step: Step) -> dict[str, Any]:
        fp = self._fp[name]
        inv = self.plan.invocation(step, fp.memory_bytes, tsc_hz=fp.cpu.tsc_hz)
        argv = [
            "timeout",
            "-k",
            str(KILL_AFTER_S),
            f"{inv.timeout:g}",
            self._agent_path[name],
            *(str(a) for a in inv.args),
        ]
        return {"index": step.index, "argv": argv, "timeout": inv.timeout}

    def _measured(self, ev: Event) -> None:
        if ev.host not in self._pending:
            return
        out = self._outcomes[ev.host]
        if ev.kind == "task":
            if ev.status in ("unreachable", "failed") and self._pending[ev.host]:
                out.error = out.error or _why(ev, self._address(ev.host))
            return
        item = ev.res.get("item") or {}
        step = next((s for s in self._pending[ev.host] if s.index == item.get("index")), None)
        if step is None and not ev.res and self._pending[ev.host]:
            # ansible-runner left the result out (larger than MAX_EVENT_RES): a host's items
            # run in order, so this is its next pending run, whose stream is lost.
            step = self._pending[ev.host][0]
            ev.res = {"oversize": f"the run's stream is over {MAX_EVENT_RES >> 20} MiB, "
                      "which Ansible's events do not carry"}  # fmt: skip
            ev.status = "unreachable"
        if step is None:
            return
        self._pending[ev.host].remove(step)
        status = self._store_run(ev, step, float(item.get("timeout") or 0))
        lost = self._lost_in_a_row[ev.host] = (
            self._lost_in_a_row[ev.host] + 1 if status == "lost" else 0
        )
        bad = out.failed + out.lost
        self.progress.advance(
            ev.host,
            f"{ev.host}: {step.entry} run {step.run}" + (f" ({bad} failed or lost)" if bad else ""),
        )
        if lost >= MAX_CONSECUTIVE_LOST and not out.error:
            out.error = (
                f"{lost} runs in a row were lost; giving up on this target "
                f"(last: {out.first_problem})"
            )

    def _store_run(self, ev: Event, step: Step, timeout: float) -> str:
        out = self._outcomes[ev.host]
        entry = self.plan.entries[step.entry]
        stream = read_stream(str(ev.res.get("stdout") or "").splitlines())
        header = stream.header.model_dump(mode="json", by_alias=True) if stream.header else None
        times = _times(ev.res.get("delta"))
        common = {
            "configuration_id": self._config[ev.host],
            "probe": step.entry,
            "plan_index": step.index,
            "run_index": step.run,
            "header": header,
            "times": times,
        }
        if stream.runs and ev.status == "ok" and ev.res.get("rc") == 0:
            run = stream.runs[0]
            self._storing.add_run(
                **common,
                summary=run.summary.model_dump(mode="json"),
                values=run.values,
                warmup_values=run.warmup_values,
                status="ok",
            )
            out.ok += 1
            return "ok"
        rc = ev.res.get("rc")
        transport = None
        if ev.res.get("oversize"):
            transport = str(ev.res["oversize"])
        elif ev.status == "unreachable":
            transport = f"connection lost: {one_line(ev.res.get('msg') or '')[:200]}"
        elif rc == 124:
            transport = f"agent did not finish within {timeout:g} s and was stopped"
        elif isinstance(rc, int) and (rc < 0 or rc in (137, 143)):
            transport = f"agent killed (signal {-rc if rc < 0 else rc - 128})"
        if transport or (stream.header is not None and stream.end is None):
            status = "lost"
            reason = transport or stream.problem or "stream broke off"
        else:
            status = "failed"
            err = str(ev.res.get("stderr") or "").strip()
            reason = (stream.end.error if stream.end and stream.end.error else None) or (
                ansible_reason(err) if err else stream.problem or "the agent produced no run"
            )
        reason = one_line(f"{entry['probe']}: {reason}")
        self._storing.add_run(
            **common, summary=None, values=_EMPTY, warmup_values=_EMPTY, status=status, error=reason
        )
        if status == "lost":
            out.lost += 1
        else:
            out.failed += 1
        out.first_problem = out.first_problem or reason
        return status

    def _host_done(self, name: str) -> None:
        if name in self._finished:
            return
        self._finished.add(name)
        out = self._outcomes[name]
        failed = has_problems(out)
        if failed:
            self._failed.add(name)
        self.progress.finish(name, final_line(out), failed=failed)
        running = len(self._todo) - len(self._finished)
        self.progress.advance(
            "hosts",
            f"hosts: {len(self._finished) - len(self._failed)} done, "
            f"{running} running, {len(self._failed)} failed",
        )


def _times(delta: Any) -> RunTimes:
    """The run's end is when its item's event arrived here; its start that less the time
    the host's command took (Ansible's ``delta``): this machine's clocks, as for any run."""
    now = RunTimes().end()
    took = 0.0
    if isinstance(delta, str) and re.fullmatch(r"\d+:\d\d:\d\d(\.\d+)?", delta):
        h, m, sec = delta.split(":")
        took = int(h) * 3600 + int(m) * 60 + float(sec)
    ns = int(took * 1e9)
    return RunTimes(
        started_ns=now.ended_ns - ns if now.ended_ns else ns,
        started_at=(now.ended_at or now.started_at) - timedelta(seconds=took),
        ended_ns=now.ended_ns,
        ended_at=now.ended_at,
    )


def _why(ev: Event, addr: str) -> str:
    """One line for a host Ansible could not reach or whose task failed."""
    # The summary line joins hosts with '; ', so a host's own part has none.
    raw = str(ev.res.get("msg") or ev.res.get("stderr") or ev.status)
    if "[WARNING]" in raw or "[ERROR]" in raw:  # Ansible's warnings are not the reason
        raw = ansible_reason(raw) or str(ev.status)
    msg = one_line(raw).replace(";", ",")
    if _CHANGED.search(msg):
        return (
            f"host key changed, refused: if the host was reinstalled, remove its old key "
            f"with ssh-keygen -R '{addr}' once you have checked the new one"
        )
    if _UNKNOWN.search(msg):
        return "host key unknown, refused: pass --accept-new-host-key to trust it"
    if ev.status == "unreachable":
        return f"unreachable: {msg[:300]}"
    return f"{ev.task}: {msg[:300]}"


__all__ = ["AnsibleRunner", "is_inventory"]
