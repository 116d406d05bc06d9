//! `exec`: run a program once per iteration and time it: the wall time of the execution, or
//! the time the program reports itself on a line starting with `time_line` (hackbench's
//! `Time: 0.710`, in seconds). It lets a workload's tool run wherever the agent runs, guests
//! included, when the image carries the program and its libraries. `cmd` is split on
//! spaces into an argument list; no shell is involved.

use super::{CpuPool, Defaults, Probe, Session, Spec, ALL_ARCHES};
use crate::clock::mono_ns;
use crate::output::Better;
use crate::params::{Default, Kind, ParamSpec, Params};
use std::process::{Command, Stdio};

pub struct Exec;
pub static EXEC: Exec = Exec;

static PARAMS: [ParamSpec; 2] = [
    ParamSpec {
        name: "cmd",
        default: Default::Str(""),
        help: "program and arguments, separated by spaces (no shell)",
        kind: Kind::Str,
    },
    ParamSpec {
        name: "time_line",
        default: Default::Str(""),
        help: "take the value from the stdout line starting with this (seconds); empty: wall time",
        kind: Kind::Str,
    },
];

static SPEC: Spec = Spec {
    name: "exec",
    summary: "one execution of a program: its wall time or the time it reports itself",
    mechanism: "whatever the program exercises (fork, exec, page faults, its own work)",
    unit: "ns",
    better: Better::Lower,
    throughput_unit: None,
    params: &PARAMS,
    needs_root: false,
    arches: ALL_ARCHES,
    defaults: Defaults { runs: 5, iterations: 10, duration_s: 5.0, warmup: 1 },
};

impl Probe for Exec {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn validate(&self, params: &Params) -> Result<(), String> {
        if params.str("cmd").split_whitespace().next().is_none() {
            return Err("`cmd` names no program".into());
        }
        Ok(())
    }

    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, String> {
        Ok(Box::new(ExecSession {
            argv: params.str("cmd").split_whitespace().map(String::from).collect(),
            time_line: params.str("time_line").to_string(),
            cpus: pool.cpus.clone(),
        }))
    }
}

struct ExecSession {
    argv: Vec<String>,
    time_line: String,
    cpus: Vec<usize>,
}

impl Session for ExecSession {
    fn cpus(&self) -> Vec<usize> {
        self.cpus.clone()
    }

    fn iterate(&mut self) -> Result<f64, String> {
        let t0 = mono_ns();
        let out = Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("{}: {e}", self.argv[0]))?;
        let wall = (mono_ns() - t0) as f64;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
            return Err(format!("{} exited with {}: {last}", self.argv[0], out.status));
        }
        if self.time_line.is_empty() {
            return Ok(wall);
        }
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find_map(|l| l.strip_prefix(self.time_line.as_str()))
            .and_then(|rest| rest.trim().parse::<f64>().ok())
            .map(|s| s * 1e9)
            .ok_or_else(|| format!("{} printed no line starting with {:?}", self.argv[0], self.time_line))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::Ctl;

    #[test]
    fn times_a_program_or_reads_the_time_it_prints() {
        let pool = CpuPool { cpus: vec![0], requested: false };
        let wall = crate::params::resolve("exec", &PARAMS, &["cmd=true".into()]).unwrap();
        let mut s = EXEC.setup(&wall, &pool).unwrap();
        let mut ctl = Ctl::new(0, 3, Some(10.0));
        s.run(&mut ctl).unwrap();
        assert!(ctl.values.iter().all(|v| *v > 0.0));
        let own =
            crate::params::resolve("exec", &PARAMS, &["cmd=echo Time: 0.25".into(), "time_line=Time:".into()]).unwrap();
        let mut s = EXEC.setup(&own, &pool).unwrap();
        assert_eq!(s.iterate().unwrap(), 0.25e9);
        let bad = crate::params::resolve("exec", &PARAMS, &["cmd=false".into()]).unwrap();
        assert!(EXEC.setup(&bad, &pool).unwrap().iterate().unwrap_err().contains("exited"));
    }
}
