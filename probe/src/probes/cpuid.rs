//! `cpuid`: CPUID round trip in TSC cycles. In a hardware-assisted guest CPUID always exits
//! to the hypervisor, so this is the cheapest measurable VM exit ("Hypercall" proxy).

use super::{CpuPool, Defaults, Probe, ProbeError, Session, Spec};
use crate::clock::{overhead_ticks, ticks_start, ticks_stop, tsc_hz};
use crate::output::Better;
use crate::params::{Default, Kind, ParamSpec, Params};
use std::collections::BTreeMap;

pub struct Cpuid;
pub static CPUID: Cpuid = Cpuid;

static SPEC: Spec = Spec {
    name: "cpuid",
    summary: "CPUID round trip: an unconditional VM exit (the Hypercall proxy)",
    mechanism: "unconditional VM exit (CPUID)",
    unit: "tsc_cycles",
    better: Better::Lower,
    throughput_unit: None,
    params: &[ParamSpec {
        name: "leaf",
        default: Default::Int(0),
        help: "CPUID leaf to execute",
        kind: Kind::Int { min: 0, max: 0xffff_ffff },
    }],
    needs_root: false,
    arches: &["x86_64"],
    // The whole default invocation fits in 1 s of wall time: 20 runs, each stopping at 10k
    // exits or 35 ms (about 6k exits at 15k cycles). The 20 runs, not longer ones, are what
    // narrow the t interval of the mean over runs (bench/cpuid_precision.py).
    defaults: Defaults { runs: 20, iterations: 10_000, duration_s: 0.035, warmup: 200 },
};

struct CpuidSession {
    leaf: u32,
    overhead: f64,
    cpu: usize,
}

impl Probe for Cpuid {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError> {
        crate::affinity::pin(&[pool.first()])?;
        // The empty fenced rdtsc/rdtscp pair is measured once and subtracted from every
        // sample, so a sample is the CPUID alone.
        Ok(Box::new(CpuidSession { leaf: params.int("leaf") as u32, overhead: overhead_ticks(), cpu: pool.first() }))
    }
}

impl Session for CpuidSession {
    fn cpus(&self) -> Vec<usize> {
        vec![self.cpu]
    }

    #[inline(never)]
    fn iterate(&mut self) -> Result<f64, ProbeError> {
        let a = ticks_start();
        std::hint::black_box(crate::cpuid::cpuid(self.leaf, 0));
        let b = ticks_stop();
        // Clamped at 0 as net_ns clamps the other timed probes: under emulation a CPUID can
        // cost less than the timer's calibrated overhead, and a sample is never negative.
        Ok((b.wrapping_sub(a) as f64 - self.overhead).max(0.0))
    }

    fn extra(&self, values: &[f64]) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        m.insert("overhead_cycles".into(), self.overhead);
        if let Some(hz) = tsc_hz() {
            let per = 1e9 / hz;
            m.insert("tsc_hz".into(), hz);
            m.insert("ns_mean".into(), crate::stats::mean(values) * per);
            m.insert("ns_median".into(), crate::stats::median(values) * per);
        }
        m
    }
}
