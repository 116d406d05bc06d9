//! `exits start` / `exits stop`: count a KVM guest's VM exits by reason, and the time KVM
//! spent handling them, with in-kernel tracefs histogram triggers. Nothing is streamed to
//! user space: the kernel keeps one counter per exit reason and `stop` reads the totals.
//!
//! It runs on the machine whose KVM runs the measured guest (the host, a vmtax L1 guest
//! through its host-side port, an SSH host). `start` sets up a tracefs instance of our own
//! (`instances/vmtax`) and a synthetic event, all filtered to the guest's vCPU threads
//! (`CPU n/KVM` of its qemu-system process):
//!
//! - `kvm:kvm_exit`: `hist:keys=exit_reason,vcpu_id` counts exits by reason and vCPU;
//! - `kvm:kvm_exit`: `hist:keys=common_pid:ts0=common_timestamp,r=exit_reason` remembers
//!   when and why each vCPU thread last left its guest;
//! - `kvm:kvm_entry`: on the next entry of the same thread, `onmatch(kvm.kvm_exit)` emits
//!   the synthetic event `vmtax_exit(reason, lat, vcpu)` with `lat` = entry - exit in ns (a
//!   variable is read once, so each exit pairs with exactly the next entry);
//! - `synthetic:vmtax_exit`: `hist:keys=reason,vcpu:vals=hitcount,lat if lat < LAT_LIMIT_NS` sums
//!   the handling time, and a second histogram counts by reason the exits whose `lat` is not
//!   below the limit: an entry stamped before its exit, so `lat` wrapped below zero. The
//!   ring buffer can stamp an event with an earlier time than it happened (an event that
//!   interrupts another's reservation takes the buffer's last stamp), and under load a
//!   short HLT then came out negative even with one clock for all CPUs. Those exits are
//!   counted but left out of the time (`untimed`); the rest of the sum stays right.
//!
//! The vCPU key (`vcpu_id`, KVM's index of the vCPU, which is QEMU's CPU number) lets a
//! profile say which vCPU made each exit; a kernel whose `kvm_exit` has no `vcpu_id` field
//! (before Linux 5.11) gets the same histograms keyed by reason alone.
//!
//! `stop` reads both histograms, prints one JSON object and removes everything `start` set up.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

pub const INSTANCE: &str = "vmtax";
pub const SYNTH: &str = "vmtax_exit";
const TRACEFS_CANDIDATES: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];
/// A handling time at or above this (about 11.6 days) is a wrapped negative, not a time.
pub const LAT_LIMIT_NS: u64 = 1_000_000_000_000_000;

/// One entry of a histogram: its keys and values, by field name.
#[derive(Debug, Default, PartialEq)]
pub struct HistEntry {
    pub keys: BTreeMap<String, u64>,
    pub vals: BTreeMap<String, u64>,
}

/// One histogram of an event's `hist` file (an event may carry several).
#[derive(Debug, Default, PartialEq)]
pub struct Hist {
    pub trigger: String,
    pub entries: Vec<HistEntry>,
    pub hits: u64,
    pub dropped: u64,
}

/// Parse the text of a tracefs `hist` file: one `Hist` per `# trigger info:` section.
///
/// Entries look like `{ exit_reason:        114 } hitcount:     101356  lat:  7093726` and a
/// section ends with `Totals:` / `Hits:` / `Entries:` / `Dropped:`. Keys printed with a
/// modifier (e.g. `.hex`) or symbolically are kept when they parse as numbers.
pub fn parse_hist(text: &str) -> Vec<Hist> {
    let mut out: Vec<Hist> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(info) = line.strip_prefix("# trigger info:") {
            out.push(Hist { trigger: info.trim().to_string(), ..Hist::default() });
            continue;
        }
        let Some(cur) = out.last_mut() else { continue };
        if let Some(rest) = line.strip_prefix('{') {
            let Some((keys, vals)) = rest.split_once('}') else { continue };
            cur.entries.push(HistEntry { keys: pairs(keys, ','), vals: pairs(vals, ' ') });
        } else if let Some(v) = line.strip_prefix("Hits:") {
            cur.hits = v.trim().parse().unwrap_or(0);
        } else if let Some(v) = line.strip_prefix("Dropped:") {
            cur.dropped = v.trim().parse().unwrap_or(0);
        }
    }
    out
}

