//! `wakeup`: wake a thread pinned on another CPU that sleeps in a futex (so that CPU is
//! idle), and wait in a futex for its answer: the round trip of two cross-CPU wake-ups.
//! In a guest each wake-up is an IPI to a halted vCPU: a VM exit to send it, and the
//! target must be scheduled and have the interrupt injected.

use super::roundtrip::{RoundTrip, Wait};
use super::{CpuPool, Defaults, Probe, ProbeError, Session, Spec, ALL_ARCHES};
use crate::output::Better;
use crate::params::Params;

pub struct Wakeup;
pub static WAKEUP: Wakeup = Wakeup;

static SPEC: Spec = Spec {
    name: "wakeup",
    summary: "futex wake-up round trip to a thread sleeping on another CPU",
    mechanism: "IPI to an idle (halted) vCPU and interrupt injection",
    unit: "ns",
    better: Better::Lower,
    throughput_unit: None,
    params: &[],
    needs_root: false,
    arches: ALL_ARCHES,
    defaults: Defaults { runs: 5, iterations: 5000, duration_s: 0.3, warmup: 100 },
};

impl Probe for Wakeup {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn setup(&self, _params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError> {
        let (a, b) = pool.two();
        Ok(Box::new(RoundTrip::start(a, b, Wait::Futex)?))
    }
}
