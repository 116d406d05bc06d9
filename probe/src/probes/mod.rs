//! Probes: one file each, each a `Probe` (its declaration and setup) returning a `Session`
//! (the thing that measures one iteration). The generic driver in `Ctl` runs iterations,
//! warm-up, and the iterations-or-duration stop rule, so probes stay small.

use crate::clock::mono_ns;
use crate::output::{Better, ProbeInfo};
use crate::params::{ParamSpec, Params};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};

pub mod cpu;
#[cfg(target_arch = "x86_64")]
pub mod cpuid;
pub mod ctxswitch;
pub mod exec;
pub mod halt;
pub mod http;
pub mod io;
pub mod memcache;
pub mod memory;
pub mod mmio;
pub mod net;
pub mod noise;
pub mod pagefault;
pub mod pingpong;
#[cfg(target_arch = "x86_64")]
pub mod portio;
pub mod relay;
mod roundtrip;
pub mod spin;
pub mod syscall;
pub mod threads;
pub mod timer;
pub mod wakeup;
pub mod write;

pub const ALL_ARCHES: &[&str] = &["x86_64", "aarch64", "s390x"];

/// Default run shape of a probe: short, so that a quick suite of every probe stays short.
#[derive(Debug, Clone, Copy)]
pub struct Defaults {
    pub runs: u32,
    pub iterations: u64,
    pub duration_s: f64,
    pub warmup: u64,
}

pub struct Spec {
    pub name: &'static str,
    pub summary: &'static str,
    pub mechanism: &'static str,
    pub unit: &'static str,
    pub better: Better,
    pub throughput_unit: Option<&'static str>,
    pub params: &'static [ParamSpec],
    pub needs_root: bool,
    pub arches: &'static [&'static str],
    pub defaults: Defaults,
}