/// `name: value` pairs; keys are separated by commas, values by whitespace.
fn pairs(text: &str, sep: char) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    if sep == ',' {
        for part in text.split(',') {
            if let Some((k, v)) = part.split_once(':') {
                if let Some(n) = number(v) {
                    out.insert(k.trim().to_string(), n);
                }
            }
        }
        return out;
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut i = 0;
    while i + 1 < words.len() {
        if let Some(name) = words[i].strip_suffix(':') {
            if let Some(n) = number(words[i + 1]) {
                out.insert(name.to_string(), n);
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    out
}

fn number(text: &str) -> Option<u64> {
    let t = text.split_whitespace().next()?;
    match t.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => t.parse().ok(),
    }
}

/// Whether a thread name is a KVM vCPU thread of QEMU (`CPU 0/KVM`).
pub fn is_vcpu_thread(comm: &str) -> bool {
    let c = comm.trim();
    c.strip_prefix("CPU ")
        .and_then(|r| r.strip_suffix("/KVM"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// A trigger filter that keeps only events of these threads.
pub fn pid_filter(pids: &[u32]) -> String {
    let terms: Vec<String> = pids.iter().map(|p| format!("common_pid == {p}")).collect();
    format!("if {}", terms.join(" || "))
}

/// The synthetic event's definition: with the vCPU when the kvm events carry it.
pub fn synth_definition(by_vcpu: bool) -> String {
    if by_vcpu {
        format!("{SYNTH} u32 reason; u64 lat; u32 vcpu")
    } else {
        format!("{SYNTH} u32 reason; u64 lat")
    }
}

/// The triggers `start` writes, in the order it writes them (event path, trigger text).
/// Without `timed`, only the count per reason (one trigger instead of five). With `by_vcpu`
/// every histogram is keyed by the vCPU too (`kvm_entry` hands its `vcpu_id` to the
/// synthetic event).
pub fn triggers(pids: &[u32], size: Option<u32>, timed: bool, by_vcpu: bool) -> Vec<(&'static str, String)> {
    let f = pid_filter(pids);
    let sz = size.map(|s| format!(":size={s}")).unwrap_or_default();
    let (exit_key, synth_key, vcpu_arg) =
        if by_vcpu { ("exit_reason,vcpu_id", "reason,vcpu", ",vcpu_id") } else { ("exit_reason", "reason", "") };
    let count = ("kvm/kvm_exit", format!("hist:keys={exit_key}:vals=hitcount:sort=exit_reason{sz} {f}"));
    if !timed {
        return vec![count];
    }
    vec![
        (
            "synthetic/vmtax_exit",
            format!("hist:keys={synth_key}:vals=hitcount,lat:sort=reason{sz} if lat < {LAT_LIMIT_NS}"),
        ),
        (
            "synthetic/vmtax_exit",
            format!("hist:keys={synth_key}:vals=hitcount:sort=reason{sz} if lat >= {LAT_LIMIT_NS}"),
        ),
        ("kvm/kvm_exit", format!("hist:keys=common_pid:ts0=common_timestamp,r=exit_reason{sz} {f}")),
        (
            "kvm/kvm_entry",
            format!(
                "hist:keys=common_pid:lat=common_timestamp-$ts0,rr=$r{sz}:onmatch(kvm.kvm_exit).trace({SYNTH},$rr,$lat{vcpu_arg}) {f}"
            ),
        ),
        count,
    ]
}

/// Whether both kvm events of this kernel carry the vCPU's index (`vcpu_id`).
fn events_have_vcpu(root: &Path) -> bool {
    ["kvm/kvm_exit", "kvm/kvm_entry"].iter().all(|ev| {
        fs::read_to_string(root.join("events").join(ev).join("format"))
            .is_ok_and(|f| f.lines().any(|l| l.contains(" vcpu_id;")))
    })
}

/// The command that removes a trigger as the `trigger` file lists it.
pub fn removal(listed: &str) -> Option<String> {
    let t = listed.trim();
    if t.is_empty() || t.starts_with('#') {
        return None;
    }
    let t = t.strip_suffix("[active]").or_else(|| t.strip_suffix("[paused]")).unwrap_or(t).trim_end();
    Some(format!("!{t}"))
}

/// The profile `stop` prints.
#[derive(Debug, Default, PartialEq, serde::Serialize)]
pub struct Profile {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub isa: String,
    pub reasons: Vec<Reason>,
    pub hits: u64,
    pub timed: u64,
    pub untimed: u64,
    pub dropped: u64,
    pub complete: bool,
    pub problems: Vec<String>,
    pub threads: Vec<u32>,
    pub window_ns: Option<u64>,
    /// The same reasons per vCPU (KVM's `vcpu_id`), when the histograms were keyed by it.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub by_vcpu: BTreeMap<String, Vec<Reason>>,
}

#[derive(Debug, Default, Clone, PartialEq, serde::Serialize)]
pub struct Reason {
    pub code: u64,
    pub count: u64,
    pub time_ns: u64,
    pub timed: u64,
    pub untimed: u64,
}

/// The vCPU of a histogram entry keyed by it (`vcpu_id` on kvm_exit, `vcpu` on ours).
fn vcpu_of(e: &HistEntry) -> Option<u64> {
    e.keys.get("vcpu_id").or_else(|| e.keys.get("vcpu")).copied()
}

/// Combine the `kvm_exit` and `vmtax_exit` hist files into a profile.
pub fn profile(exit_text: &str, synth_text: &str, isa: &str) -> Profile {
    let mut p = Profile { kind: "exits", isa: isa.to_string(), complete: true, ..Profile::default() };
    let exit_hists = parse_hist(exit_text);
    let synth_hists = parse_hist(synth_text);
    let mut by: BTreeMap<u64, Reason> = BTreeMap::new();
    // (vCPU, code) -> that vCPU's share of the reason, from histograms keyed by the vCPU.
    let mut per_vcpu: BTreeMap<(u64, u64), Reason> = BTreeMap::new();
    let mut both = |e: &HistEntry, code: u64, f: &dyn Fn(&mut Reason)| {
        f(by.entry(code).or_insert(Reason { code, ..Reason::default() }));
        if let Some(v) = vcpu_of(e) {
            f(per_vcpu.entry((v, code)).or_insert(Reason { code, ..Reason::default() }));
        }
    };
    let counts = exit_hists.iter().find(|h| h.trigger.starts_with("hist:keys=exit_reason"));
    match counts {
        Some(h) => {
            p.hits = h.hits;
            for e in &h.entries {
                if let Some(&code) = e.keys.get("exit_reason") {
                    let n = e.vals.get("hitcount").copied().unwrap_or(0);
                    both(e, code, &|r| r.count += n);
                }
            }
        }
        None => p.problems.push("the kvm_exit count histogram is missing".into()),
    }
    let timed = |h: &&Hist| h.trigger.starts_with("hist:keys=reason") && h.trigger.contains(":vals=hitcount,lat");
    match synth_hists.iter().find(timed) {
        None if synth_text.is_empty() => {} // recorded without handling times (--no-time)
        Some(h) => {
            for e in &h.entries {
                if let Some(&code) = e.keys.get("reason") {
                    let lat = e.vals.get("lat").copied().unwrap_or(0);
                    if lat > i64::MAX as u64 {
                        // A sum of u64s that went below zero: some entry read an earlier
                        // time than its exit. No total is better than a wrong one.
                        p.problems.push(format!(
                            "handling time of reason {code} went below zero (a clock that differs between CPUs)"
                        ));
                        both(e, code, &|_| {});
                        continue;
                    }
                    let n = e.vals.get("hitcount").copied().unwrap_or(0);
                    both(e, code, &|r| {
                        r.time_ns += lat;
                        r.timed += n;
                    });
                }
            }
        }
        None => p.problems.push("the handling-time histogram is missing".into()),
    }
    // Exits whose entry was stamped before them (see the module's comment): counted, untimed.
    let wrapped = |h: &&Hist| h.trigger.starts_with("hist:keys=reason") && h.trigger.contains(":vals=hitcount:");
    if let Some(h) = synth_hists.iter().find(wrapped) {
        for e in &h.entries {
            if let Some(&code) = e.keys.get("reason") {
                let n = e.vals.get("hitcount").copied().unwrap_or(0);
                both(e, code, &|r| r.untimed += n);
            }
        }
    }
    p.dropped = exit_hists.iter().chain(synth_hists.iter()).map(|h| h.dropped).sum();
    if p.dropped > 0 {
        p.problems.push(format!("{} events were dropped (histogram full)", p.dropped));
    }
    p.reasons = by.into_values().collect();
    for ((v, _), r) in per_vcpu {
        p.by_vcpu.entry(v.to_string()).or_default().push(r);
    }
    p.timed = p.reasons.iter().map(|r| r.timed).sum();
    p.untimed = p.reasons.iter().map(|r| r.untimed).sum();
    p.complete = p.problems.is_empty();
    p
}

// ---- the side effects ----------------------------------------------------------------------

pub struct StartOpts {
    pub qemu: Option<String>,
    pub pids: Vec<u32>,
    pub tracefs: Option<String>,
    pub mount: bool,
    pub size: Option<u32>,
    pub timed: bool,
}

/// Why `exits start` or `exits stop` failed (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum ExitsError {
    #[error("needs root (tracefs triggers are set up by root only)")]
    NotRoot,
    #[error("no tracefs at {} (no instances directory)", .0.display())]
    NoInstances(PathBuf),
    #[error("cannot mount tracefs on {target}: {source}")]
    Mount { target: &'static str, source: std::io::Error },
    #[error(
        "tracefs is not mounted (looked at {}); mount it with: mount -t tracefs nodev {}",
        TRACEFS_CANDIDATES.join(" and "),
        TRACEFS_CANDIDATES[0]
    )]
    NotMounted,
    #[error("no kvm:{event} event in {}: is the kvm module loaded?", .root.display())]
    NoKvmEvent { event: &'static str, root: PathBuf },
    #[error("this kernel has no synthetic events (CONFIG_SYNTH_EVENTS, CONFIG_HIST_TRIGGERS)")]
    NoSynthEvents,
    #[error("/proc: {0}")]
    Proc(std::io::Error),
    #[error("no qemu-system process is running (the guest ended before recording started?)")]
    NoQemu,
    #[error("{} qemu-system processes ({}); name one with --qemu PID", .0.len(), list(.0))]
    ManyQemu(Vec<u32>),
    #[error("--qemu takes auto or a PID, not {0:?}")]
    BadQemu(String),
    #[error("process {0} does not exist (the guest ended before recording started?)")]
    NoProcess(u32),
    #[error("process {pid} ({comm}) has no KVM vCPUs: is its guest running under accel=kvm?")]
    NoVcpus { pid: u32, comm: String },
    #[error("{}: {source}", .path.display())]
    Open { path: PathBuf, source: std::io::Error },
    #[error("writing {text:?} to {}: {source}", .path.display())]
    Write { text: String, path: PathBuf, source: std::io::Error },
    #[error("rmdir {}: {source}", .path.display())]
    Rmdir { path: PathBuf, source: std::io::Error },
    #[error("mkdir {}: {source}", .path.display())]
    Mkdir { path: PathBuf, source: std::io::Error },
    #[error("trace_clock: {0}")]
    TraceClock(std::io::Error),
    #[error("cannot remove an earlier recording: {0}")]
    Stale(Box<ExitsError>),
    #[error("no recording in progress: {0}")]
    NotRecording(String),
}

fn list(pids: &[u32]) -> String {
    pids.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ")
}

fn fail(e: ExitsError) -> i32 {
    eprintln!("vmtax-probe: error: exits: {e}");
    1
}

fn is_root() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn tracefs(explicit: Option<&str>, mount: bool) -> Result<PathBuf, ExitsError> {
    if let Some(p) = explicit {
        let p = PathBuf::from(p);
        return if p.join("instances").is_dir() { Ok(p) } else { Err(ExitsError::NoInstances(p)) };
    }
    for c in TRACEFS_CANDIDATES {
        if Path::new(c).join("instances").is_dir() {
            return Ok(PathBuf::from(c));
        }
    }
    if mount {
        let target = TRACEFS_CANDIDATES[0];
        let (src, tgt) = (std::ffi::CString::new("tracefs").unwrap(), std::ffi::CString::new(target).unwrap());
        // SAFETY: valid NUL-terminated strings, no mount data.
        let rc = unsafe { libc::mount(src.as_ptr(), tgt.as_ptr(), src.as_ptr(), 0, std::ptr::null()) };
        if rc == 0 && Path::new(target).join("instances").is_dir() {
            return Ok(PathBuf::from(target));
        }
        return Err(ExitsError::Mount { target, source: std::io::Error::last_os_error() });
    }
    Err(ExitsError::NotMounted)
}

/// svm or vmx: which vendor module drives KVM here (or, failing that, the CPU flags).
pub(crate) fn isa() -> String {
    if Path::new("/sys/module/kvm_amd").exists() {
        return "svm".into();
    }
    if Path::new("/sys/module/kvm_intel").exists() {
        return "vmx".into();
    }
    let flags = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let words: Vec<&str> = flags.lines().find(|l| l.starts_with("flags")).unwrap_or("").split_whitespace().collect();
    if words.contains(&"svm") {
        "svm".into()
    } else if words.contains(&"vmx") {
        "vmx".into()
    } else {
        "unknown".into()
    }
}

fn comm(path: &Path) -> String {
    fs::read_to_string(path.join("comm")).unwrap_or_default().trim().to_string()
}

/// The pid of the only qemu-system process.
fn auto_qemu() -> Result<u32, ExitsError> {
    let mut found = Vec::new();
    for e in fs::read_dir("/proc").map_err(ExitsError::Proc)?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if comm(&e.path()).starts_with("qemu-system") {
            found.push(pid);
        }
    }
    found.sort_unstable();
    match found.as_slice() {
        [one] => Ok(*one),
        [] => Err(ExitsError::NoQemu),
        many => Err(ExitsError::ManyQemu(many.to_vec())),
    }
}

/// The threads of process `pid` to record: its KVM vCPU threads.
///
/// QEMU names them `CPU n/KVM` only with `-name ...,debug-threads=on`; without it every
/// thread of the process is kept, which records the same exits (only a thread inside
/// KVM_RUN, a vCPU thread, hits kvm_exit). Either way the process must hold KVM vCPUs
/// (`anon_inode:kvm-vcpu:N` file descriptors).
fn vcpu_threads(pid: u32) -> Result<Vec<u32>, ExitsError> {
    let dir = PathBuf::from(format!("/proc/{pid}/task"));
    let rd = fs::read_dir(&dir).map_err(|_| ExitsError::NoProcess(pid))?;
    let tasks: Vec<(u32, String)> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()).map(|t| (t, comm(&e.path()))))
        .collect();
    let vcpus = fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("anon_inode:kvm-vcpu"))
                })
                .count()
        })
        .unwrap_or(0);
    if vcpus == 0 {
        return Err(ExitsError::NoVcpus { pid, comm: comm(Path::new(&format!("/proc/{pid}"))) });
    }
    let named: Vec<u32> = tasks.iter().filter(|(_, c)| is_vcpu_thread(c)).map(|(t, _)| *t).collect();
    let mut tids = if named.is_empty() { tasks.iter().map(|(t, _)| *t).collect() } else { named };
    tids.sort_unstable();
    Ok(tids)
}

