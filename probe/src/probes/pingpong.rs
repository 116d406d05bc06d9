//! `pingpong`: the `wakeup` round trip with both sides spinning on shared words, so neither
//! CPU idles: the cost of cache-line transfer between (v)CPUs without any IPI.

use super::roundtrip::{RoundTrip, Wait};
use super::{CpuPool, Defaults, Probe, ProbeError, Session, Spec, ALL_ARCHES};
use crate::output::Better;
use crate::params::Params;

pub struct Pingpong;
pub static PINGPONG: Pingpong = Pingpong;

static SPEC: Spec = Spec {
    name: "pingpong",
    summary: "round trip between two threads spinning on two CPUs (no idle, no IPI)",
    mechanism: "cross-CPU cache-line transfer; vCPU preemption shows as outliers",
    unit: "ns",
    better: Better::Lower,
    throughput_unit: None,
    params: &[],
    needs_root: false,
    arches: ALL_ARCHES,
    defaults: Defaults { runs: 5, iterations: 20_000, duration_s: 0.2, warmup: 1000 },
};

impl Probe for Pingpong {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn setup(&self, _params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError> {
        let (a, b) = pool.two();
        if a == b {
            return Err(ProbeError::NeedsTwoCpus);
        }
        Ok(Box::new(RoundTrip::start(a, b, Wait::Spin)?))
    }
}
