"""Where an L1 guest's boot spends its seconds, the command line vmtax boots with (``new``)
against the one it booted with before (``old``), in alternating rounds.

Each round boots the minimal image once per variant (the order alternates between rounds),
through vmtax's own ``QemuGuest``, and times every phase from the guest's and QEMU's own
clocks:

- **QEMU start**: from starting QEMU (under the agent's watchdog) to the ``cont`` that lets
  the paused guest run: QMP up, vCPUs pinned, agent sockets connected.
- **firmware**: SeaBIOS (``old``) or qboot and the option ROM that loads the kernel, until
  the firmware's last line on QEMU's debug console (port 0x402); qboot prints none, so there
  it is folded into the next phase.
- **kernel load**: loading, decompressing and entering the kernel, until its clock starts
  (the host time of the first ``vmtax-boot`` line less the uptime it prints).
- **kernel init**: the kernel's own boot, from its clock's start to ``/init`` (``/proc/uptime``
  as /init reads it first).
- **modules**, **scratch disk**, **network**: /init's steps (``vmtax_boottrace=1`` makes it
  print the uptime after each: shell built-ins, no process is started).
- **agent start**: from /init's last step to the agent's ``serve_ready`` on this side.
- **first answer**: the first request every run makes, ``env --format json`` (the
  fingerprint).
- **power-off**: the clean power-off vmtax asks for before the next boot.

``total`` is QEMU start to the first answer; ``qemu cpu`` the CPU seconds QEMU used by then
(user + system), which swings less than wall time on a shared machine. Every figure is
min/median/max over the rounds.

Measured on a 2-core machine shared with other jobs (load average 12 to 17), L1 at its
default size there (2 vCPUs, 3584 MiB), a 256 MiB scratch disk, ``--rounds 5``; min / median /
max (every phase: docs/levels.md, "What a boot costs"):

    phase (s)                   old                     new
    kernel load + init, CPU     9.31 / 9.80 / 11.16     3.68 / 3.83 / 3.97
    /init modules, CPU          1.25 / 1.52 / 2.17      1.52 / 2.09 / 2.17
    total, wall                 36.3 / 38.5 / 50.7      14.5 / 18.8 / 23.1
    total, QEMU CPU             11.17 / 12.33 / 14.02   5.86 / 6.54 / 6.64

Example:
    python bench/boot_cost.py --rounds 5
    python bench/boot_cost.py --rounds 3 --only new --net user
    python bench/boot_cost.py --rounds 1 --only old --append 'loglevel=8 initcall_debug' \
        --keep-console console.txt
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from vmtax.targets import qemu as qemu_module
from vmtax.targets.base import find_agent
from vmtax.targets.images import Image, build_minimal
from vmtax.targets.levels import size_levels
from vmtax.targets.qemu import GuestSpec, QemuGuest

PHASES = (
    "qemu start",
    "firmware",
    "kernel load",
    "kernel init",
    "modules",
    "scratch disk",
    "network",
    "agent start",
    "first answer",
    "total",
    "power-off",
    "cpu: firmware",
    "cpu: kernel",
    "cpu: modules",
    "cpu: scratch disk",
    "cpu: network",
    "cpu: agent start",
    "cpu: first answer",
    "qemu cpu",
    "qemu rss MiB",
)


def old_argv(
    image: Image,
    spec: GuestSpec,
    workdir: Path,
    *,
    agent_args: list[str] | None = None,
    paused: bool = True,
    forwards: dict[int, int] | None = None,
) -> list[str]:
    """The command line vmtax booted L1 with before its boot was trimmed: q35 with its
    default devices, SeaBIOS, the compressed kernel, ``console=ttyS0 quiet panic=-1``."""
    append = ["console=ttyS0", "quiet", "panic=-1", *spec.extra_append]
    if agent_args:
        append += ["--", *agent_args]
    argv = [
        qemu_module.qemu_binary(),
        "-name", "vmtax-guest,debug-threads=on",
        "-nodefaults", "-no-user-config",
        "-machine", "q35",
        "-accel", "tcg,thread=multi" if spec.accel == "tcg" else spec.accel,
        "-cpu", spec.cpu or ("host" if spec.accel == "kvm" else "max"),
        "-smp", str(spec.vcpus),
        "-m", f"{spec.memory_mb}M",
        "-display", "none", "-no-reboot",
        "-serial", f"file:{workdir / 'console.log'}",
        "-kernel", str(image.directory / "vmlinuz"),
        "-initrd", str(image.initrd),
        "-append", " ".join(append),
        "-qmp", f"unix:{workdir / 'qmp.sock'},server=on,wait=off",
    ]  # fmt: skip
    if agent_args is None:
        argv += [
            "-device", "virtio-serial-pci,id=vser0",
            "-chardev", f"socket,id=vmtax,path={workdir / 'vmtax.sock'},server=on,wait=off",
            "-device", "virtserialport,bus=vser0.0,chardev=vmtax,name=vmtax",
        ]  # fmt: skip
    if spec.scratch_mb:
        argv += [
            "-drive", f"file={workdir / 'scratch.img'},format=raw,if=none,id=scratch",
            "-device", "virtio-blk-pci,drive=scratch",
        ]  # fmt: skip
    if spec.network == "user":
        fwd = "".join(
            f",hostfwd=tcp:127.0.0.1:{host}-:{guest}" for guest, host in (forwards or {}).items()
        )
        argv += ["-netdev", f"user,id=net0{fwd}", "-device", "virtio-net-pci,netdev=net0"]
    argv += list(spec.extra_args)
    if paused:
        argv.append("-S")
    return argv


class Tail(threading.Thread):
    """Notes the host's monotonic time at which each line of a growing file first appears."""

    def __init__(self, path: Callable[[], Path | None], pid: Callable[[], int | None]) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.pid = pid
        #: (host monotonic time, QEMU's CPU seconds by then, the line)
        self.lines: list[tuple[float, float, str]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        buf, pos = b"", 0
        while not self.stopped.is_set():
            path = self.path()
            data = b""
            if path is not None:
                with contextlib.suppress(OSError), path.open("rb") as fh:
                    fh.seek(pos)
                    data = fh.read()
            now = time.monotonic()
            if data:
                cpu = cpu_seconds(self.pid())
                pos += len(data)
                buf += data
                *done, buf = buf.split(b"\n")
                self.lines += [(now, cpu, ln.decode("utf-8", "replace").strip()) for ln in done]
            time.sleep(0.002)

    def stop(self) -> None:
        self.stopped.set()
        self.join()


def cpu_seconds(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    with contextlib.suppress(OSError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return float("nan")


def rss_mib(pid: int | None) -> float:
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


@contextlib.contextmanager
def command_line(old: bool) -> Iterator[None]:
    if not old:
        yield
        return
    saved = qemu_module.qemu_argv
    qemu_module.qemu_argv = old_argv  # type: ignore[assignment]
    try:
        yield
    finally:
        qemu_module.qemu_argv = saved


def one_boot(
    image: Image, spec: GuestSpec, old: bool, timeout: float, keep: Path | None = None
) -> dict[str, float]:
    fwdir = Path(tempfile.mkdtemp(prefix="vmtax-bootcost-"))
    fwlog = fwdir / "firmware.log"
    spec = GuestSpec(
        **{
            **spec.__dict__,
            "extra_append": (*spec.extra_append, "vmtax_boottrace=1"),
            "extra_args": (
                *spec.extra_args,
                "-chardev",
                f"file,id=fwlog,path={fwlog}",
                "-device",
                "isa-debugcon,iobase=0x402,chardev=fwlog",
            ),  # fmt: skip
        }
    )
    guest = QemuGuest(image, spec)
    console = Tail(lambda: guest.workdir / "console.log" if guest.workdir else None,
                   lambda: guest.qemu_pid)  # fmt: skip
    firmware = Tail(lambda: fwlog, lambda: guest.qemu_pid)
    console.start()
    firmware.start()
    out: dict[str, float] = {}
    try:
        t0 = time.monotonic()
        with command_line(old):
            guest.start()
        t_cont = time.monotonic()
        c_cont = cpu_seconds(guest.qemu_pid)
        assert guest.channel is not None
        if not guest.channel.wait_ready(t0 + timeout):
            raise SystemExit(f"boot_cost: no serve_ready in {timeout} s: {guest.console_tail()}")
        t_ready = time.monotonic()
        c_ready = cpu_seconds(guest.qemu_pid)
        text = "".join(
            str(x) for x in guest.channel.request(["env", "--format", "json"], t_ready + 60)
        )
        t_answer = time.monotonic()
        if "hypervisor" not in text:
            raise SystemExit(f"boot_cost: env did not answer: {text[:200]!r}")
        cpu = cpu_seconds(guest.qemu_pid)
        rss = rss_mib(guest.qemu_pid)
        guest.send(["poweroff"])
        with contextlib.suppress(Exception):
            assert guest.proc is not None
            guest.proc.wait(timeout=10)
        t_off = time.monotonic()
    finally:
        if keep is not None:
            keep.write_text(guest.console_text())
        guest.stop()
        console.stop()
        firmware.stop()
        with contextlib.suppress(OSError):
            fwlog.unlink()
            fwdir.rmdir()
    stamps: dict[str, tuple[float, float, float]] = {}
    for at, cpu_at, line in console.lines:
        words = line.split()
        if len(words) == 3 and words[0] == "vmtax-boot:":
            stamps[words[2]] = (at, cpu_at, float(words[1]))
    if "init" not in stamps:
        raise SystemExit(f"boot_cost: /init printed no stamps; console: {console.lines[-3:]}")
    at_init, cpu_init, up_init = stamps["init"]
    kernel_zero = at_init - up_init  # the host's time when the kernel's clock read 0
    seabios = any("SeaBIOS" in line for _, _, line in firmware.lines)
    fw_end, fw_cpu = (firmware.lines[-1][0], firmware.lines[-1][1]) if seabios else (t_cont, c_cont)
    out["qemu start"] = t_cont - t0
    out["firmware"] = fw_end - t_cont
    out["kernel load"] = kernel_zero - fw_end
    out["kernel init"] = up_init
    # CPU seconds of QEMU: sampled as each line arrived (the kernel's start has no line).
    out["cpu: firmware"] = fw_cpu - c_cont
    out["cpu: kernel"] = cpu_init - fw_cpu
    prev, prev_at, prev_cpu = up_init, at_init, cpu_init
    for step, name in (("modules", "modules"), ("scratch", "scratch disk"), ("network", "network")):
        if step in stamps:
            out[name] = stamps[step][2] - prev
            out[f"cpu: {name}"] = stamps[step][1] - prev_cpu
            prev_at, prev_cpu, prev = stamps[step]
    out["agent start"] = t_ready - (kernel_zero + prev)
    out["cpu: agent start"] = c_ready - prev_cpu
    out["first answer"] = t_answer - t_ready
    out["cpu: first answer"] = cpu - c_ready
    out["total"] = t_answer - t0
    out["qemu cpu"] = cpu
    out["qemu rss MiB"] = rss
    out["power-off"] = t_off - t_answer
    return out


def table(results: dict[str, list[dict[str, float]]]) -> str:
    names = list(results)
    rows = [f"{'phase (s)':<14}" + "".join(f"{n + ' min/med/max':>26}" for n in names)]
    for phase in PHASES:
        cells = []
        for n in names:
            vals = [r[phase] for r in results[n] if phase in r and r[phase] == r[phase]]
            if not vals:
                cells.append(f"{'-':>26}")
                continue
            lo, mid, hi = min(vals), statistics.median(vals), max(vals)
            cells.append(f"{f'{lo:.2f} / {mid:.2f} / {hi:.2f}':>26}")
        rows.append(f"{phase:<14}" + "".join(cells))
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", choices=("old", "new"), help="boot one variant only")
    ap.add_argument("--vcpus", type=int, help="default: L1's under --preset seed-c")
    ap.add_argument("--memory", type=int, help="MiB; default: L1's under --preset seed-c")
    ap.add_argument("--scratch", type=int, default=256, help="MiB (0: no scratch disk)")
    ap.add_argument("--net", choices=("", "user"), default="")
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument(
        "--append",
        default="",
        help="more kernel arguments (diagnosis: "
        "'loglevel=8 initcall_debug' shows each initcall's time)",
    )
    ap.add_argument("--keep-console", type=Path, help="write the last boot's console here")
    args = ap.parse_args()
    image = build_minimal(find_agent())
    l1 = size_levels(["L1"], "seed-c")["L1"]  # the size `vmtax run --levels L1` boots
    args.vcpus, args.memory = args.vcpus or l1.vcpus, args.memory or l1.memory_mb
    spec = GuestSpec(vcpus=args.vcpus, memory_mb=args.memory, accel="tcg",
                     scratch_mb=args.scratch, network=args.net,
                     extra_append=tuple(args.append.split()))  # fmt: skip
    variants = ["old", "new"] if args.only is None else [args.only]
    results: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        order = variants if r % 2 == 0 else variants[::-1]
        for v in order:
            got = one_boot(image, spec, v == "old", args.timeout, args.keep_console)
            results[v].append(got)
            print(f"round {r + 1} {v}: total {got['total']:.2f} s, "
                  f"qemu cpu {got['qemu cpu']:.2f} s", flush=True)  # fmt: skip
        load.append(os.getloadavg()[0])
    print(f"\nL1 boot, {args.vcpus} vCPUs, {args.memory} MiB, scratch {args.scratch} MiB, "
          f"net {args.net or 'none'}; {args.rounds} rounds; load average "
          f"{min(load):.1f}-{max(load):.1f}")  # fmt: skip
    print(table(results))


if __name__ == "__main__":
    main()
