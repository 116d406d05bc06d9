//! `portio`: one `outb` (or `inb`) to an unused I/O port, timed one by one. Port I/O is never
//! executed by the CPU for a guest: under KVM every `in`/`out` of a guest is an I/O
//! instruction exit (VMX exit reason 30, SVM `IOIO`), handled by KVM or, for a port no
//! in-kernel device claims, by the VMM in user space (`KVM_EXIT_IO`). So the probe isolates
//! the port I/O exit group the way `cpuid` isolates the trap group.
//!
//! The port is one of two that no PC device decodes, so neither a write nor a read does
//! anything at any level, bare metal included:
//! - `0xed` (default): the port Linux itself writes for its I/O delay on boards where 0x80 is
//!   taken (`io_delay=0xed`, arch/x86/kernel/io_delay.c), chosen there because nothing
//!   decodes it;
//! - `0x80`: the POST code port, Linux's default I/O delay port; on bare metal a write shows
//!   on a POST card or a board's debug display (and some laptops are known to misbehave when
//!   it is written, which is why Linux has the 0xed quirk), so it is not the default.
//!
//! Any other port is refused: a free port number would let a typo reset the machine (0xcf9)
//! or talk to a real device.
//!
//! Access comes from `ioperm(port, 1, 1)`, which opens that one port for this thread and its
//! children, not `iopl(3)`, which would open every port and let the process disable
//! interrupts. It needs CAP_SYS_RAWIO (root) and a kernel built with
//! CONFIG_X86_IOPL_IOPERM; without either, the stream ends with one line saying which.

use super::{net_ns, CpuPool, Defaults, Probe, ProbeError, Session, Spec};
use crate::clock::{ns_per_tick, overhead_ticks, ticks_start, ticks_stop};
use crate::output::Better;
use crate::params::{Default, Kind, ParamSpec, Params};

pub struct PortIo;
pub static PORTIO: PortIo = PortIo;

/// The ports the probe may touch (see the module's comment for why these).
const PORTS: &[&str] = &["0xed", "0x80"];

static SPEC: Spec = Spec {
    name: "portio",
    summary: "one outb (or inb) to an unused I/O port, timed one by one (root)",
    mechanism: "port I/O VM exit (I/O instruction, handled by KVM or the VMM)",
    unit: "ns",
    better: Better::Lower,
    throughput_unit: None,
    params: &[
        ParamSpec {
            name: "port",
            default: Default::Str("0xed"),
            help: "0xed: Linux's alternative I/O delay port, decoded by no device; 0x80: the POST code port",
            kind: Kind::Choice(PORTS),
        },
        ParamSpec {
            name: "op",
            default: Default::Str("out"),
            help: "out: outb of 0 to the port; in: inb from it",
            kind: Kind::Choice(&["out", "in"]),
        },
    ],
    needs_root: true,
    arches: &["x86_64"],
    // An exit to the VMM in user space costs microseconds; 0.2 s holds thousands of them.
    defaults: Defaults { runs: 5, iterations: 20_000, duration_s: 0.2, warmup: 200 },
};

/// The port number of a `port` choice.
fn port_number(choice: &str) -> u16 {
    match choice {
        "0x80" => 0x80,
        _ => 0xed,
    }
}

/// What to do about an `ioperm` failure, by its errno.
fn hint(errno: Option<i32>) -> &'static str {
    match errno {
        Some(libc::EPERM) => "run the agent as root (it needs CAP_SYS_RAWIO)",
        Some(libc::ENOSYS) => "this kernel has no ioperm (built without CONFIG_X86_IOPL_IOPERM)",
        _ => "port I/O is not available here",
    }
}

struct PortIoSession {
    port: u16,
    read: bool,
    overhead: f64,
    ns_per_tick: f64,
    cpu: usize,
}

impl Probe for PortIo {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError> {
        crate::affinity::pin(&[pool.first()])?;
        let port = port_number(params.str("port"));
        // SAFETY: ioperm only changes this thread's I/O permission bitmap; the result is checked.
        if unsafe { libc::ioperm(port as libc::c_ulong, 1, 1) } != 0 {
            let source = std::io::Error::last_os_error();
            return Err(ProbeError::NoPortIo { port, hint: hint(source.raw_os_error()), source });
        }
        Ok(Box::new(PortIoSession {
            port,
            read: params.str("op") == "in",
            overhead: overhead_ticks(),
            ns_per_tick: ns_per_tick(),
            cpu: pool.first(),
        }))
    }
}

impl Session for PortIoSession {
    fn cpus(&self) -> Vec<usize> {
        vec![self.cpu]
    }

    fn iterate(&mut self) -> Result<f64, ProbeError> {
        let a = ticks_start();
        if self.read {
            let v: u8;
            // SAFETY: ioperm opened this port for this thread in setup; reading a port that
            // no device decodes has no effect.
            unsafe {
                std::arch::asm!("in al, dx", in("dx") self.port, out("al") v, options(nomem, nostack, preserves_flags))
            };
            std::hint::black_box(v);
        } else {
            // SAFETY: as above; writing a port that no device decodes has no effect.
            unsafe {
                std::arch::asm!("out dx, al", in("dx") self.port, in("al") 0u8, options(nomem, nostack, preserves_flags))
            };
        }
        let b = ticks_stop();
        Ok(net_ns(a, b, self.overhead, self.ns_per_tick))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_two_unused_ports_are_offered() {
        assert_eq!(PORTS.iter().map(|p| port_number(p)).collect::<Vec<_>>(), vec![0xed, 0x80]);
        let err = crate::params::resolve("portio", SPEC.params, &["port=0xcf9".into()]).unwrap_err();
        assert!(err.to_string().contains("0xcf9"), "{err}");
    }

    #[test]
    fn a_refusal_is_one_line_that_says_what_to_do() {
        for (errno, want) in [
            (libc::EPERM, "run the agent as root (it needs CAP_SYS_RAWIO)"),
            (libc::ENOSYS, "CONFIG_X86_IOPL_IOPERM"),
            (libc::EINVAL, "port I/O is not available here"),
        ] {
            let e = ProbeError::NoPortIo {
                port: 0xed,
                hint: hint(Some(errno)),
                source: std::io::Error::from_raw_os_error(errno),
            };
            let line = crate::probes::RunErr::Setup(e).to_string();
            assert!(line.starts_with("setup: portio: ioperm(0xed): "), "{line}");
            assert!(line.contains(want) && !line.contains('\n'), "{line}");
        }
    }

    #[test]
    fn setup_opens_the_port_or_refuses_as_the_system_says() {
        // The same call the probe makes, asked directly: the probe must agree with it.
        let pool = CpuPool { cpus: vec![crate::affinity::current().unwrap_or(0)], requested: false };
        let params = crate::params::resolve("portio", SPEC.params, &[]).unwrap();
        // SAFETY: ioperm changes only this thread's permissions (the probe's thread is another).
        let allowed = std::thread::spawn(|| unsafe { libc::ioperm(0xed, 1, 1) } == 0).join().unwrap();
        let got =
            std::thread::spawn(move || PORTIO.setup(&params, &pool).map(|mut s| s.iterate().unwrap())).join().unwrap();
        match got {
            Ok(ns) => assert!(allowed && ns >= 0.0),
            Err(e) => assert!(!allowed && matches!(e, ProbeError::NoPortIo { port: 0xed, .. }), "{e}"),
        }
    }
}
