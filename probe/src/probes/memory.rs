//! `memory`: sysbench's memory test. One event reads or writes one block of `block_kb`
//! KiB word by word (size_t loads/stores that the compiler may not drop), sequentially or
//! at random word offsets, in one buffer reused by every event (sysbench's global scope).
//! MiB/s = events * block / wall, as sysbench reports it.

use super::{CpuPool, Defaults, Probe, Session, Spec, ALL_ARCHES};
use crate::clock::mono_ns;
use crate::output::Better;
use crate::params::{Default, Kind, ParamSpec, Params};

pub struct Memory;
pub static MEMORY: Memory = Memory;

static SPEC: Spec = Spec {
    name: "memory",
    summary: "sysbench memory: read or write one block per event, sequential or random",
    mechanism: "memory bandwidth through the TLB (EPT/NPT two-dimensional walks)",
    unit: "ns",
    better: Better::Lower,
    throughput_unit: Some("MiB/s"),
    params: &[
        ParamSpec {
            name: "block_kb",
            default: Default::Int(1024),
            help: "block size in KiB (a power of two)",
            kind: Kind::Int { min: 1, max: 1 << 20 },
        },
        ParamSpec {
            name: "oper",
            default: Default::Str("write"),
            help: "operation",
            kind: Kind::Choice(&["read", "write"]),
        },
        ParamSpec {
            name: "access",
            default: Default::Str("seq"),
            help: "sequential words or uniformly random words",
            kind: Kind::Choice(&["seq", "rnd"]),
        },
    ],
    needs_root: false,
    arches: ALL_ARCHES,
    defaults: Defaults { runs: 5, iterations: 2000, duration_s: 0.3, warmup: 20 },
};

struct MemSession {
    buf: Vec<usize>,
    write: bool,
    rnd: bool,
    rng: u64,
    block: usize,
    cpu: usize,
}

impl Probe for Memory {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, String> {
        let kb = params.int("block_kb") as usize;
        if !kb.is_power_of_two() {
            return Err(format!("block_kb must be a power of two, got {kb}"));
        }
        crate::affinity::pin(&[pool.first()])?;
        let block = kb * 1024;
        Ok(Box::new(MemSession {
            buf: vec![0usize; block / std::mem::size_of::<usize>()],
            write: params.str("oper") == "write",
            rnd: params.str("access") == "rnd",
            rng: 0x9E37_79B9_7F4A_7C15,
            block,
            cpu: pool.first(),
        }))
    }
}

impl MemSession {
    fn next(&mut self) -> u64 {
        // xorshift64: cheap uniform offsets.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }
}

impl Session for MemSession {
    fn cpus(&self) -> Vec<usize> {
        vec![self.cpu]
    }

    fn iterate(&mut self) -> Result<f64, String> {
        // sysbench's sequential loops stop one word short of the block (buf < end, with
        // end = buf + max_offset); keep that so the byte counts match.
        let words = self.buf.len();
        let max_offset = words - 1;
        let t0 = mono_ns();
        if self.rnd {
            for i in 0..=max_offset {
                let off = (self.next() % words as u64) as usize;
                let p = self.buf.as_mut_ptr().wrapping_add(off);
                // SAFETY: off < words, so p points inside buf.
                unsafe {
                    if self.write {
                        std::ptr::write_volatile(p, i);
                    } else {
                        std::hint::black_box(std::ptr::read_volatile(p));
                    }
                }
            }
        } else {
            let p = self.buf.as_mut_ptr();
            for i in 0..max_offset {
                // SAFETY: i < words, so p.add(i) is inside buf.
                unsafe {
                    if self.write {
                        std::ptr::write_volatile(p.add(i), 0);
                    } else {
                        std::hint::black_box(std::ptr::read_volatile(p.add(i)));
                    }
                }
            }
        }
        Ok((mono_ns() - t0) as f64)
    }

    fn throughput(&self, n: usize, wall_s: f64, _values: &[f64]) -> Option<f64> {
        (wall_s > 0.0).then(|| n as f64 * self.block as f64 / (1024.0 * 1024.0) / wall_s)
    }
}
