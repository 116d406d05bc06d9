//! `vmtax-probe noise`: one sample of the machine's interference, for adaptive sampling to
//! store before and after the runs it judges. Not a probe (it is not listed or run): one
//! JSON line with, over a short window,
//! - the clock: a dependent chain of integer adds (one cycle each, whatever the machine)
//!   timed with the TSC in chunks of 4096 adds. Ticks per add is the TSC rate over the core
//!   clock, so it moves when the core's frequency does (the CPUID-cost states of
//!   bench/cpuid_precision.py); the median ignores chunks cut by an interrupt;
//! - steal ticks accrued (/proc/stat `cpu` line, all CPUs);
//! - other CPU use: the busy share of all CPUs, minus this process's own ticks, in percent;
//! - runnable and blocked tasks (`procs_running`, without this process; `procs_blocked`).

use crate::clock::{mono_ns, ticks_start, ticks_stop};
use serde_json::{json, Value};

const ADDS_PER_CHUNK: u64 = 4096;

struct ProcStat {
    busy: u64,
    total: u64,
    steal: u64,
    running: Option<u64>,
    blocked: Option<u64>,
}

fn proc_stat() -> Option<ProcStat> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let mut out = ProcStat { busy: 0, total: 0, steal: 0, running: None, blocked: None };
    for line in text.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("cpu") => {
                let v: Vec<u64> = words.filter_map(|w| w.parse().ok()).collect();
                // user nice system idle iowait irq softirq steal (guest time is in user).
                let total: u64 = v.iter().take(8).sum();
                let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
                out.steal = v.get(7).copied().unwrap_or(0);
                out.total = total;
                out.busy = total.saturating_sub(idle);
            }
            Some("procs_running") => out.running = words.next().and_then(|w| w.parse().ok()),
            Some("procs_blocked") => out.blocked = words.next().and_then(|w| w.parse().ok()),
            _ => {}
        }
    }
    Some(out)
}

/// This process's user + system ticks (/proc/self/stat fields 14 and 15).
fn own_ticks() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = text.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// ADDS_PER_CHUNK dependent adds; returns the chain's value so it cannot be removed.
#[inline(never)]
fn chain(seed: u64) -> u64 {
    let mut x = seed;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: register-only arithmetic on the operands given; no memory, no stack.
    unsafe {
        std::arch::asm!(
            "2:",
            "add {x}, {y}", "add {x}, {y}", "add {x}, {y}", "add {x}, {y}",
            "add {x}, {y}", "add {x}, {y}", "add {x}, {y}", "add {x}, {y}",
            "dec {n}",
            "jnz 2b",
            x = inout(reg) x,
            y = in(reg) 3u64,
            n = inout(reg) ADDS_PER_CHUNK / 8 => _,
            options(nomem, nostack),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    for _ in 0..ADDS_PER_CHUNK {
        x = std::hint::black_box(x).wrapping_add(3);
    }
    x
}

/// Sample the noise over `window_s` seconds (at least one chunk).
pub fn sample(window_s: f64) -> Value {
    let before = proc_stat();
    let own_before = own_ticks();
    let deadline = mono_ns() + (window_s.max(0.0) * 1e9) as u64;
    let mut per_add = Vec::new();
    let mut sink = 1u64;
    loop {
        let a = ticks_start();
        sink = chain(sink);
        let b = ticks_stop();
        per_add.push(b.wrapping_sub(a) as f64 / ADDS_PER_CHUNK as f64);
        if mono_ns() >= deadline {
            break;
        }
    }
    std::hint::black_box(sink);
    let after = proc_stat();
    let own_after = own_ticks();
    per_add.sort_by(f64::total_cmp);
    let q = |p: f64| per_add[((per_add.len() - 1) as f64 * p).round() as usize];
    let (steal, other, running, blocked) = match (&before, &after) {
        (Some(b), Some(a)) => {
            let total = a.total.saturating_sub(b.total);
            let own = match (own_before, own_after) {
                (Some(x), Some(y)) => y.saturating_sub(x),
                _ => 0,
            };
            let busy = a.busy.saturating_sub(b.busy).saturating_sub(own);
            let other = (total > 0).then(|| 100.0 * busy as f64 / total as f64);
            (Some(a.steal.saturating_sub(b.steal)), other, a.running.map(|r| r.saturating_sub(1)), a.blocked)
        }
        _ => (None, None, None, None),
    };
    json!({
        "type": "noise",
        "window_s": window_s,
        "chunks": per_add.len(),
        "clock": if cfg!(target_arch = "x86_64") { "tsc" } else { "monotonic_ns" },
        "tsc_hz": crate::clock::tsc_hz(),
        "ticks_per_add": q(0.5),
        "ticks_per_add_p10": q(0.1),
        "ticks_per_add_p90": q(0.9),
        "steal_ticks": steal,
        "other_cpu_pct": other,
        "procs_running": running,
        "procs_blocked": blocked,
        "logical_cpus": std::thread::available_parallelism().map(|n| n.get()).ok(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_sample_has_the_clock_and_the_proc_figures() {
        let v = super::sample(0.01);
        assert_eq!(v["type"], "noise");
        let per_add = v["ticks_per_add"].as_f64().unwrap();
        assert!(per_add > 0.0 && per_add < 1000.0, "{per_add}");
        assert!(v["ticks_per_add_p10"].as_f64().unwrap() <= per_add);
        assert!(v["chunks"].as_u64().unwrap() >= 1);
        if std::path::Path::new("/proc/stat").exists() {
            assert!(v["steal_ticks"].is_u64() && v["procs_running"].is_u64());
            let other = v["other_cpu_pct"].as_f64().unwrap_or(0.0);
            assert!((0.0..=100.0).contains(&other));
        }
    }
}
