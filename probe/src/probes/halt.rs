//! `halt`: a halt-heavy idle loop. Each iteration sleeps `sleep_us` on one thread
//! (`clock_nanosleep`, relative, CLOCK_MONOTONIC) and is timed whole, so with nothing else to
//! run the CPU goes idle every iteration: in a guest the vCPU executes HLT (a halt exit) and
//! is woken by its timer interrupt. Per operation that is one halt, the timer's programming
//! and its interrupt, and the halt's wait dominates the time, so the probe takes the halt
//! exit group. `timer` measures the same wake-up's lateness a millisecond ahead.
//!
//! A sleep must outlast what comes before the halt, or the timer fires first and the vCPU
//! never halts: a guest kernel with the `cpuidle-haltpoll` driver polls for up to
//! `guest_halt_poll_ns` (200 us by default), the host's KVM polls before it deschedules a
//! halted vCPU (`halt_poll_ns`), and one level deeper the timer's programming is itself a
//! nested exit. Hence 500 us: at L2 over an emulated L1, 50 us sleeps took 0.00-0.02 HLT
//! exits each and 500 us sleeps 0.89. The guest's driver is
//! `/sys/devices/system/cpu/cpuidle/current_driver`.

use super::{CpuPool, Defaults, Probe, ProbeError, Session, Spec, ALL_ARCHES};
use crate::clock::mono_ns;
use crate::output::Better;
use crate::params::{Default, Kind, ParamSpec, Params};
use std::collections::BTreeMap;

pub struct Halt;
pub static HALT: Halt = Halt;

static SPEC: Spec = Spec {
    name: "halt",
    summary: "idle loop of short sleeps (the vCPU halts each time): time per sleep",
    mechanism: "HLT exit of the idle vCPU and its wake-up by the timer interrupt",
    unit: "ns",
    better: Better::Lower,
    throughput_unit: None,
    params: &[ParamSpec {
        name: "sleep_us",
        default: Default::Int(500),
        help: "how long each iteration sleeps, in microseconds (long enough that the vCPU halts)",
        kind: Kind::Int { min: 1, max: 100_000 },
    }],
    needs_root: false,
    arches: ALL_ARCHES,
    defaults: Defaults { runs: 5, iterations: 2000, duration_s: 0.3, warmup: 20 },
};

struct HaltSession {
    sleep_ns: u64,
    cpu: usize,
}

impl Probe for Halt {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError> {
        crate::affinity::pin(&[pool.first()])?;
        // The thread's timer slack (50 us by default) would let the kernel end each sleep up
        // to 50 us late to batch wake-ups; 1 ns asks for the sleep as given, so what an
        // iteration adds to its sleep is the halt and the wake-up.
        // SAFETY: prctl with PR_SET_TIMERSLACK takes a plain integer; the result is checked.
        if unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) } != 0 {
            return Err(ProbeError::os("prctl(PR_SET_TIMERSLACK)"));
        }
        Ok(Box::new(HaltSession { sleep_ns: params.int("sleep_us") as u64 * 1000, cpu: pool.first() }))
    }
}

/// Sleep `ns` on CLOCK_MONOTONIC, resuming after a signal with what is left.
fn sleep(ns: u64) -> Result<(), ProbeError> {
    let mut t = libc::timespec { tv_sec: (ns / 1_000_000_000) as _, tv_nsec: (ns % 1_000_000_000) as libc::c_long };
    loop {
        let mut left = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: t and left are valid timespecs; a relative sleep writes what is left to `left`.
        match unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, 0, &t, &mut left) } {
            0 => return Ok(()),
            libc::EINTR => t = left,
            e => return Err(ProbeError::io("clock_nanosleep", std::io::Error::from_raw_os_error(e))),
        }
    }
}

impl Session for HaltSession {
    fn cpus(&self) -> Vec<usize> {
        vec![self.cpu]
    }

    fn iterate(&mut self) -> Result<f64, ProbeError> {
        let a = mono_ns();
        sleep(self.sleep_ns)?;
        Ok(mono_ns().saturating_sub(a) as f64)
    }

    /// The sleep asked for and how much longer an iteration took (the wake-up's cost).
    fn extra(&self, values: &[f64]) -> BTreeMap<String, f64> {
        let asked = self.sleep_ns as f64;
        BTreeMap::from([
            ("sleep_ns".into(), asked),
            ("late_ns_mean".into(), crate::stats::mean(values) - asked),
            ("late_ns_median".into(), crate::stats::median(values) - asked),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_iteration_lasts_at_least_its_sleep_and_extra_is_what_it_added() {
        let params = crate::params::resolve("halt", SPEC.params, &["sleep_us=200".into()]).unwrap();
        let pool = CpuPool { cpus: vec![crate::affinity::current().unwrap_or(0)], requested: false };
        let mut s = HALT.setup(&params, &pool).unwrap();
        let values: Vec<f64> = (0..20).map(|_| s.iterate().unwrap()).collect();
        // A relative sleep never ends early: every value is the sleep or longer.
        assert!(values.iter().all(|&v| v >= 200_000.0), "{values:?}");
        let extra = s.extra(&values);
        assert_eq!(extra["sleep_ns"], 200_000.0);
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        assert!((extra["late_ns_mean"] - (mean - 200_000.0)).abs() < 1e-6);
        assert!(extra["late_ns_median"] >= 0.0);
    }
}
