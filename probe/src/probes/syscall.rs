//! `syscall`: the null system call (getppid): one user/kernel round trip, no VM exit
//! under hardware virtualization, but binary translation and shadow paging make it costly.

use super::{net_ns, CpuPool, Defaults, Probe, ProbeError, Session, Spec, ALL_ARCHES};
use crate::clock::{ns_per_tick, overhead_ticks, ticks_start, ticks_stop};
use crate::output::Better;
use crate::params::Params;

pub struct Syscall;
pub static SYSCALL: Syscall = Syscall;

static SPEC: Spec = Spec {
    name: "syscall",
    summary: "null system call (getppid), timed one by one",
    mechanism: "user/kernel transition (no VM exit with hardware assist)",
    unit: "ns",
    better: Better::Lower,
    throughput_unit: None,
    params: &[],
    needs_root: false,
    arches: ALL_ARCHES,
    defaults: Defaults { runs: 5, iterations: 20_000, duration_s: 0.2, warmup: 1000 },
};

struct SyscallSession {
    overhead: f64,
    ns_per_tick: f64,
    cpu: usize,
}

impl Probe for Syscall {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn setup(&self, _params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError> {
        crate::affinity::pin(&[pool.first()])?;
        Ok(Box::new(SyscallSession { overhead: overhead_ticks(), ns_per_tick: ns_per_tick(), cpu: pool.first() }))
    }
}

impl Session for SyscallSession {
    fn cpus(&self) -> Vec<usize> {
        vec![self.cpu]
    }

    fn iterate(&mut self) -> Result<f64, ProbeError> {
        let a = ticks_start();
        // SAFETY: getppid has no arguments and cannot fail; the raw syscall avoids any libc cache.
        let r = unsafe { libc::syscall(libc::SYS_getppid) };
        let b = ticks_stop();
        std::hint::black_box(r);
        Ok(net_ns(a, b, self.overhead, self.ns_per_tick))
    }
}
