//! `memory`: sysbench's memory test. One event reads or writes one block of `block_kb`
//! KiB word by word (size_t loads/stores that the compiler may not drop), sequentially or
//! at random word offsets, in one buffer reused by every event (sysbench's global scope).
//! Like sysbench's, the buffer is page-aligned and zeroed by stores before the first event,
//! so every page of it is backed by its own memory.
//! MiB/s = events * block / wall, as sysbench reports it. Each access is a volatile
//! load/store followed by a compiler barrier, the equivalent of sysbench's ConcurrencyKit
//! ck_pr_load_64/ck_pr_store_64 (an asm move with a "memory" clobber), so the compiler
//! neither drops nor batches accesses differently from sysbench.

use super::{CpuPool, Defaults, Probe, ProbeError, Session, Spec, ALL_ARCHES};
use crate::clock::mono_ns;
use crate::output::Better;
use crate::params::{Default, Kind, ParamSpec, Params};
use std::alloc::Layout;
use std::ptr::NonNull;
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

/// The block buffer, as sysbench 1.0 makes it: `sb_memalign(block, pagesize)` then
/// `memset(buf, 0, block)`. The zeroing must be real stores: left untouched (a zeroed
/// allocation is fresh mmap memory that nobody writes), the read tests would map every page
/// of the block to the kernel's one shared zero page and read 4 KiB over and over from L1
/// instead of the whole block.
struct Buffer {
    ptr: NonNull<usize>,
    layout: Layout,
}

impl Buffer {
    fn new(bytes: usize) -> Result<Buffer, ProbeError> {
        // SAFETY: sysconf has no memory effects.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let layout = Layout::from_size_align(bytes, page).map_err(|source| ProbeError::Layout { bytes, source })?;
        // SAFETY: the layout has a non-zero size (block_kb >= 1).
        let raw = unsafe { std::alloc::alloc(layout) }.cast::<usize>();
        let ptr = NonNull::new(raw).ok_or(ProbeError::Alloc(bytes))?;
        for i in 0..bytes / std::mem::size_of::<usize>() {
            // SAFETY: i is a word index inside the allocation; volatile so that the
            // compiler can neither drop these stores nor turn them into a zeroed
            // allocation.
            unsafe { std::ptr::write_volatile(ptr.as_ptr().add(i), 0) };
        }
        Ok(Buffer { ptr, layout })
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: allocated in Buffer::new with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), self.layout) };
    }
}

struct MemSession {
    buf: Buffer,
    words: usize,
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

    fn validate(&self, params: &Params) -> Result<(), ProbeError> {
        let kb = params.int("block_kb");
        if !(kb as u64).is_power_of_two() {
            return Err(ProbeError::BlockKb(kb));
        }
        Ok(())
    }

    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError> {
        let kb = params.int("block_kb") as usize;
        crate::affinity::pin(&[pool.first()])?;
        let block = kb * 1024;
        Ok(Box::new(MemSession {
            buf: Buffer::new(block)?,
            words: block / std::mem::size_of::<usize>(),
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

    fn iterate(&mut self) -> Result<f64, ProbeError> {
        let words = self.words;
        let p = self.buf.ptr.as_ptr();
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

/// sysbench 1.0's sequential loops cover the whole block (`buf < end` with
/// `end = buf + block / sizeof(size_t)`), and so do these.
///
/// A 1 MiB block sits in L2, so the figure is set by the loop as much as by memory, and
/// the loops are written out in assembly on x86_64 to match sysbench's machine code
/// (LLVM would unroll a Rust loop differently); elsewhere volatile loops stand in.
/// The read loop of the distributions' sysbench binaries is unrolled eight times (eight
/// loads, then one add/compare/branch: see its disassembly); the x86_64 loop here is the
/// same, with the remainder done one word at a time.
/// Words done by the x86_64 eight-at-a-time loops; the rest go one word at a time.
fn unrolled_words(words: usize) -> usize {
    if cfg!(target_arch = "x86_64") {
        words / 8 * 8
    } else {
        0
    }
}

#[inline(never)]
fn seq_read(p: *mut usize, words: usize) {
    let main = unrolled_words(words);
    #[cfg(target_arch = "x86_64")]
    if main > 0 {
        // SAFETY: reads the words [p, p + main) of the live buffer (main <= words); no stack,
        // no writes.
        unsafe {
            std::arch::asm!(
                "2:",
                ".irp off, 0, 8, 16, 24, 32, 40, 48, 56",
                "mov {t}, qword ptr [{p} + \\off]",
                ".endr",
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
    for i in main..words {
        // SAFETY: i < words, so p.add(i) is inside the buffer.
        let _ = unsafe { std::ptr::read_volatile(p.add(i)) };
        compiler_fence(Ordering::SeqCst);
    }
}

/// sysbench 1.0's write loop stores `end - buf`, the number of words left (never zero, so
/// the block does not stay all zeros as it would if zeros were stored over the zeroed
/// buffer). Its compiled form is unrolled eight times: per word a mov/sub/sar to compute
/// the value and the store (with a lea for the address after the first), then one
/// add/compare/branch; the x86_64 loop here is the same.
#[inline(never)]
fn seq_write(p: *mut usize, words: usize) {
    let main = unrolled_words(words);
    #[cfg(target_arch = "x86_64")]
    if main > 0 {
        // SAFETY: writes the words [p, p + main) of the live buffer (main <= words); no stack.
        unsafe {
            std::arch::asm!(
                "2:",
                ".irp off, 0, 8, 16, 24, 32, 40, 48, 56",
                "lea {a}, [{p} + \\off]",
                "mov {t}, {end}",
                "sub {t}, {a}",
                "sar {t}, 3",
                "mov qword ptr [{p} + \\off], {t}",
                ".endr",
                "add {p}, 64",
                "cmp {p}, {stop}",
                "jb 2b",
                p = inout(reg) p => _,
                stop = in(reg) p.add(main),
                end = in(reg) p.add(words),
                t = out(reg) _,
                a = out(reg) _,
                options(nostack),
            );
        }
    }
    for i in main..words {
        // SAFETY: i < words, so p.add(i) is inside the buffer.
        unsafe { std::ptr::write_volatile(p.add(i), words - i) };
        compiler_fence(Ordering::SeqCst);
    }
}

/// sysbench 1.0's random loops make one access per word of the block, at uniform word
/// offsets.
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

#[cfg(test)]
mod tests {
    use super::Buffer;

    /// Anonymous (privately backed) kB of the mapping that holds `addr`, from /proc/self/smaps.
    #[cfg(target_os = "linux")]
    fn anonymous_kb_around(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
        let mut inside = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = first.split_once('-') {
                if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16)) {
                    inside = (lo..hi).contains(&addr);
                    continue;
                }
            }
            if inside {
                if let Some(kb) = line.strip_prefix("Anonymous:") {
                    return kb.trim().trim_end_matches("kB").trim().parse().expect("kB");
                }
            }
        }
        panic!("no mapping holds {addr:#x}");
    }

    /// A block that is only ever read must still be real memory: untouched, every page of it
    /// would map the kernel's shared zero page and a "1 MiB" read would hit one 4 KiB page.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_block_is_backed_by_its_own_pages() {
        let buf = Buffer::new(1 << 20).expect("buffer");
        let kb = anonymous_kb_around(buf.ptr.as_ptr() as usize);
        assert!(kb >= 1024, "only {kb} kB of the 1024 kB block is backed by its own memory");
    }
}
