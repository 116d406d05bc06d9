//! Runs the real agent binary and checks its output against the shared contract:
//! every record validates against tests/vectors/schema.json (generated from the pydantic
//! models), and the shared vectors parse (or are rejected) the way the Python side does.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn vectors() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("tests").join("vectors")
}

fn validator() -> jsonschema::Validator {
    let text = std::fs::read_to_string(vectors().join("schema.json")).expect("schema.json");
    let schema: Value = serde_json::from_str(&text).expect("schema is JSON");
    jsonschema::validator_for(&schema).expect("schema compiles")
}

fn agent(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vmtax-probe")).args(args).output().expect("agent runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).expect("utf-8 stdout"),
        String::from_utf8(out.stderr).expect("utf-8 stderr"),
    )
}

/// Minimal mirror of the record shapes, enough to tell a valid line from an invalid one.
#[derive(serde::Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[allow(dead_code)]
enum Rec {
    Header {
        schema: String,
        probe: String,
        env: Value,
        params: Value,
        runs: u32,
        iterations: u64,
    },
    Samples {
        run: u32,
        unit: String,
        values: Vec<f64>,
    },
    RunSummary {
        run: u32,
        n: u64,
        mean: f64,
        median: f64,
        stddev: f64,
        min: f64,
        max: f64,
        p95: f64,
        p99: f64,
        cpus: Vec<usize>,
        stopped_by: Stop,
    },
    End {
        status: Status,
        runs_completed: u32,
    },
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum Stop {
    Iterations,
    Duration,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    Ok,
    Error,
    Timeout,
    Interrupted,
}

fn check_stream(stdout: &str) -> usize {
    let v = validator();
    let mut n = 0;
    for line in stdout.lines() {
        let rec: Value = serde_json::from_str(line).expect("each line is JSON");
        let errors: Vec<String> = v.iter_errors(&rec).map(|e| format!("{} at {}", e, e.instance_path)).collect();
        assert!(errors.is_empty(), "record does not match schema.json: {errors:?}\n{line}");
        serde_json::from_str::<Rec>(line).expect("record parses");
        n += 1;
    }
    n
}

#[test]
fn real_output_validates_against_schema() {
    for probe in ["syscall", "cpu", "write", "memory"] {
        let (code, out, err) = agent(&["run", probe, "--runs", "2", "--iterations", "20", "--warmup", "2"]);
        assert_eq!(code, 0, "{probe}: {err}");
        let n = check_stream(&out);
        // header + 2 x (warm-up samples, samples, summary) + end
        assert_eq!(n, 8, "{probe}");
        let last: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        assert_eq!(last["status"], "ok");
        assert_eq!(last["runs_completed"], 2);
        // The header names the boot the runs ran in: this host's.
        let header: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
        assert_eq!(header["boot_id"], boot.trim(), "{probe}");
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn cpuid_output_validates() {
    let (code, out, err) = agent(&["run", "cpuid", "--runs", "2", "--iterations", "100", "--cpus", "0"]);
    assert_eq!(code, 0, "{err}");
    check_stream(&out);
    let summary: Value =
        out.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).find(|r| r["type"] == "run_summary").unwrap();
    assert_eq!(summary["cpus"], serde_json::json!([0]));
    assert!(summary["extra"]["ns_mean"].as_f64().unwrap() > 0.0);
}

#[test]
fn timer_idle_poll_holds_the_latency_request_or_says_why_not() {
    let (code, out, err) = agent(&["run", "timer", "--runs", "1", "--iterations", "3", "--param", "idle=poll"]);
    let writable = std::fs::OpenOptions::new().write(true).open("/dev/cpu_dma_latency").is_ok();
    if writable {
        assert_eq!(code, 0, "{err}");
        check_stream(&out);
        let header: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        assert_eq!(header["params"]["idle"], "poll");
    } else {
        // Not root, or no PM QoS device: the run ends with an error that names the device.
        assert_ne!(code, 0);
        let last: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        assert_eq!(last["status"], "error");
        assert!(last["error"].as_str().unwrap().contains("/dev/cpu_dma_latency"), "{last}");
    }
}

#[test]
fn list_and_env_match_schema_parts() {
    let (code, out, _) = agent(&["list", "--format", "json"]);
    assert_eq!(code, 0);
    let list: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(out.trim().lines().count(), 1);
    let names: Vec<&str> = list.as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    for want in
        ["syscall", "write", "timer", "wakeup", "pingpong", "ctxswitch", "pagefault", "cpu", "threads", "memory", "io"]
    {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let (code, out, _) = agent(&["env", "--format", "json"]);
    assert_eq!(code, 0);
    // The fingerprint is validated as the env of a header record.
    let env: Value = serde_json::from_str(out.trim()).unwrap();
    let (_, run, _) = agent(&["run", "syscall", "--runs", "1", "--iterations", "2"]);
    let mut header: Value = serde_json::from_str(run.lines().next().unwrap()).unwrap();
    header["env"] = env;
    let errors: Vec<String> = validator().iter_errors(&header).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}");
}

#[cfg(target_arch = "x86_64")]
#[test]
fn a_given_tsc_rate_and_brief_env_are_used_and_said() {
    let args = ["run", "syscall", "--runs", "1", "--iterations", "20", "--tsc-hz", "2345678901.5", "--brief-env"];
    let (code, out, err) = agent(&args);
    assert_eq!(code, 0, "{err}");
    check_stream(&out);
    let header: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(header["env"]["cpu"]["tsc_hz"], 2345678901.5);
    assert_eq!(header["env"]["cpu"]["tsc_source"], "given by --tsc-hz");
    assert!(header["env"]["nesting"]["cpuid_cycles"].is_null(), "{}", header["env"]["nesting"]);
    assert_eq!(header["env"]["nesting"]["confidence"], "none");
    let (_, slow, _) = agent(&["run", "syscall", "--runs", "1", "--iterations", "20", "--tsc-hz", "1e9"]);
    let h: Value = serde_json::from_str(slow.lines().next().unwrap()).unwrap();
    assert_eq!(h["env"]["cpu"]["tsc_hz"], 1e9);
    assert!(!h["env"]["nesting"]["cpuid_cycles"].is_null(), "the full env without --brief-env");
}

#[test]
fn usage_errors_exit_2_with_one_line() {
    for args in [
        vec!["run", "nosuchprobe"],
        vec!["run", "cpu", "--param", "max_prime=abc"],
        vec!["run", "cpu", "--param", "nosuch=1"],
        vec!["run", "write", "--param", "mode=sideways"],
        vec!["run", "timer", "--param", "idle=spin"],
        vec!["run", "memory", "--param", "block_kb=3"],
        vec!["run", "io", "--param", "block_size=1000"],
        vec!["run", "write", "--param", "mode=buffered", "--param", "buffer=8", "--param", "len=64"],
        vec!["run", "cpu", "--iterations", "1"],
        vec!["run", "cpu", "--cpus", "9999"],
        vec!["run", "cpu", "--bogus"],
        vec!["run", "cpu", "--tsc-hz", "5"],
        vec!["run", "cpu", "--tsc-hz", "NaN"],
        vec!["frobnicate"],
    ] {
        let (code, out, err) = agent(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?} wrote to stdout");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err:?}");
        assert!(err.starts_with("vmtax-probe: error: "), "{err}");
    }
}

#[test]
fn shared_vectors_parse_and_invalid_ones_are_rejected() {
    let v = validator();
    for name in ["stream_ok.jsonl", "stream_error.jsonl"] {
        let text = std::fs::read_to_string(vectors().join(name)).unwrap();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            serde_json::from_str::<Rec>(line).unwrap_or_else(|e| panic!("{name}: {e}\n{line}"));
            assert!(v.is_valid(&serde_json::from_str::<Value>(line).unwrap()), "{name}: {line}");
        }
    }
    // The truncated stream's lines all parse except the torn last one.
    let text = std::fs::read_to_string(vectors().join("stream_truncated.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    for line in &lines[..lines.len() - 1] {
        serde_json::from_str::<Rec>(line).unwrap();
    }
    assert!(serde_json::from_str::<Rec>(lines[lines.len() - 1]).is_err());
    let text = std::fs::read_to_string(vectors().join("records_invalid.jsonl")).unwrap();
    let mut rejected = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        assert!(serde_json::from_str::<Rec>(line).is_err(), "accepted invalid record: {line}");
        if let Ok(val) = serde_json::from_str::<Value>(line) {
            assert!(!v.is_valid(&val), "schema accepted invalid record: {line}");
        }
        rejected += 1;
    }
    assert!(rejected >= 5);
}

