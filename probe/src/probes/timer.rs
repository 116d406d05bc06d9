//! `timer`: arm a one-shot timer `delay_us` ahead on CLOCK_MONOTONIC (clock_nanosleep with
//! TIMER_ABSTIME, as cyclictest does, or a timerfd) and record how late the wake-up is.
//! Under virtualization the timer is programmed through an exit (or a paravirtual path)
//! and the wake-up arrives as an injected interrupt.
//!
//! While it sleeps the CPU is idle. By default the guest may halt it (HLT exits, and the
//! host must reschedule the vCPU to deliver the timer). `idle=poll` holds a PM QoS request
//! of 0 us on /dev/cpu_dma_latency for the run, which keeps idle CPUs polling; cyclictest
//! makes the same request unless run with `--laptop`, so compare like with like. A guest
//! without a cpuidle driver halts all the same (at L2 over an emulated L1, 0.99 HLT exits per
//! 1 ms timer with idle=poll). `idle=spin` never idles: the thread polls its non-blocking
//! timerfd until the timer has fired, so an operation's exits are the timer's programming
//! and its interrupt, with no halt: the probe that takes the interrupt exit group.

use super::{CpuPool, Defaults, Probe, ProbeError, Session, Spec, ALL_ARCHES};
use crate::clock::mono_ns;
use crate::output::Better;
use crate::params::{Default, Kind, ParamSpec, Params};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub struct Timer;
pub static TIMER: Timer = Timer;

static SPEC: Spec = Spec {
    name: "timer",
    summary: "one-shot timer a short delay ahead: wake-up lateness",
    mechanism: "timer programming and timer interrupt injection",
    unit: "ns",
    better: Better::Lower,
    throughput_unit: None,
    params: &[
        ParamSpec {
            name: "variant",
            default: Default::Str("nanosleep"),
            help: "nanosleep: clock_nanosleep(TIMER_ABSTIME); timerfd: timerfd_settime + read",
            kind: Kind::Choice(&["nanosleep", "timerfd"]),
        },
        ParamSpec {
            name: "delay_us",
            default: Default::Int(1000),
            help: "how far ahead the timer is armed, in microseconds",
            kind: Kind::Int { min: 1, max: 1_000_000 },
        },
        ParamSpec {
            name: "idle",
            default: Default::Str("halt"),
            help: "halt: the idle CPU may halt; poll: hold /dev/cpu_dma_latency at 0 us during the run, \
                   as cyclictest does by default (needs root); spin: never idle, poll the timerfd \
                   until it fires (variant=timerfd)",
            kind: Kind::Choice(&["halt", "poll", "spin"]),
        },
    ],
    needs_root: false,
    arches: ALL_ARCHES,
    defaults: Defaults { runs: 5, iterations: 250, duration_s: 0.3, warmup: 10 },
};

struct TimerSession {
    delay_ns: u64,
    tfd: Option<OwnedFd>,
    cpu: usize,
    // Held open for the session: the kernel drops the latency request when it is closed.
    _idle_poll: Option<std::fs::File>,
}

/// Ask the kernel for 0 us wake-up latency (PM QoS), which keeps idle CPUs out of halt.
fn hold_zero_dma_latency() -> Result<std::fs::File, ProbeError> {
    use std::io::Write;
    const PATH: &str = "/dev/cpu_dma_latency";
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(PATH)
        .map_err(|source| ProbeError::NoPmQos { path: PATH, source })?;
    f.write_all(&0i32.to_ne_bytes()).map_err(|e| ProbeError::io(format!("idle=poll: writing {PATH}"), e))?;
    Ok(f)
}

impl Probe for Timer {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn validate(&self, params: &Params) -> Result<(), ProbeError> {
        if params.str("idle") == "spin" && params.str("variant") != "timerfd" {
            return Err(ProbeError::SpinNeedsTimerfd);
        }
        Ok(())
    }

    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError> {
        crate::affinity::pin(&[pool.first()])?;
        let spin = params.str("idle") == "spin";
        let tfd = if params.str("variant") == "timerfd" {
            let flags = libc::TFD_CLOEXEC | if spin { libc::TFD_NONBLOCK } else { 0 };
            // SAFETY: plain syscall; the returned fd is checked and then owned.
            let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, flags) };
            if fd < 0 {
                return Err(ProbeError::os("timerfd_create"));
            }
            // SAFETY: fd is a fresh descriptor nobody else owns.
            Some(unsafe { OwnedFd::from_raw_fd(fd) })
        } else {
            None
        };
        let idle_poll = match params.str("idle") {
            "poll" => Some(hold_zero_dma_latency()?),
            _ => None,
        };
        Ok(Box::new(TimerSession {
            delay_ns: params.int("delay_us") as u64 * 1000,
            tfd,
            cpu: pool.first(),
            _idle_poll: idle_poll,
        }))
    }
}