fn append(path: &Path, text: &str) -> Result<(), ExitsError> {
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|source| ExitsError::Open { path: path.to_path_buf(), source })?;
    f.write_all(text.as_bytes()).map_err(|source| ExitsError::Write {
        text: text.to_string(),
        path: path.to_path_buf(),
        source,
    })
}

fn state_file() -> PathBuf {
    std::env::temp_dir().join(format!("vmtax-exits-{INSTANCE}.json"))
}

/// Why `exits stop` found no instance, from what `exits start` left in its state file (None:
/// no start has left one since the last stop) and this kernel's boot id: a start that never
/// ran here (or failed) is told apart from a recording that began on this boot and whose
/// instance something else removed.
fn not_recording(state: Option<&serde_json::Value>, boot: Option<&str>, now: u64) -> String {
    let here = boot.unwrap_or("unknown");
    let Some(state) = state else {
        return format!("exits start was not run on this boot (id {here}), or failed");
    };
    let began = state["boot_id"].as_str();
    let ago = state["started_ns"].as_u64().map(|s| now.saturating_sub(s) as f64 / 1e9);
    match (began, ago) {
        (Some(b), Some(ago)) if Some(b) == boot => {
            format!(
                "the recording begun {ago:.1} s ago on this boot (id {here}) is gone: its tracefs instance was removed"
            )
        }
        (Some(b), _) => format!("the last recording began on another boot (id {b}; this one is {here})"),
        _ => format!("a recording began (its state file is left) but its tracefs instance is gone (boot id {here})"),
    }
}

pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Remove every trigger of our instance, our synthetic event and the instance. Idempotent.
fn teardown(root: &Path) -> Vec<ExitsError> {
    let mut problems = Vec::new();
    let inst = root.join("instances").join(INSTANCE);
    if inst.is_dir() {
        // Entry first (it refers to kvm_exit's variables), the synthetic event's hist last.
        for ev in ["kvm/kvm_entry", "kvm/kvm_exit", "synthetic/vmtax_exit"] {
            let file = inst.join("events").join(ev).join("trigger");
            let listed = fs::read_to_string(&file).unwrap_or_default();
            // onmatch triggers and variable users go before the variables they read.
            let mut lines: Vec<&str> = listed.lines().collect();
            lines.sort_by_key(|l| !l.contains("onmatch"));
            lines.sort_by_key(|l| l.contains("ts0="));
            for l in lines {
                if let Some(cmd) = removal(l) {
                    if let Err(e) = append(&file, &cmd) {
                        problems.push(e);
                    }
                }
            }
        }
    }
    let synth = root.join("synthetic_events");
    if fs::read_to_string(&synth).unwrap_or_default().lines().any(|l| l.split_whitespace().next() == Some(SYNTH)) {
        if let Err(e) = append(&synth, &format!("!{SYNTH}")) {
            problems.push(e);
        }
    }
    if inst.is_dir() {
        if let Err(e) = fs::remove_dir(&inst) {
            problems.push(ExitsError::Rmdir { path: inst.clone(), source: e });
        }
    }
    let _ = fs::remove_file(state_file());
    problems
}

