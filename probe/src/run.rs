//! The `run` command: validate, print the header, run the runs, flush each as it completes.

use crate::output::{emit, run_lines, End, Header, Record, RunSummary, Status, StoppedBy, AGENT_VERSION, SCHEMA};
use crate::probes::{CpuPool, Ctl, Probe, ProbeError, RunErr, STOP};
use crate::stats::Stats;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};

#[derive(Debug, Clone, Default)]
pub struct RunOpts {
    pub probe: String,
    pub runs: Option<u32>,
    pub iterations: Option<u64>,
    pub duration: Option<f64>,
    pub warmup: Option<u64>,
    pub cpus: Option<String>,
    pub params: Vec<String>,
    pub timeout: Option<f64>,
    pub tsc_hz: Option<f64>,
    pub brief_env: bool,
}

/// Why a `run` invocation was refused before measuring: a usage error (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("unknown probe {name:?} (known: {known})")]
    UnknownProbe { name: String, known: String },
    #[error("invalid --runs {0}: must be in 1..1000000")]
    Runs(u32),
    #[error("invalid --iterations {0}: must be in 2..1000000000")]
    Iterations(u64),
    #[error("invalid --duration {0}: must be in (0, 86400] seconds")]
    Duration(f64),
    #[error("invalid --warmup {0}: must be at most 1000000000")]
    Warmup(u64),
    #[error("invalid --timeout {0}: must be a positive number of seconds")]
    Timeout(f64),
    #[error("invalid --tsc-hz {0}: must be a TSC rate between 1e6 and 1e11 Hz")]
    TscHz(f64),
    #[error(transparent)]
    CpuList(#[from] crate::affinity::AffinityError),
    #[error("invalid --cpus {list:?}: CPU {cpu} is not available (allowed: {allowed:?})")]
    CpuNotAllowed { list: String, cpu: usize, allowed: Vec<usize> },
    #[error(transparent)]
    Param(#[from] crate::params::ParamError),
    #[error("invalid parameters for probe {probe}: {source}")]
    Invalid { probe: &'static str, source: ProbeError },
}

/// A validated invocation.
pub struct Plan {
    pub probe: &'static dyn Probe,
    pub params: crate::params::Params,
    pub runs: u32,
    pub iterations: u64,
    pub duration: Option<f64>,
    pub warmup: u64,
    pub pool: CpuPool,
    pub timeout: Option<f64>,
    pub tsc_hz: Option<f64>,
    pub brief_env: bool,
}

/// Check everything that can be checked before measuring; errors are usage errors (exit 2).
pub fn plan(o: &RunOpts) -> Result<Plan, PlanError> {
    let probe = crate::probes::find(&o.probe).ok_or_else(|| {
        let names: Vec<&str> = crate::probes::all().iter().map(|p| p.spec().name).collect();
        PlanError::UnknownProbe { name: o.probe.clone(), known: names.join(", ") }
    })?;
    let spec = probe.spec();
    let d = spec.defaults;
    let runs = o.runs.unwrap_or(d.runs);
    if !(1..=1_000_000).contains(&runs) {
        return Err(PlanError::Runs(runs));
    }
    let iterations = o.iterations.unwrap_or(d.iterations);
    if !(2..=1_000_000_000).contains(&iterations) {
        return Err(PlanError::Iterations(iterations));
    }
    let duration = o.duration.unwrap_or(d.duration_s);
    if !duration.is_finite() || duration <= 0.0 || duration > 86_400.0 {
        return Err(PlanError::Duration(duration));
    }
    let warmup = o.warmup.unwrap_or(d.warmup);
    if warmup > 1_000_000_000 {
        return Err(PlanError::Warmup(warmup));
    }
    if let Some(t) = o.timeout {
        if !t.is_finite() || t <= 0.0 {
            return Err(PlanError::Timeout(t));
        }
    }
    if let Some(hz) = o.tsc_hz {
        // 1 MHz..100 GHz: anything outside is a typo, not a clock.
        if !hz.is_finite() || !(1e6..=1e11).contains(&hz) {
            return Err(PlanError::TscHz(hz));
        }
    }
    let allowed = crate::affinity::allowed();
    let pool = match &o.cpus {
        Some(list) => {
            let cpus = crate::affinity::parse_list(list)?;
            if let Some(bad) = cpus.iter().find(|c| !allowed.contains(c)) {
                return Err(PlanError::CpuNotAllowed { list: list.clone(), cpu: *bad, allowed });
            }
            CpuPool { cpus, requested: true }
        }
        None => {
            // Start with the CPU we are on, so single-CPU probes do not migrate at once.
            let mut cpus = allowed.clone();
            if let Some(cur) = crate::affinity::current() {
                if let Some(pos) = cpus.iter().position(|&c| c == cur) {
                    cpus.remove(pos);
                    cpus.insert(0, cur);
                }
            }
            CpuPool { cpus, requested: false }
        }
    };
    let params = crate::params::resolve(spec.name, spec.params, &o.params)?;
    probe.validate(&params).map_err(|source| PlanError::Invalid { probe: spec.name, source })?;
    Ok(Plan {
        probe,
        params,
        runs,
        iterations,
        duration: Some(duration),
        warmup,
        pool,
        timeout: o.timeout,
        tsc_hz: o.tsc_hz,
        brief_env: o.brief_env,
    })
}

static COMPLETED: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_signal(_sig: libc::c_int) {
    STOP.store(1, Ordering::Relaxed);
}

fn install_signals() {
    let handler: extern "C" fn(libc::c_int) = on_signal;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // sigaction, not signal(): its semantics are the same on every libc (signal() may
        // reset the handler after one delivery on some), and SA_RESTART keeps the pipes'
        // reads and writes from failing with EINTR while a run finishes.
        // SAFETY: a zeroed sigaction is valid; the handler only stores to an atomic, which is
        // async-signal-safe; sa_mask is emptied before use.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

fn end_line(status: Status, error: Option<String>) -> String {
    Record::End(End { status, error, runs_completed: COMPLETED.load(Ordering::SeqCst) }).to_line()
}

/// Stop every run at the deadline; if a probe is stuck in a blocking call, write the end
/// record ourselves after a grace period and exit.
fn start_watchdog(timeout: f64) {
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs_f64(timeout));
        STOP.store(2, Ordering::SeqCst);
        std::thread::sleep(std::time::Duration::from_secs(2));
        let msg = format!("--timeout {timeout} s reached and the probe did not stop");
        if matches!(emit(&end_line(Status::Timeout, Some(msg)), true), Ok(true)) {
            // SAFETY: _exit ends the process at once; the stream has been flushed.
            unsafe { libc::_exit(1) };
        }
    });
}

