//! `memory`: sysbench's memory test. One event reads or writes one block of `block_kb`
//! KiB word by word (size_t loads/stores that the compiler may not drop), sequentially or
//! at random word offsets, in one buffer reused by every event (sysbench's global scope).
//! MiB/s = events * block / wall, as sysbench reports it. Each access is a volatile
//! load/store followed by a compiler barrier, the equivalent of sysbench's ConcurrencyKit
//! ck_pr_load_64/ck_pr_store_64 (an asm move with a "memory" clobber), so the compiler
//! neither drops nor batches accesses differently from sysbench.

use super::{CpuPool, Defaults, Probe, Session, Spec, ALL_ARCHES};
use crate::clock::mono_ns;
use crate::output::Better;
use crate::params::{Default, Kind, ParamSpec, Params};
use std::sync::atomic::{compiler_fence, Ordering};

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

impl Session for MemSession {
    fn cpus(&self) -> Vec<usize> {
        vec![self.cpu]
    }

    fn iterate(&mut self) -> Result<f64, String> {
        let words = self.buf.len();
        let p = self.buf.as_mut_ptr();
        let t0 = mono_ns();
        match (self.rnd, self.write) {
            (false, false) => seq_read(p, words),
            (false, true) => seq_write(p, words),
            (true, write) => {
                let mut rng = self.rng;
                rnd_access(p, words, &mut rng, write);
                self.rng = rng;
            }
        }
        Ok((mono_ns() - t0) as f64)
    }

    fn throughput(&self, n: usize, wall_s: f64, _values: &[f64]) -> Option<f64> {
        (wall_s > 0.0).then(|| n as f64 * self.block as f64 / (1024.0 * 1024.0) / wall_s)
    }
}

// One loop per operation, on locals only: the compiler barrier after each access would
// otherwise force the session's fields to be reloaded on every word.

/// sysbench's sequential loops stop one word short of the block (`buf < end` with
/// `end = buf + max_offset`); keep that so the byte counts match.
///
/// A 1 MiB block sits in L2, so the figure is set by the loop as much as by memory, and
/// the loops are written out in assembly on x86_64 to match sysbench's machine code
/// (LLVM would unroll a Rust loop differently); elsewhere volatile loops stand in.
/// The read loop of the distributions' sysbench binaries is unrolled eight times (eight
/// loads, then one add/compare/branch: see its disassembly); the x86_64 loop here is the
/// same, with the remainder done one word at a time.
#[inline(never)]
fn seq_read(p: *mut usize, words: usize) {
    let n = words - 1;
    #[cfg(target_arch = "x86_64")]
    let done = {
        let main = n / 8 * 8;
        if main > 0 {
            // SAFETY: reads the words [p, p + main) of the live buffer (main <= words); no
            // stack, no writes.
            unsafe {
                std::arch::asm!(
                    "2:",
                    "mov {t}, qword ptr [{p}]",
                    "mov {t}, qword ptr [{p} + 8]",
                    "mov {t}, qword ptr [{p} + 16]",
                    "mov {t}, qword ptr [{p} + 24]",
                    "mov {t}, qword ptr [{p} + 32]",
                    "mov {t}, qword ptr [{p} + 40]",
                    "mov {t}, qword ptr [{p} + 48]",
                    "mov {t}, qword ptr [{p} + 56]",
                    "add {p}, 64",
                    "cmp {p}, {end}",
                    "jb 2b",
                    p = inout(reg) p => _,
                    end = in(reg) p.add(main),
                    t = out(reg) _,
                    options(nostack, readonly),
                );
            }
        }
        main
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    for i in done..n {
        // SAFETY: i < words, so p.add(i) is inside the buffer.
        let _ = unsafe { std::ptr::read_volatile(p.add(i)) };
        compiler_fence(Ordering::SeqCst);
    }
}

#[inline(never)]
fn seq_write(p: *mut usize, words: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: writes zeros to the words [p, p + words - 1) of the live buffer; no stack.
        unsafe {
            std::arch::asm!(
                "2:",
                "mov qword ptr [{p}], {zero}",
                "add {p}, 8",
                "cmp {p}, {end}",
                "jb 2b",
                p = inout(reg) p => _,
                end = in(reg) p.add(words - 1),
                zero = in(reg) 0usize,
                options(nostack),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    for i in 0..words - 1 {
        // SAFETY: i < words, so p.add(i) is inside the buffer.
        unsafe { std::ptr::write_volatile(p.add(i), 0) };
        compiler_fence(Ordering::SeqCst);
    }
}

/// sysbench's random loops make max_offset + 1 = words accesses at uniform word offsets.
#[inline(never)]
fn rnd_access(p: *mut usize, words: usize, rng: &mut u64, write: bool) {
    let mut x = *rng;
    for i in 0..words {
        // xorshift64: cheap uniform offsets.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = (x % words as u64) as usize;
        // SAFETY: off < words, so p.add(off) is inside the buffer.
        unsafe {
            if write {
                std::ptr::write_volatile(p.add(off), i);
            } else {
                let _ = std::ptr::read_volatile(p.add(off));
            }
        }
        compiler_fence(Ordering::SeqCst);
    }
    *rng = x;
}
