//! The `vmtax.probe/1` records (mirrors `vmtax/contract.py`) and the writer that flushes
//! each completed run as one write, so a killed agent leaves only whole runs behind.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Mutex;

pub const SCHEMA: &str = "vmtax.probe/1";
pub const AGENT_VERSION: &str = env!("CARGO_PKG_VERSION");
/// Values per `samples` record.
pub const BATCH: usize = 4096;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ParamValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hypervisor {
    pub detected: bool,
    pub vendor: Option<String>,
    pub signature: Option<String>,
    #[serde(default)]
    pub evidence: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Nesting {
    pub depth: Option<u32>,
    pub basis: String,
    pub confidence: Confidence,
    pub cpuid_cycles: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    None,
    Low,
    Medium,
    High,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cpu {
    pub model: String,
    pub vendor: String,
    pub logical_cpus: u32,
    pub tsc_hz: Option<f64>,
    pub tsc_invariant: Option<bool>,
    /// Where tsc_hz came from (cpuid leaf or calibration).
    #[serde(default)]
    pub tsc_source: Option<String>,
    #[serde(default)]
    pub virt_flags: Vec<String>,
    /// The microcode revision (/proc/cpuinfo `microcode`, e.g. `0xf0`); left out where the
    /// kernel shows none (many guests) or the agent predates the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub microcode: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fingerprint {
    pub agent_version: String,
    pub arch: String,
    pub hostname: String,
    pub hypervisor: Hypervisor,
    pub nesting: Nesting,
    pub cpu: Cpu,
    pub memory_bytes: u64,
    pub kernel: String,
    pub clocksource: Option<String>,
    pub thp: Option<String>,
    pub steal_ticks: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    Lower,
    Higher,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ParamKind {
    Int,
    Float,
    Bool,
    Str,
    Choice,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ParamInfo {
    pub name: String,
    pub default: ParamValue,
    pub help: String,
    pub kind: ParamKind,
    pub choices: Option<Vec<String>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProbeInfo {
    pub name: String,
    pub summary: String,
    pub mechanism: String,
    pub unit: String,
    pub better: Better,
    pub throughput_unit: Option<String>,
    pub params: Vec<ParamInfo>,
    pub needs_root: bool,
    pub arches: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Header {
    pub schema: String,
    pub agent_version: String,
    pub probe: String,
    pub unit: String,
    pub better: Better,
    pub throughput_unit: Option<String>,
    pub mechanism: String,
    pub params: BTreeMap<String, ParamValue>,
    pub runs: u32,
    pub iterations: u64,
    pub duration_s: Option<f64>,
    pub warmup: u64,
    pub timeout_s: Option<f64>,
    pub cpus: Option<Vec<usize>>,
    pub started_at: String,
    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`): runs with one id share a boot.
    #[serde(default)]
    pub boot_id: Option<String>,
    pub env: Fingerprint,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Samples {
    pub run: u32,
    pub unit: String,
    #[serde(default)]
    pub warmup: bool,
    pub values: Vec<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoppedBy {
    Iterations,
    Duration,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSummary {
    pub run: u32,
    pub n: u64,
    pub mean: f64,
    pub median: f64,
    pub stddev: f64,
    pub min: f64,
    pub max: f64,
    pub p95: f64,
    pub p99: f64,
    pub wall_s: f64,
    pub ops_per_sec: Option<f64>,
    pub throughput: Option<f64>,
    pub throughput_unit: Option<String>,
    pub steal_ticks: Option<u64>,
    pub cpus: Vec<usize>,
    pub stopped_by: StoppedBy,
    #[serde(default)]
    pub extra: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Error,
    Timeout,
    Interrupted,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct End {
    pub status: Status,
    pub error: Option<String>,
    pub runs_completed: u32,
}

/// One line of the stream.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    Header(Box<Header>),
    Samples(Samples),
    RunSummary(RunSummary),
    End(End),
}

impl Record {
    pub fn to_line(&self) -> String {
        let mut s = serde_json::to_string(self).expect("records always serialize");
        s.push('\n');
        s
    }
}

/// The lines of one completed run: warm-up and measured samples in batches, then the summary.
pub fn run_lines(run: u32, unit: &str, warm: &[f64], values: &[f64], summary: RunSummary) -> String {
    let mut out = String::new();
    for (chunk, warmup) in warm.chunks(BATCH).map(|c| (c, true)).chain(values.chunks(BATCH).map(|c| (c, false))) {
        out.push_str(
            &Record::Samples(Samples { run, unit: unit.to_string(), warmup, values: chunk.to_vec() }).to_line(),
        );
    }
    out.push_str(&Record::RunSummary(summary).to_line());
    out
}

static OUT: Mutex<bool> = Mutex::new(false);

/// Write text to stdout (fd 1) and flush it. After the `end` record is written nothing else
/// may be (the watchdog and the main thread race for it), so `end` marks the stream closed.
pub fn emit(text: &str, is_end: bool) -> std::io::Result<bool> {
    let mut closed = OUT.lock().unwrap_or_else(|e| e.into_inner());
    if *closed {
        return Ok(false);
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    if is_end {
        *closed = true;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_batched_and_tagged() {
        let vals: Vec<f64> = (0..BATCH + 3).map(|i| i as f64).collect();
        let summary = RunSummary {
            run: 0,
            n: vals.len() as u64,
            mean: 1.0,
            median: 1.0,
            stddev: f64::NAN,
            min: 0.0,
            max: 2.0,
            p95: 2.0,
            p99: 2.0,
            wall_s: 0.1,
            ops_per_sec: None,
            throughput: None,
            throughput_unit: None,
            steal_ticks: Some(0),
            cpus: vec![0],
            stopped_by: StoppedBy::Iterations,
            extra: BTreeMap::new(),
        };
        let text = run_lines(0, "ns", &[7.0], &vals, summary);
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0]["type"], "samples");
        assert_eq!(lines[0]["warmup"], true);
        assert_eq!(lines[1]["values"].as_array().unwrap().len(), BATCH);
        assert_eq!(lines[2]["values"].as_array().unwrap().len(), 3);
        assert_eq!(lines[3]["type"], "run_summary");
        // JSON has no NaN: it is written as null.
        assert!(lines[3]["stddev"].is_null());
        assert_eq!(lines[3]["stopped_by"], "iterations");
    }

    #[test]
    fn header_uses_schema_key_and_param_values_keep_type() {
        let mut params = BTreeMap::new();
        params.insert("leaf".to_string(), ParamValue::Int(0));
        params.insert("mode".to_string(), ParamValue::Str("direct".into()));
        params.insert("x".to_string(), ParamValue::Float(1.5));
        let v = serde_json::to_value(&params).unwrap();
        assert_eq!(v["leaf"], 0);
        assert_eq!(v["mode"], "direct");
        assert_eq!(v["x"], 1.5);
        let end = Record::End(End { status: Status::Timeout, error: None, runs_completed: 2 });
        let v: serde_json::Value = serde_json::from_str(&end.to_line()).unwrap();
        assert_eq!(v["type"], "end");
        assert_eq!(v["status"], "timeout");
        assert!(v["error"].is_null());
    }
}
