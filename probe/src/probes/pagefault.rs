//! `pagefault`: first touch of fresh anonymous memory, per 4 KiB page. With THP off every
//! page faults; with THP on one fault maps 2 MiB. In a guest each new guest-physical page
//! may also take an EPT/NPT violation on the host side.

use super::{CpuPool, Defaults, Probe, ProbeError, Session, Spec, ALL_ARCHES};
use crate::clock::mono_ns;
use crate::output::Better;
use crate::params::{Default, Kind, ParamSpec, Params};
use std::collections::BTreeMap;

pub struct Pagefault;
pub static PAGEFAULT: Pagefault = Pagefault;

const HUGE: usize = 2 << 20;

static SPEC: Spec = Spec {
    name: "pagefault",
    summary: "first touch of fresh anonymous pages (ns per 4 KiB page), THP off or on",
    mechanism: "page faults; EPT/NPT violations on first guest touch",
    unit: "ns",
    better: Better::Lower,
    throughput_unit: Some("pages/s"),
    params: &[
        ParamSpec {
            name: "thp",
            default: Default::Str("off"),
            help: "off: madvise(MADV_NOHUGEPAGE); on: madvise(MADV_HUGEPAGE)",
            kind: Kind::Choice(&["off", "on"]),
        },
        ParamSpec {
            name: "size_kb",
            default: Default::Int(2048),
            help: "region touched per iteration, KiB (rounded up to 2 MiB)",
            kind: Kind::Int { min: 4, max: 1 << 20 },
        },
    ],
    needs_root: false,
    arches: ALL_ARCHES,
    defaults: Defaults { runs: 5, iterations: 100, duration_s: 0.3, warmup: 3 },
};

struct PfSession {
    size: usize,
    huge: bool,
    cpu: usize,
    page: usize,
}

impl Probe for Pagefault {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError> {
        crate::affinity::pin(&[pool.first()])?;
        let kb = params.int("size_kb") as usize;
        let size = (kb * 1024).div_ceil(HUGE) * HUGE;
        // SAFETY: sysconf has no memory effects.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        Ok(Box::new(PfSession { size, huge: params.str("thp") == "on", cpu: pool.first(), page }))
    }
}

impl Session for PfSession {
    fn cpus(&self) -> Vec<usize> {
        vec![self.cpu]
    }

    fn iterate(&mut self) -> Result<f64, ProbeError> {
        let len = self.size + HUGE;
        // SAFETY: anonymous private mapping; checked for MAP_FAILED below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(ProbeError::os("mmap"));
        }
        // Align to 2 MiB so THP can map whole huge pages.
        let base = (p as usize).div_ceil(HUGE) * HUGE;
        let advice = if self.huge { libc::MADV_HUGEPAGE } else { libc::MADV_NOHUGEPAGE };
        // SAFETY: [base, base+size) lies inside the mapping; madvise only changes policy.
        unsafe { libc::madvise(base as *mut libc::c_void, self.size, advice) };
        let t0 = mono_ns();
        let mut off = 0;
        while off < self.size {
            // SAFETY: base+off is inside the fresh writable mapping.
            unsafe { std::ptr::write_volatile((base + off) as *mut u8, 1) };
            off += 4096.min(self.page);
        }
        let t1 = mono_ns();
        // SAFETY: unmapping exactly the mapping created above.
        unsafe { libc::munmap(p, len) };
        Ok((t1 - t0) as f64 / (self.size / 4096) as f64)
    }

    /// Pages per second of first touch: one value is one page's cost in ns.
    fn throughput(&self, _n: usize, _wall_s: f64, values: &[f64]) -> Option<f64> {
        Some(1e9 / crate::stats::mean(values))
    }

    fn extra(&self, _values: &[f64]) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        m.insert("pages_per_iteration".into(), (self.size / 4096) as f64);
        m
    }
}
