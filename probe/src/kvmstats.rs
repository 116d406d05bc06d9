//! `exits stats`: KVM's own per-vCPU counters of a guest (its binary statistics,
//! `KVM_GET_STATS_FD`, Linux >= 5.14), read through the guest's QEMU with the QMP command
//! `query-stats` (QEMU >= 7.1). Nothing is traced: KVM counts every exit anyway, and a
//! reading before and one after a run give the run's exits by category at no cost to it.
//!
//! Only the process that holds a vCPU's file descriptor can ask for its statistics, so the
//! question goes to QEMU, over the QMP socket named on its command line (`-qmp unix:PATH,...`).

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use crate::exits;

/// Seconds a QMP reply may take (QEMU in a TCG-emulated guest is slow).
const QMP_TIMEOUT_S: u64 = 30;

/// Why `exits stats` failed (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    #[error("{0}")]
    Qemu(#[from] exits::ExitsError),
    #[error("QEMU (pid {0}) has no QMP socket: start it with -qmp unix:PATH,server=on,wait=off")]
    NoQmp(u32),
    #[error("QMP socket {}: {source}", .path.display())]
    Connect { path: PathBuf, source: std::io::Error },
    #[error("QMP: {0}")]
    Io(#[from] std::io::Error),
    #[error("QMP: the connection closed before {0} was answered")]
    Closed(&'static str),
    #[error("QMP: unreadable reply to {what}: {source}")]
    Reply { what: &'static str, source: serde_json::Error },
    #[error("this QEMU has no query-stats (QEMU 7.1 or later has it): {0}")]
    NoQueryStats(String),
    #[error("QMP: {what} failed: {desc}")]
    Refused { what: &'static str, desc: String },
    #[error("KVM gives no per-vCPU statistics here (KVM_GET_STATS_FD needs Linux 5.14 or later)")]
    NoStats,
}

/// One vCPU's counters (only KVM's cumulative scalars; histograms are left out).
#[derive(Debug, PartialEq, serde::Serialize)]
pub struct Vcpu {
    pub path: String,
    pub stats: BTreeMap<String, u64>,
}

/// What `exits stats` prints.
#[derive(Debug, PartialEq, serde::Serialize)]
pub struct Reading {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub isa: String,
    pub qemu: u32,
    pub time_ns: u64,
    pub vcpus: Vec<Vcpu>,
}

/// The QMP socket of a QEMU command line (`-qmp unix:PATH[,opts]`, or `-qmp unix=PATH`).
pub fn qmp_path(cmdline: &[String]) -> Option<PathBuf> {
    let at = cmdline.iter().position(|a| a == "-qmp" || a == "--qmp")?;
    let value = cmdline.get(at + 1)?;
    let rest = value.strip_prefix("unix:").or_else(|| value.strip_prefix("unix="))?;
    let path = rest.split(',').next().filter(|p| !p.is_empty())?;
    Some(PathBuf::from(path))
}

/// The names of KVM's cumulative vCPU counters in a `query-stats-schemas` reply; the others
/// are instants (`blocking`, `guest_mode`) or peaks, whose difference counts nothing.
pub fn cumulative(schemas: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for s in schemas["return"].as_array().into_iter().flatten() {
        if s["provider"].as_str() != Some("kvm") || s["target"].as_str() != Some("vcpu") {
            continue;
        }
        for st in s["stats"].as_array().into_iter().flatten() {
            if st["type"].as_str() == Some("cumulative") {
                out.extend(st["name"].as_str().map(str::to_string));
            }
        }
    }
    out
}

/// The vCPUs of a `query-stats` reply (`{"return": [{"provider", "qom-path", "stats": [...]}]}`),
/// each with the counters named in `keep`.
pub fn parse_reply(reply: &serde_json::Value, keep: &[String]) -> Vec<Vcpu> {
    let mut out = Vec::new();
    for entry in reply["return"].as_array().into_iter().flatten() {
        if entry["provider"].as_str() != Some("kvm") {
            continue;
        }
        let mut stats = BTreeMap::new();
        for s in entry["stats"].as_array().into_iter().flatten() {
            if let (Some(name), Some(v)) = (s["name"].as_str(), s["value"].as_u64()) {
                if !keep.iter().any(|k| k == name) {
                    continue;
                }
                stats.insert(name.to_string(), v);
            }
        }
        out.push(Vcpu { path: entry["qom-path"].as_str().unwrap_or("").to_string(), stats });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// A QMP session: the greeting, `qmp_capabilities`, then one command per call.
struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Qmp {
    fn connect(path: &PathBuf) -> Result<Qmp, StatsError> {
        let s = UnixStream::connect(path).map_err(|source| StatsError::Connect { path: path.clone(), source })?;
        s.set_read_timeout(Some(Duration::from_secs(QMP_TIMEOUT_S)))?;
        let mut q = Qmp { reader: BufReader::new(s.try_clone()?), writer: s };
        q.reply("the greeting", |v| v.get("QMP").is_some())?;
        q.execute("qmp_capabilities", serde_json::json!({}))?;
        Ok(q)
    }

    /// The next message `done` accepts; events (`{"event": ...}`) are skipped.
    fn reply(
        &mut self,
        what: &'static str,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<serde_json::Value, StatsError> {
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line)? == 0 {
                return Err(StatsError::Closed(what));
            }
            if line.trim().is_empty() {
                continue;
            }
            let v: serde_json::Value =
                serde_json::from_str(&line).map_err(|source| StatsError::Reply { what, source })?;
            if done(&v) {
                return Ok(v);
            }
        }
    }

    fn execute(&mut self, what: &'static str, arguments: serde_json::Value) -> Result<serde_json::Value, StatsError> {
        let msg = serde_json::json!({"execute": what, "arguments": arguments});
        self.writer.write_all(format!("{msg}\n").as_bytes())?;
        let v = self.reply(what, |v| v.get("return").is_some() || v.get("error").is_some())?;
        if let Some(err) = v.get("error") {
            let desc = err["desc"].as_str().unwrap_or("").to_string();
            if err["class"].as_str() == Some("CommandNotFound") {
                return Err(StatsError::NoQueryStats(desc));
            }
            return Err(StatsError::Refused { what, desc });
        }
        Ok(v)
    }
}

fn cmdline(pid: u32) -> Vec<String> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    raw.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
}

fn read(qemu: Option<&str>, qmp: Option<&str>) -> Result<Reading, StatsError> {
    let pid = exits::qemu_pid(qemu)?;
    let path = match qmp {
        Some(p) => PathBuf::from(p),
        None => qmp_path(&cmdline(pid)).ok_or(StatsError::NoQmp(pid))?,
    };
    let mut q = Qmp::connect(&path)?;
    let keep = cumulative(&q.execute("query-stats-schemas", serde_json::json!({"provider": "kvm"}))?);
    let reply = q.execute("query-stats", serde_json::json!({"target": "vcpu", "providers": [{"provider": "kvm"}]}))?;
    let time_ns = exits::now_ns();
    let vcpus = parse_reply(&reply, &keep);
    if vcpus.is_empty() || vcpus.iter().all(|v| !v.stats.contains_key("exits")) {
        return Err(StatsError::NoStats);
    }
    Ok(Reading { kind: "kvm_stats", isa: exits::isa(), qemu: pid, time_ns, vcpus })
}

/// `exits stats`: print one reading of the guest's per-vCPU KVM counters as JSON.
pub fn stats(qemu: Option<&str>, qmp: Option<&str>) -> i32 {
    match read(qemu, qmp) {
        Ok(r) => {
            println!("{}", serde_json::to_string(&r).expect("serializable"));
            0
        }
        Err(e) => {
            eprintln!("vmtax-probe: error: exits stats: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn finds_the_qmp_socket_on_a_qemu_command_line() {
        let cl = args(&["qemu-system-x86_64", "-m", "2048M", "-qmp", "unix:/run/q.sock,server=on,wait=off"]);
        assert_eq!(qmp_path(&cl), Some(PathBuf::from("/run/q.sock")));
        assert_eq!(qmp_path(&args(&["qemu", "-qmp", "unix=/a"])), Some(PathBuf::from("/a")));
        assert_eq!(qmp_path(&args(&["qemu", "-qmp", "tcp:localhost:4444"])), None);
        assert_eq!(qmp_path(&args(&["qemu", "-m", "1G"])), None);
        assert_eq!(qmp_path(&args(&["qemu", "-qmp"])), None);
    }

    #[test]
    fn keeps_kvm_scalars_per_vcpu_and_leaves_histograms_out() {
        let reply = serde_json::json!({"return": [
            {"provider": "kvm", "qom-path": "/machine/unattached/device[1]",
             "stats": [{"name": "exits", "value": 7}, {"name": "halt_wait_hist", "value": [1, 2]}]},
            {"provider": "kvm", "qom-path": "/machine/unattached/device[0]",
             "stats": [{"name": "exits", "value": 1234}, {"name": "halt_exits", "value": 5}]},
            {"provider": "other", "qom-path": "/x", "stats": [{"name": "exits", "value": 1}]}
        ]});
        let keep = vec!["exits".to_string(), "halt_exits".to_string()];
        let v = parse_reply(&reply, &keep);
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].path, "/machine/unattached/device[0]");
        assert_eq!(v[0].stats["exits"], 1234);
        assert_eq!(v[0].stats["halt_exits"], 5);
        assert_eq!(v[1].stats.len(), 1, "a histogram is not a counter");
        let only = parse_reply(&reply, &["halt_exits".to_string()]);
        assert_eq!(only[0].stats.len(), 1);
    }

    #[test]
    fn only_cumulative_vcpu_counters_are_kept() {
        let schemas = serde_json::json!({"return": [
            {"provider": "kvm", "target": "vcpu", "stats": [
                {"name": "exits", "type": "cumulative", "unit": "none"},
                {"name": "blocking", "type": "instant", "unit": "boolean"},
                {"name": "halt_wait_hist", "type": "log2-histogram"}]},
            {"provider": "kvm", "target": "vm", "stats": [{"name": "remote_tlb_flush", "type": "cumulative"}]}
        ]});
        assert_eq!(cumulative(&schemas), vec!["exits".to_string()]);
    }
}