/// The qemu-system process `--qemu` names: `auto` (or nothing) is the only one there.
pub(crate) fn qemu_pid(qemu: Option<&str>) -> Result<u32, ExitsError> {
    match qemu {
        None | Some("auto") => auto_qemu(),
        Some(s) => s.parse::<u32>().map_err(|_| ExitsError::BadQemu(s.to_string())),
    }
}

pub fn start(o: &StartOpts) -> i32 {
    if !is_root() {
        return fail(ExitsError::NotRoot);
    }
    let root = match tracefs(o.tracefs.as_deref(), o.mount) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    for ev in ["kvm/kvm_exit", "kvm/kvm_entry"] {
        if !root.join("events").join(ev).is_dir() {
            return fail(ExitsError::NoKvmEvent { event: &ev[4..], root });
        }
    }
    if !root.join("synthetic_events").exists() {
        return fail(ExitsError::NoSynthEvents);
    }
    let mut pids = o.pids.clone();
    let qemu = match o.qemu.as_deref() {
        None if !pids.is_empty() => None,
        None | Some("auto") => match auto_qemu() {
            Ok(p) => Some(p),
            Err(e) => return fail(e),
        },
        Some(s) => match s.parse::<u32>() {
            Ok(p) => Some(p),
            Err(_) => return fail(ExitsError::BadQemu(s.to_string())),
        },
    };
    if let Some(q) = qemu {
        match vcpu_threads(q) {
            Ok(t) => pids.extend(t),
            Err(e) => return fail(e),
        }
    }
    pids.sort_unstable();
    pids.dedup();
    if let Some(stale) = teardown(&root).into_iter().next() {
        return fail(ExitsError::Stale(Box::new(stale)));
    }
    let inst = root.join("instances").join(INSTANCE);
    let setup = || -> Result<(), ExitsError> {
        fs::create_dir(&inst).map_err(|source| ExitsError::Mkdir { path: inst.clone(), source })?;
        // Events are only soft-enabled by the triggers; keep the unused ring buffer small.
        let _ = fs::write(inst.join("buffer_size_kb"), "4");
        // The handling time is entry - exit across the vCPU thread's migrations; the default
        // `local` clock is per CPU, and an entry on another CPU could read before its exit
        // (seen under TCG: a u64 wrapped to 1.8e19). `mono` is one clock for all CPUs.
        if o.timed && fs::write(inst.join("trace_clock"), "mono").is_err() {
            fs::write(inst.join("trace_clock"), "global").map_err(ExitsError::TraceClock)?;
        }
        let by_vcpu = events_have_vcpu(&root);
        if o.timed {
            append(&root.join("synthetic_events"), &synth_definition(by_vcpu))?;
        }
        for (ev, trig) in triggers(&pids, o.size, o.timed, by_vcpu) {
            append(&inst.join("events").join(ev).join("trigger"), &trig)?;
        }
        Ok(())
    };
    if let Err(e) = setup() {
        teardown(&root);
        return fail(e);
    }
    let boot = crate::env::boot_id();
    let state =
        serde_json::json!({"started_ns": now_ns(), "threads": pids, "qemu": qemu, "tracefs": root, "boot_id": boot});
    let _ = fs::write(state_file(), state.to_string());
    println!(
        "{}",
        serde_json::json!({"type": "exits_started", "isa": isa(), "qemu": qemu, "threads": pids, "boot_id": boot})
    );
    0
}