fn ts(ns: u64) -> libc::timespec {
    libc::timespec { tv_sec: (ns / 1_000_000_000) as _, tv_nsec: (ns % 1_000_000_000) as libc::c_long }
}

impl Session for TimerSession {
    fn cpus(&self) -> Vec<usize> {
        vec![self.cpu]
    }

    fn iterate(&mut self) -> Result<f64, ProbeError> {
        let target = mono_ns() + self.delay_ns;
        match &self.tfd {
            None => loop {
                let t = ts(target);
                // SAFETY: t is a valid timespec; the remaining-time pointer may be null with ABSTIME.
                let rc = unsafe {
                    libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &t, std::ptr::null_mut())
                };
                match rc {
                    0 => break,
                    libc::EINTR => continue,
                    e => return Err(ProbeError::io("clock_nanosleep", std::io::Error::from_raw_os_error(e))),
                }
            },
            Some(fd) => {
                let spec = libc::itimerspec { it_interval: ts(0), it_value: ts(target) };
                // SAFETY: fd is a valid timerfd; spec is a valid itimerspec; old value not wanted.
                let rc = unsafe {
                    libc::timerfd_settime(fd.as_raw_fd(), libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut())
                };
                if rc != 0 {
                    return Err(ProbeError::os("timerfd_settime"));
                }
                let mut expirations = 0u64;
                loop {
                    // SAFETY: reads 8 bytes into a valid u64.
                    let n = unsafe { libc::read(fd.as_raw_fd(), (&mut expirations as *mut u64).cast(), 8) };
                    if n == 8 {
                        break;
                    }
                    let err = std::io::Error::last_os_error();
                    // WouldBlock: idle=spin's non-blocking timerfd has not fired yet.
                    if !matches!(err.kind(), std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock) {
                        return Err(ProbeError::io("timerfd read", err));
                    }
                }
            }
        }
        let now = mono_ns();
        Ok(now.saturating_sub(target) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn voluntary_switches() -> i64 {
        // SAFETY: getrusage fills a zeroed rusage of this thread.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) }, 0);
        usage.ru_nvcsw
    }

    /// Voluntary context switches of 20 one-shot timers 200 us ahead, and their lateness.
    fn run(params: &[&str]) -> (i64, Vec<f64>) {
        let given: Vec<String> = params.iter().map(|p| p.to_string()).collect();
        let params = crate::params::resolve("timer", SPEC.params, &given).unwrap();
        TIMER.validate(&params).unwrap();
        let pool = CpuPool { cpus: vec![crate::affinity::current().unwrap_or(0)], requested: false };
        let mut s = TIMER.setup(&params, &pool).unwrap();
        let before = voluntary_switches();
        let late: Vec<f64> = (0..20).map(|_| s.iterate().unwrap()).collect();
        (voluntary_switches() - before, late)
    }

    #[test]
    fn spin_waits_for_the_timer_without_ever_sleeping() {
        // A blocking read gives up the CPU each time (a voluntary switch); spinning never does.
        let (blocked, _) = run(&["variant=timerfd", "delay_us=200"]);
        assert!(blocked >= 20, "{blocked} voluntary switches");
        let (spun, late) = run(&["variant=timerfd", "delay_us=200", "idle=spin"]);
        assert_eq!(spun, 0, "idle=spin slept {spun} times");
        assert!(late.iter().all(|&l| l >= 0.0), "{late:?}");
    }

    #[test]
    fn spin_needs_a_timerfd() {
        let given = ["idle=spin".to_string()];
        let params = crate::params::resolve("timer", SPEC.params, &given).unwrap();
        assert!(matches!(TIMER.validate(&params), Err(ProbeError::SpinNeedsTimerfd)));
    }
}
