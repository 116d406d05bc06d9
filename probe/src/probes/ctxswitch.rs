//! `ctxswitch`: two processes pinned on one CPU ping-pong a byte through two pipes. Each
//! round trip is two context switches between address spaces (CR3 writes, TLB work), which
//! shadow paging and some nested setups make expensive.

use super::{net_ns, CpuPool, Defaults, Probe, ProbeError, Session, Spec, ALL_ARCHES};
use crate::clock::{ns_per_tick, overhead_ticks, ticks_start, ticks_stop};
use crate::output::Better;
use crate::params::Params;
use std::collections::BTreeMap;

pub struct Ctxswitch;
pub static CTXSWITCH: Ctxswitch = Ctxswitch;

static SPEC: Spec = Spec {
    name: "ctxswitch",
    summary: "pipe ping-pong between two processes on one CPU (two switches per value)",
    mechanism: "address-space switch (CR3 write, TLB) and scheduler",
    unit: "ns",
    better: Better::Lower,
    throughput_unit: None,
    params: &[],
    needs_root: false,
    arches: ALL_ARCHES,
    defaults: Defaults { runs: 5, iterations: 5000, duration_s: 0.3, warmup: 100 },
};

struct CtxSession {
    to_child: i32,
    from_child: i32,
    child: libc::pid_t,
    cpu: usize,
    overhead: f64,
    ns_per_tick: f64,
}

fn pipe() -> Result<[i32; 2], ProbeError> {
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(ProbeError::os("pipe"));
    }
    Ok(fds)
}

impl Probe for Ctxswitch {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn setup(&self, _params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError> {
        let cpu = pool.first();
        crate::affinity::pin(&[cpu])?;
        let down = pipe()?;
        let up = pipe()?;
        // SAFETY: the child only calls async-signal-safe functions (read, write, _exit)
        // and inherits the parent's pinning to the same CPU.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(ProbeError::os("fork"));
        }
        if pid == 0 {
            // SAFETY: drop the child's copies of the parent's ends, so that closing them in
            // the parent gives the child EOF.
            unsafe {
                libc::close(down[1]);
                libc::close(up[0]);
            }
            let mut b = 0u8;
            loop {
                // SAFETY: one-byte read/write on pipe fds inherited from the parent.
                let n = unsafe { libc::read(down[0], (&mut b as *mut u8).cast(), 1) };
                if n != 1 {
                    // SAFETY: _exit ends the child without running the parent's destructors.
                    unsafe { libc::_exit(0) };
                }
                // SAFETY: as above.
                if unsafe { libc::write(up[1], (&b as *const u8).cast(), 1) } != 1 {
                    // SAFETY: as above.
                    unsafe { libc::_exit(0) };
                }
            }
        }
        // SAFETY: closing the child's ends in the parent; the fds are valid and unused here.
        unsafe {
            libc::close(down[0]);
            libc::close(up[1]);
        }
        Ok(Box::new(CtxSession {
            to_child: down[1],
            from_child: up[0],
            child: pid,
            cpu,
            overhead: overhead_ticks(),
            ns_per_tick: ns_per_tick(),
        }))
    }
}

impl Session for CtxSession {
    fn cpus(&self) -> Vec<usize> {
        vec![self.cpu]
    }

    fn iterate(&mut self) -> Result<f64, ProbeError> {
        let mut b = 1u8;
        let t0 = ticks_start();
        // SAFETY: one-byte write/read on our pipe ends.
        let ok = unsafe {
            libc::write(self.to_child, (&b as *const u8).cast(), 1) == 1
                && libc::read(self.from_child, (&mut b as *mut u8).cast(), 1) == 1
        };
        let t1 = ticks_stop();
        if !ok {
            return Err(ProbeError::os("pipe ping-pong"));
        }
        Ok(net_ns(t0, t1, self.overhead, self.ns_per_tick))
    }

    fn extra(&self, values: &[f64]) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        m.insert("switch_ns_mean".into(), crate::stats::mean(values) / 2.0);
        m
    }
}

impl Drop for CtxSession {
    fn drop(&mut self) {
        // SAFETY: closing our pipe ends makes the child's read return 0 and it exits; then reap it.
        unsafe {
            libc::close(self.to_child);
            libc::close(self.from_child);
            libc::waitpid(self.child, std::ptr::null_mut(), 0);
        }
    }
}