pub fn stop(tracefs_path: Option<&str>) -> i32 {
    if !is_root() {
        return fail(ExitsError::NotRoot);
    }
    let root = match tracefs(tracefs_path, false) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let inst = root.join("instances").join(INSTANCE);
    if !inst.is_dir() {
        let state = fs::read_to_string(state_file()).ok().and_then(|s| serde_json::from_str(&s).ok());
        return fail(ExitsError::NotRecording(not_recording(
            state.as_ref(),
            crate::env::boot_id().as_deref(),
            now_ns(),
        )));
    }
    let read = |ev: &str| fs::read_to_string(inst.join("events").join(ev).join("hist")).unwrap_or_default();
    // The count first: it is the window's end.
    let exit_text = read("kvm/kvm_exit");
    let synth_text = read("synthetic/vmtax_exit");
    let end = now_ns();
    let mut p = profile(&exit_text, &synth_text, &isa());
    if let Ok(s) = fs::read_to_string(state_file()) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&s) {
            p.threads = v["threads"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x.as_u64()).map(|x| x as u32).collect())
                .unwrap_or_default();
            p.window_ns = v["started_ns"].as_u64().map(|s| end.saturating_sub(s));
        }
    }
    // The profile goes out before the teardown: removing a trigger unregisters a tracepoint,
    // which waits on every CPU, and a nested level has hung there (a soft lockup of the
    // emulated L1, once in CI). Printed first, the counts reach the controller all the same.
    println!("{}", serde_json::to_string(&p).expect("serializable"));
    let _ = std::io::stdout().flush();
    let problems = teardown(&root);
    if !problems.is_empty() {
        let said: Vec<String> = problems.iter().map(|e| e.to_string()).collect();
        println!("{}", serde_json::json!({"type": "exits_cleanup", "problems": said}));
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_recording_says_whether_it_began_on_this_boot() {
        let none = not_recording(None, Some("b1"), 5);
        assert_eq!(none, "exits start was not run on this boot (id b1), or failed");
        let here = serde_json::json!({"started_ns": 1_000_000_000u64, "boot_id": "b1"});
        let gone = not_recording(Some(&here), Some("b1"), 3_500_000_000);
        assert_eq!(
            gone,
            "the recording begun 2.5 s ago on this boot (id b1) is gone: its tracefs instance was removed"
        );
        let other = not_recording(Some(&here), Some("b2"), 3_500_000_000);
        assert_eq!(other, "the last recording began on another boot (id b1; this one is b2)");
        let old = serde_json::json!({"started_ns": 1u64});
        assert!(not_recording(Some(&old), Some("b2"), 2).contains("its tracefs instance is gone"));
    }

    const EXIT_HIST: &str = "# event histogram
#
# trigger info: hist:keys=common_pid:vals=hitcount:ts0=common_timestamp,r=exit_reason:sort=hitcount:size=2048 if common_pid == 201 [active]
#

{ common_pid:        201 } hitcount:     101361

Totals:
    Hits: 101361
    Entries: 1
    Dropped: 0

# event histogram
#
# trigger info: hist:keys=exit_reason:vals=hitcount:sort=exit_reason:size=2048 if common_pid == 201 [active]
#

{ exit_reason:        100 } hitcount:          5
{ exit_reason:        114 } hitcount:     101356

Totals:
    Hits: 101361
    Entries: 2
    Dropped: 3
";

    const SYNTH_HIST: &str = "# event histogram
#
# trigger info: hist:keys=reason:vals=hitcount,lat:sort=reason:size=2048 if lat < 1000000000000000 [active]
#

{ reason:        114 } hitcount:     101350  lat:    7093726218

Totals:
    Hits: 101350
    Entries: 1
    Dropped: 0

# event histogram
#
# trigger info: hist:keys=reason:vals=hitcount:sort=reason:size=2048 if lat >= 1000000000000000 [active]
#

{ reason:        120 } hitcount:          1

Totals:
    Hits: 1
    Entries: 1
    Dropped: 0
";

    #[test]
    fn parses_sections_entries_and_totals() {
        let h = parse_hist(EXIT_HIST);
        assert_eq!(h.len(), 2);
        assert!(h[1].trigger.starts_with("hist:keys=exit_reason"));
        assert_eq!(h[1].entries[1].keys["exit_reason"], 114);
        assert_eq!(h[1].entries[1].vals["hitcount"], 101356);
        assert_eq!((h[1].hits, h[1].dropped), (101361, 3));
        let s = parse_hist(SYNTH_HIST);
        assert_eq!(s[0].entries[0].vals["lat"], 7093726218);
    }

    #[test]
    fn profile_joins_counts_and_times_and_marks_drops() {
        let p = profile(EXIT_HIST, SYNTH_HIST, "svm");
        assert_eq!(p.reasons.len(), 3);
        assert_eq!(p.reasons[1], Reason { code: 114, count: 101356, time_ns: 7093726218, timed: 101350, untimed: 0 });
        assert_eq!(p.reasons[0].time_ns, 0);
        // A HLT whose entry was stamped before its exit is left out of the time, not the count.
        assert_eq!((p.reasons[2].code, p.reasons[2].untimed, p.reasons[2].timed), (120, 1, 0));
        assert_eq!((p.timed, p.untimed), (101350, 1));
        assert_eq!(p.dropped, 3);
        assert!(!p.complete);
        let clean = profile(&EXIT_HIST.replace("Dropped: 3", "Dropped: 0"), SYNTH_HIST, "svm");
        assert!(clean.complete, "{:?}", clean.problems);
        assert!(!profile("", "", "svm").complete);
        let counts_only = profile(&EXIT_HIST.replace("Dropped: 3", "Dropped: 0"), "", "svm");
        assert!(counts_only.complete && counts_only.timed == 0, "{:?}", counts_only.problems);
    }

    #[test]
    fn histograms_keyed_by_vcpu_split_each_reason() {
        let exits = "# trigger info: hist:keys=exit_reason,vcpu_id:vals=hitcount:sort=exit_reason:size=2048 if common_pid == 3 [active]
{ exit_reason:        114, vcpu_id:          0 } hitcount:         40
{ exit_reason:        114, vcpu_id:          1 } hitcount:          2
{ exit_reason:        120, vcpu_id:          1 } hitcount:          7
Totals:
    Hits: 49
    Entries: 3
    Dropped: 0
";
        let synth = "# trigger info: hist:keys=reason,vcpu:vals=hitcount,lat:sort=reason:size=2048 if lat < 1000000000000000 [active]
{ reason:        114, vcpu:          0 } hitcount:         40  lat:       4000
{ reason:        114, vcpu:          1 } hitcount:          2  lat:        600
{ reason:        120, vcpu:          1 } hitcount:          6  lat:      90000
Totals:
    Hits: 48
    Entries: 3
    Dropped: 0
# trigger info: hist:keys=reason,vcpu:vals=hitcount:sort=reason:size=2048 if lat >= 1000000000000000 [active]
{ reason:        120, vcpu:          1 } hitcount:          1
Totals:
    Hits: 1
    Entries: 1
    Dropped: 0
";
        let p = profile(exits, synth, "svm");
        assert!(p.complete, "{:?}", p.problems);
        assert_eq!(p.reasons[0], Reason { code: 114, count: 42, time_ns: 4600, timed: 42, untimed: 0 });
        assert_eq!(p.by_vcpu["0"], vec![Reason { code: 114, count: 40, time_ns: 4000, timed: 40, untimed: 0 }]);
        assert_eq!(
            p.by_vcpu["1"],
            vec![
                Reason { code: 114, count: 2, time_ns: 600, timed: 2, untimed: 0 },
                Reason { code: 120, count: 7, time_ns: 90000, timed: 6, untimed: 1 },
            ]
        );
        // Histograms keyed by reason alone give no split (and print none).
        assert!(profile(EXIT_HIST, SYNTH_HIST, "svm").by_vcpu.is_empty());
        let t = triggers(&[3], None, true, true);
        assert!(t[0].1.starts_with("hist:keys=reason,vcpu:vals=hitcount,lat:"));
        assert!(t[3].1.contains(".trace(vmtax_exit,$rr,$lat,vcpu_id)"));
        assert!(t[4].1.starts_with("hist:keys=exit_reason,vcpu_id:"));
        assert_eq!(synth_definition(true), "vmtax_exit u32 reason; u64 lat; u32 vcpu");
    }

    #[test]
    fn a_handling_time_below_zero_is_a_problem_not_a_total() {
        // What L1 stored once under the per-CPU clock: one reason's sum wrapped past zero.
        let wrapped = SYNTH_HIST.replace("lat:    7093726218", "lat: 18446744073709550616");
        let p = profile(&EXIT_HIST.replace("Dropped: 3", "Dropped: 0"), &wrapped, "svm");
        assert!(!p.complete);
        assert!(p.problems[0].contains("reason 114 went below zero"), "{:?}", p.problems);
        assert_eq!((p.reasons[1].time_ns, p.reasons[1].timed), (0, 0));
        assert_eq!(
            parse_hist(SYNTH_HIST)[1].trigger,
            "hist:keys=reason:vals=hitcount:sort=reason:size=2048 if lat >= 1000000000000000 [active]"
        );
    }

    #[test]
    fn parses_a_real_histogram_captured_on_the_testbed() {
        // An L1's kvm_exit histogram while its KVM ran an L2 (tests/fixtures/hostprof/README.md).
        let h = parse_hist(include_str!("../../tests/fixtures/hostprof/hist-kvm-exit-cpuid.txt"));
        assert_eq!(h.len(), 1);
        let by: BTreeMap<u64, u64> = h[0].entries.iter().map(|e| (e.keys["exit_reason"], e.vals["hitcount"])).collect();
        assert_eq!((by[&114], by[&123], by[&1024]), (5290, 65077, 2429));
        assert_eq!((h[0].hits, h[0].dropped), (85488, 0));
        assert_eq!(by.values().sum::<u64>(), h[0].hits);
    }

    #[test]
    fn keys_in_hex_or_with_several_fields() {
        let h = parse_hist("# trigger info: x\n{ a:  0x72, b:   7 } hitcount:  2\nDropped: 0\n");
        assert_eq!(h[0].entries[0].keys["a"], 114);
        assert_eq!(h[0].entries[0].keys["b"], 7);
    }

    #[test]
    fn vcpu_threads_and_filters() {
        assert!(is_vcpu_thread("CPU 0/KVM"));
        assert!(is_vcpu_thread("CPU 12/KVM\n"));
        assert!(!is_vcpu_thread("CPU /KVM"));
        assert!(!is_vcpu_thread("CPU 0/TCG"));
        assert!(!is_vcpu_thread("qemu-system-x86"));
        assert_eq!(pid_filter(&[3, 4]), "if common_pid == 3 || common_pid == 4");
        assert_eq!(triggers(&[7], None, false, false).len(), 1);
        let t = triggers(&[7], Some(128), true, false);
        assert_eq!(t.len(), 5);
        assert!(t[0].1.ends_with(":size=128 if lat < 1000000000000000"));
        assert!(
            t[1].1.starts_with("hist:keys=reason:vals=hitcount:") && t[1].1.ends_with("if lat >= 1000000000000000")
        );
        assert!(t[3].1.contains("onmatch(kvm.kvm_exit).trace(vmtax_exit,$rr,$lat)"));
        assert!(t[4].1.ends_with(":size=128 if common_pid == 7"));
    }

    #[test]
    fn removal_strips_the_state_suffix() {
        assert_eq!(
            removal("hist:keys=reason:vals=hitcount [active]").as_deref(),
            Some("!hist:keys=reason:vals=hitcount")
        );
        assert_eq!(removal("# Available triggers:"), None);
        assert_eq!(removal("  "), None);
    }
}