/// A pseudo-terminal pair: the agent serves on the slave side (a tty, put in raw mode),
/// the test plays the host on the master side.
fn pty() -> (std::fs::File, String) {
    use std::os::fd::FromRawFd;
    // SAFETY: posix_openpt returns a new fd (checked); grantpt/unlockpt/ptsname act on it.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(m >= 0, "posix_openpt");
        assert_eq!(libc::grantpt(m), 0);
        assert_eq!(libc::unlockpt(m), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
        let path = std::ffi::CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned();
        (std::fs::File::from_raw_fd(m), path)
    }
}

#[test]
fn serve_frames_requests_over_a_tty() {
    use std::io::{BufRead, BufReader, Write};
    let (master, slave) = pty();
    let child = Command::new(env!("CARGO_BIN_EXE_vmtax-probe"))
        .args(["serve", "--device", &slave])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Kill the server if an assertion fails before it is told to stop.
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Reap(child);
    let mut host = master.try_clone().unwrap();
    let mut lines = BufReader::new(master);
    let mut next = || -> Value {
        let mut l = String::new();
        lines.read_line(&mut l).unwrap();
        serde_json::from_str(l.trim()).unwrap_or_else(|e| panic!("{e}: {l:?}"))
    };
    assert_eq!(next()["type"], "serve_ready");
    host.write_all(b"[\"run\",\"syscall\",\"--runs\",\"2\",\"--iterations\",\"10\"]\n").unwrap();
    let mut records = Vec::new();
    let done = loop {
        let v = next();
        if v["type"] == "serve_done" {
            break v;
        }
        records.push(v);
    };
    assert_eq!(done["exit_code"], 0, "{done}");
    let val = validator();
    // header + 2 x (warm-up samples, samples, summary) + end
    assert_eq!(records.len(), 8);
    for r in &records {
        assert!(val.is_valid(r), "{r}");
    }
    host.write_all(b"not json\n[\"run\",\"nosuch\"]\n").unwrap();
    assert_eq!(next()["exit_code"], 2);
    let d = next();
    assert_eq!(d["exit_code"], 2);
    assert!(d["stderr_tail"].as_str().unwrap().contains("unknown probe"), "{d}");
    host.write_all(b"[\"poweroff\"]\n").unwrap();
    // Not PID 1: poweroff just ends serve.
    assert!(child.0.wait().unwrap().success());
}