impl Spec {
    pub fn info(&self) -> ProbeInfo {
        ProbeInfo {
            name: self.name.into(),
            summary: self.summary.into(),
            mechanism: self.mechanism.into(),
            unit: self.unit.into(),
            better: self.better,
            throughput_unit: self.throughput_unit.map(String::from),
            params: self.params.iter().map(|p| p.info()).collect(),
            needs_root: self.needs_root,
            arches: self.arches.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// CPUs a probe may use: the `--cpus` list, else the allowed CPUs starting with the current one.
#[derive(Debug, Clone)]
pub struct CpuPool {
    pub cpus: Vec<usize>,
    pub requested: bool,
}

impl CpuPool {
    pub fn first(&self) -> usize {
        self.cpus[0]
    }

    /// Two CPUs, distinct when the pool has two.
    pub fn two(&self) -> (usize, usize) {
        (self.cpus[0], *self.cpus.get(1).unwrap_or(&self.cpus[0]))
    }

    /// Where a client and its server run when `--cpus` was given: the client on the first
    /// CPU, the server on the second (the first again with one). None: nothing is pinned.
    pub fn path(&self) -> Option<(usize, usize)> {
        self.requested.then(|| self.two())
    }
}

/// The run summary's record of a pinned client and server (`CpuPool::path`): which CPUs
/// carried the measured requests, so a host-side profile can be split by them.
pub fn path_extra(path: Option<(usize, usize)>) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    if let Some((client, server)) = path {
        m.insert("client_cpu".into(), client as f64);
        m.insert("server_cpu".into(), server as f64);
    }
    m
}

/// What went wrong in a probe: a parameter rule it checks itself (a usage error), or a
/// failure while setting up or measuring (the end record's `error`).
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// A system call or an I/O operation failed; `what` names it, or the file, address or
    /// program it was done to.
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    /// An I/O error with nothing to add.
    #[error(transparent)]
    Bare(#[from] std::io::Error),
    #[error(transparent)]
    Affinity(#[from] crate::affinity::AffinityError),
    /// Another error, with what it happened to in front.
    #[error("{what}: {source}")]
    Context { what: String, source: Box<ProbeError> },

    // Parameter rules, checked before anything runs.
    #[error("`cmd` names no program")]
    NoProgram,
    #[error("`server` names no program")]
    NoServerProgram,
    #[error("give one of `time_line`, `value_line` and `values_prefix`, not both")]
    ExecModes,
    #[error("`rate_line` goes with `values_prefix`")]
    RateLineAlone,
    #[error("`env` takes NAME=VALUE pairs, not {0:?}")]
    BadEnv(String),
    #[error("block_size must be a multiple of 512, got {0}")]
    BlockSize(i64),
    #[error("file_mb is smaller than one block")]
    FileTooSmall,
    #[error("buffer ({cap}) must be at least len ({len})")]
    BufferTooSmall { cap: i64, len: i64 },
    #[error("`away` needs {need} addresses for {relays} relays (places 1, 3, ...)")]
    AwayCount { need: usize, relays: usize },
    #[error("`listen` needs {0} addresses (the master and this agent's forwarders)")]
    ListenCount(usize),
    #[error("block_kb must be a power of two, got {0}")]
    BlockKb(i64),
    #[error("`host` needs a `port`")]
    HostWithoutPort,
    #[error("pingpong needs two CPUs (both sides spin): give --cpus with two CPUs")]
    NeedsTwoCpus,
    #[error("idle=spin polls a timerfd: give variant=timerfd")]
    SpinNeedsTimerfd,

    // Failures while setting up or measuring.
    #[error("{prog} exited with {status}: {last}")]
    Exited { prog: String, status: std::process::ExitStatus, last: String },
    #[error("{prog} printed no line starting with {prefix:?}")]
    NoLine { prog: String, prefix: String },
    #[error("{prog} printed {n} line(s) starting with {prefix:?}; need at least 2")]
    TooFewValues { prog: String, n: usize, prefix: String },
    #[error("unreadable value line {0:?}")]
    UnreadableLine(String),
    #[error("idle=poll needs write access to {path} (root): {source}")]
    NoPmQos { path: &'static str, source: std::io::Error },
    #[error("mmio: no QEMU PCI test device (1b36:0005): {0}")]
    NoTestDevice(&'static str),
    #[error("mmio: {0} gives no memory BAR 0")]
    NoMmioBar(String),
    #[error("portio: ioperm({port:#x}): {source}: {hint}")]
    NoPortIo { port: u16, hint: &'static str, source: std::io::Error },
    #[error("O_DIRECT is not supported in {0} (tmpfs?): pass --param dir=DIR on a disk filesystem")]
    NoDirectIo(String),
    #[error("out of memory for the I/O buffer")]
    NoIoBuffer,
    #[error("cannot allocate {0} bytes")]
    Alloc(usize),
    #[error(transparent)]
    BadLayout(#[from] std::alloc::LayoutError),
    #[error("buffer of {bytes} bytes: {source}")]
    Layout { bytes: usize, source: std::alloc::LayoutError },
    #[error("{what}: unexpected reply {line:?}")]
    UnexpectedReply { what: &'static str, line: String },
    #[error("get: bad VALUE line")]
    BadValueLine,
    #[error("memcached closed the connection")]
    MemcachedClosed,
    #[error("connection closed")]
    Closed,
    #[error("connection closed in the headers")]
    ClosedInHeaders,
    #[error("HTTP status {0:?}")]
    HttpStatus(String),
    #[error("response without Content-Length")]
    NoContentLength,
    #[error("unknown test")]
    UnknownTest,
    #[error("relay ring returned message {got} for {sent}")]
    RingOrder { got: u32, sent: u32 },
    #[error("{prog} did not start ({status}): {last}")]
    ServerDied { prog: String, status: std::process::ExitStatus, last: String },
    #[error("{prog} did not accept on {addr} within 20 s")]
    ServerSilent { prog: String, addr: String },
    #[error("{0} panicked")]
    Panicked(&'static str),
    #[error("partner thread died")]
    PartnerDied,
    #[error("threads runs whole phases, not single iterations")]
    WholePhases,
}

impl ProbeError {
    /// An I/O error and what it happened to.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        ProbeError::Io { what: what.into(), source }
    }

    /// The calling thread's last OS error (errno), after the call `what` failed.
    pub fn os(what: impl Into<String>) -> Self {
        Self::io(what, std::io::Error::last_os_error())
    }

    /// This error with what it happened to in front.
    pub fn context(self, what: impl Into<String>) -> Self {
        ProbeError::Context { what: what.into(), source: Box::new(self) }
    }
}

/// Why a run stopped early.
#[derive(Debug, thiserror::Error)]
pub enum RunErr {
    /// A signal or the --timeout asked every run to stop.
    #[error("stopped by a signal or --timeout")]
    Abort,
    #[error(transparent)]
    Fail(#[from] ProbeError),
    #[error("setup: {0}")]
    Setup(ProbeError),
    #[error("run {run}: {source}")]
    InRun { run: u32, source: ProbeError },
    #[error("run {0}: no measured iterations")]
    NoValues(u32),
    #[error("writing stdout: {0}")]
    Stdout(std::io::Error),
}

/// 0 = running, 1 = interrupted by a signal, 2 = --timeout reached.
pub static STOP: AtomicU8 = AtomicU8::new(0);

pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed) != 0
}

/// One measuring session of a probe (set up once, then run once per run).
pub trait Session {
    /// CPUs the session actually uses.
    fn cpus(&self) -> Vec<usize>;
    /// Measure one iteration, in the probe's unit.
    fn iterate(&mut self) -> Result<f64, ProbeError>;
    /// Run one run; the default drives `iterate`.
    fn run(&mut self, ctl: &mut Ctl) -> Result<(), RunErr> {
        ctl.drive(|| self.iterate())
    }
    /// Throughput in the probe's throughput unit (only asked when it declares one); by
    /// default operations per second of the measured part of the run.
    fn throughput(&self, n: usize, wall_s: f64, _values: &[f64]) -> Option<f64> {
        (wall_s > 0.0).then(|| n as f64 / wall_s)
    }
    /// Probe-specific figures for the summary (e.g. ns equivalents of cycles).
    fn extra(&self, _values: &[f64]) -> BTreeMap<String, f64> {
        BTreeMap::new()
    }
}

pub trait Probe: Sync {
    fn spec(&self) -> &'static Spec;
    /// Rules that one parameter's range cannot say (a power of two, one parameter against
    /// another), checked before anything runs so that a bad value is a usage error.
    fn validate(&self, _params: &Params) -> Result<(), ProbeError> {
        Ok(())
    }
    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError>;
}

/// An empty buffer of `capacity` values whose every page is already in memory. A page
/// first written inside the measured loop costs a page fault there, and the iteration after
/// it was slow: every 512th one (a 4 KiB page of 8-byte values) in every run of the syscall
/// probe, which the artifact checks reported as slow indices 511, 1023, ... in nearly every
/// run, an artifact of the agent's own.
fn prefaulted(capacity: usize) -> Vec<f64> {
    let mut values = Vec::with_capacity(capacity);
    values.resize(capacity, 0.0);
    // The zeros are never read: without this the compiler may drop the writes that fault
    // the pages in.
    std::hint::black_box(&mut values);
    values.clear();
    values
}

/// Iteration control of one run.
pub struct Ctl {
    pub warmup: u64,
    pub iterations: u64,
    pub duration_ns: Option<u64>,
    pub warm: Vec<f64>,
    pub values: Vec<f64>,
    pub wall_ns: u64,
    pub stopped_by_duration: bool,
}

impl Ctl {
    pub fn new(warmup: u64, iterations: u64, duration_s: Option<f64>) -> Ctl {
        Ctl {
            warmup,
            iterations,
            duration_ns: duration_s.map(|d| (d * 1e9) as u64),
            warm: prefaulted(warmup.min(1 << 20) as usize),
            values: prefaulted(iterations.min(1 << 20) as usize),
            wall_ns: 0,
            stopped_by_duration: false,
        }
    }

    /// Run warm-up then measured iterations of `f`. The run stops at `iterations` or when
    /// `duration` has elapsed (after at least two measured values, so a run always has a
    /// standard deviation). The clock is read at a stride that doubles while checks come
    /// less than 1 ms apart, so cheap iterations pay almost nothing for the check.
    pub fn drive(&mut self, mut f: impl FnMut() -> Result<f64, ProbeError>) -> Result<(), RunErr> {
        let t0 = mono_ns();
        let warm_deadline = self.duration_ns.map(|d| t0 + d);
        let mut stride = Stride::default();
        let mut i = 0u64;
        while i < self.warmup {
            if stop_requested() {
                return Err(RunErr::Abort);
            }
            if stride.due(i) {
                let now = mono_ns();
                stride.adapt(now);
                if warm_deadline.is_some_and(|d| now >= d) {
                    break;
                }
            }
            self.warm.push(f()?);
            i += 1;
        }
        let start = mono_ns();
        let deadline = self.duration_ns.map(|d| start + d);
        let mut stride = Stride::default();
        let mut i = 0u64;
        while i < self.iterations {
            if stop_requested() {
                return Err(RunErr::Abort);
            }
            if i >= 2 && stride.due(i) {
                let now = mono_ns();
                stride.adapt(now);
                if deadline.is_some_and(|d| now >= d) {
                    self.stopped_by_duration = true;
                    break;
                }
            }
            self.values.push(f()?);
            i += 1;
        }
        self.wall_ns = mono_ns() - start;
        Ok(())
    }
}

struct Stride {
    every: u64,
    last: u64,
}

impl Default for Stride {
    fn default() -> Self {
        Stride { every: 1, last: mono_ns() }
    }
}

impl Stride {
    fn due(&self, i: u64) -> bool {
        i.is_multiple_of(self.every)
    }

    fn adapt(&mut self, now: u64) {
        if now - self.last < 1_000_000 && self.every < 1024 {
            self.every *= 2;
        }
        self.last = now;
    }
}

/// Every probe compiled for this architecture, in listing order.
pub fn all() -> Vec<&'static dyn Probe> {
    vec![
        #[cfg(target_arch = "x86_64")]
        &cpuid::CPUID,
        &syscall::SYSCALL,
        &write::WRITE,
        &timer::TIMER,
        &wakeup::WAKEUP,
        &pingpong::PINGPONG,
        &ctxswitch::CTXSWITCH,
        &pagefault::PAGEFAULT,
        &cpu::CPU,
        &threads::THREADS,
        &memory::MEMORY,
        &io::IO,
        #[cfg(target_arch = "x86_64")]
        &portio::PORTIO,
        &mmio::MMIO,
        &halt::HALT,
        &net::TCP_RR,
        &net::TCP_STREAM,
        &net::TCP_MAERTS,
        &relay::RELAY,
        &http::HTTP,
        &memcache::MEMCACHE,
        &exec::EXEC,
        &spin::SPIN,
    ]
}

pub fn find(name: &str) -> Option<&'static dyn Probe> {
    all().into_iter().find(|p| p.spec().name == name)
}

/// Per-op helper shared by syscall-like probes: elapsed ticks minus the measured overhead
/// of an empty start/stop pair, in ns, never below zero.
#[inline(always)]
pub fn net_ns(start: u64, stop: u64, overhead_ticks: f64, ns_per_tick: f64) -> f64 {
    ((stop.wrapping_sub(start) as f64 - overhead_ticks) * ns_per_tick).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drive_stops_at_iterations_or_duration() {
        let mut ctl = Ctl::new(3, 10, Some(10.0));
        ctl.drive(|| Ok(1.0)).unwrap();
        assert_eq!((ctl.warm.len(), ctl.values.len(), ctl.stopped_by_duration), (3, 10, false));

        let mut ctl = Ctl::new(0, 1_000_000, Some(0.02));
        ctl.drive(|| {
            std::thread::sleep(std::time::Duration::from_millis(1));
            Ok(1.0)
        })
        .unwrap();
        assert!(ctl.stopped_by_duration);
        assert!(ctl.values.len() >= 2 && ctl.values.len() < 1000);
    }

    /// Page faults of this thread so far (minor ones: a first touch of a page).
    fn minor_faults() -> i64 {
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage writes one rusage into the pointer it is given.
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) }, 0);
        usage.ru_minflt
    }

    #[test]
    fn the_measured_loop_touches_no_new_page() {
        // 100,000 values are 196 pages: each one faulted inside the loop unless the buffer's
        // pages are in memory before it starts.
        let mut ctl = Ctl::new(1000, 100_000, None);
        let before = minor_faults();
        ctl.drive(|| Ok(1.0)).unwrap();
        let during = minor_faults() - before;
        assert_eq!(ctl.values.len(), 100_000);
        assert!(during < 20, "{during} page faults inside the measured loop");
    }

    #[test]
    fn errors_read_as_the_messages_the_controller_knows() {
        let pin = crate::affinity::AffinityError::Pin {
            cpus: vec![9999],
            source: std::io::Error::from_raw_os_error(libc::EINVAL),
        };
        let cases: Vec<(String, &str)> = vec![
            (RunErr::Setup(pin.into()).to_string(), "setup: sched_setaffinity [9999]: Invalid argument (os error 22)"),
            (
                RunErr::InRun {
                    run: 3,
                    source: ProbeError::io("pipe", std::io::Error::from_raw_os_error(libc::EPIPE)),
                }
                .to_string(),
                "run 3: pipe: Broken pipe (os error 32)",
            ),
            (RunErr::NoValues(0).to_string(), "run 0: no measured iterations"),
            (ProbeError::Closed.context("GET /x").to_string(), "GET /x: connection closed"),
            (
                ProbeError::NoLine { prog: "ab".into(), prefix: "T:".into() }.to_string(),
                "ab printed no line starting with \"T:\"",
            ),
            (
                ProbeError::AwayCount { need: 2, relays: 3 }.to_string(),
                "`away` needs 2 addresses for 3 relays (places 1, 3, ...)",
            ),
            (ProbeError::RingOrder { got: 7, sent: 8 }.to_string(), "relay ring returned message 7 for 8"),
            (
                crate::params::resolve("t", &[], &["k=v".into()]).unwrap_err().to_string(),
                "unknown parameter \"k\" for probe t: it takes no parameters",
            ),
            (
                crate::affinity::parse_list("1-0").unwrap_err().to_string(),
                "invalid CPU list \"1-0\" (expected e.g. 0 or 0,2 or 0-3)",
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
    }

    #[test]
    fn every_probe_declares_unique_name_and_defaults() {
        let names: std::collections::BTreeSet<_> = all().iter().map(|p| p.spec().name).collect();
        assert_eq!(names.len(), all().len());
        for p in all() {
            let s = p.spec();
            assert!(s.defaults.iterations >= 2 && s.defaults.runs >= 1, "{}", s.name);
            crate::params::resolve(s.name, s.params, &[]).unwrap();
        }
    }
}