/// Run the plan; returns the exit code (0 when the end status is ok).
pub fn execute(p: Plan) -> i32 {
    install_signals();
    if let Some(t) = p.timeout {
        start_watchdog(t);
    }
    if let Some(hz) = p.tsc_hz {
        crate::clock::set_tsc_hz(hz);
    }
    let spec = p.probe.spec();
    let header = Header {
        schema: SCHEMA.into(),
        agent_version: AGENT_VERSION.into(),
        probe: spec.name.into(),
        unit: spec.unit.into(),
        better: spec.better,
        throughput_unit: spec.throughput_unit.map(String::from),
        mechanism: spec.mechanism.into(),
        params: p.params.0.clone(),
        runs: p.runs,
        iterations: p.iterations,
        duration_s: p.duration,
        warmup: p.warmup,
        timeout_s: p.timeout,
        cpus: p.pool.requested.then(|| p.pool.cpus.clone()),
        started_at: crate::clock::utc_now_rfc3339(),
        boot_id: crate::env::boot_id(),
        env: if p.brief_env { crate::env::fingerprint_brief() } else { crate::env::fingerprint() },
    };
    if emit(&Record::Header(Box::new(header)).to_line(), false).is_err() {
        return 1;
    }
    let (status, error) = match run_all(&p) {
        Ok(()) => (Status::Ok, None),
        Err(RunErr::Abort) => match STOP.load(Ordering::SeqCst) {
            2 => (Status::Timeout, Some(format!("--timeout {} s reached", p.timeout.unwrap_or(0.0)))),
            _ => (Status::Interrupted, Some("interrupted by a signal".into())),
        },
        Err(e) => (Status::Error, Some(e.to_string())),
    };
    let _ = emit(&end_line(status, error), true);
    i32::from(status != Status::Ok)
}

fn run_all(p: &Plan) -> Result<(), RunErr> {
    let spec = p.probe.spec();
    let mut session = p.probe.setup(&p.params, &p.pool).map_err(RunErr::Setup)?;
    let cpus = session.cpus();
    for run in 0..p.runs {
        let steal0 = crate::env::steal_ticks(Some(&cpus));
        let mut ctl = Ctl::new(p.warmup, p.iterations, p.duration);
        session.run(&mut ctl).map_err(|e| match e {
            RunErr::Fail(source) => RunErr::InRun { run, source },
            a => a,
        })?;
        let steal1 = crate::env::steal_ticks(Some(&cpus));
        let stats = Stats::of(&ctl.values).ok_or(RunErr::NoValues(run))?;
        let wall_s = ctl.wall_ns as f64 / 1e9;
        let ops = (wall_s > 0.0).then(|| stats.n as f64 / wall_s);
        let throughput = spec.throughput_unit.and_then(|_| session.throughput(stats.n, wall_s, &ctl.values));
        let extra: BTreeMap<String, f64> =
            session.extra(&ctl.values).into_iter().filter(|(_, v)| v.is_finite()).collect();
        let summary = RunSummary {
            run,
            n: stats.n as u64,
            mean: stats.mean,
            median: stats.median,
            stddev: stats.stddev,
            min: stats.min,
            max: stats.max,
            p95: stats.p95,
            p99: stats.p99,
            wall_s,
            ops_per_sec: ops,
            throughput,
            throughput_unit: spec.throughput_unit.map(String::from),
            steal_ticks: steal0.zip(steal1).map(|(a, b)| b.saturating_sub(a)),
            cpus: cpus.clone(),
            stopped_by: if ctl.stopped_by_duration { StoppedBy::Duration } else { StoppedBy::Iterations },
            extra,
        };
        let text = run_lines(run, spec.unit, &ctl.warm, &ctl.values, summary);
        // One write and flush per run: a kill leaves whole runs or a torn last line.
        match emit(&text, false) {
            Ok(true) => {
                COMPLETED.fetch_add(1, Ordering::SeqCst);
            }
            Ok(false) => return Err(RunErr::Abort),
            Err(e) => return Err(RunErr::Stdout(e)),
        }
    }
    Ok(())
}
