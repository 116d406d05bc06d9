//! `exec`: run a program once per iteration and time it: the wall time of the execution, or
//! the time the program reports itself on a line starting with `time_line` (hackbench's
//! `Time: 0.710`, in seconds), or any figure it prints on a line starting with `value_line`
//! (`openssl speed -mr`'s `+F:22:aes-128-gcm:1234.5`: its last `:` field), times `scale`;
//! the controller's workload then names the unit. `env` sets variables for the program
//! (`OPENSSL_ia32cap=...`). With `values_prefix` the program runs once per run and every
//! stdout line starting with the prefix is one value (its last field, times `scale`), in the
//! order printed: a tool that times each of its own requests (sysbench through vmtax's Lua
//! wrapper) keeps them all; `rate_line` then names the line whose last field is the tool's
//! own throughput, reported as the summary's `rate`. It lets a workload's tool run wherever
//! the agent runs, guests included, when the image carries the program and its libraries.
//! `cmd` is split on spaces into an argument list; no shell is involved.

use super::{CpuPool, Ctl, Defaults, Probe, ProbeError, RunErr, Session, Spec, ALL_ARCHES};
use crate::clock::mono_ns;
use crate::output::Better;
use crate::params::{Default, Kind, ParamSpec, Params};
use std::collections::BTreeMap;
use std::process::{Command, Output, Stdio};

pub struct Exec;
pub static EXEC: Exec = Exec;

static PARAMS: [ParamSpec; 7] = [
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
    ParamSpec {
        name: "value_line",
        default: Default::Str(""),
        help: "take the value from the stdout line starting with this: its last `:` field, times `scale`",
        kind: Kind::Str,
    },
    ParamSpec {
        name: "scale",
        default: Default::Float(1.0),
        help: "factor applied to the `value_line` figure (e.g. 0.000001 for bytes/s to MB/s)",
        kind: Kind::Float { min: 1e-12, max: 1e12 },
    },
    ParamSpec {
        name: "env",
        default: Default::Str(""),
        help: "NAME=VALUE pairs separated by spaces, added to the program's environment",
        kind: Kind::Str,
    },
    ParamSpec {
        name: "values_prefix",
        default: Default::Str(""),
        help: "run once per run; each stdout line starting with this is one value (last field, times `scale`)",
        kind: Kind::Str,
    },
    ParamSpec {
        name: "rate_line",
        default: Default::Str(""),
        help: "with `values_prefix`: the stdout line starting with this gives the summary's `rate` (last field)",
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

    fn validate(&self, params: &Params) -> Result<(), ProbeError> {
        if params.str("cmd").split_whitespace().next().is_none() {
            return Err(ProbeError::NoProgram);
        }
        let modes = ["time_line", "value_line", "values_prefix"].into_iter().filter(|m| !params.str(m).is_empty());
        if modes.count() > 1 {
            return Err(ProbeError::ExecModes);
        }
        if !params.str("rate_line").is_empty() && params.str("values_prefix").is_empty() {
            return Err(ProbeError::RateLineAlone);
        }
        if let Some(bad) = params.str("env").split_whitespace().find(|kv| !kv.contains('=') || kv.starts_with('=')) {
            return Err(ProbeError::BadEnv(bad.to_string()));
        }
        Ok(())
    }

    fn setup(&self, params: &Params, pool: &CpuPool) -> Result<Box<dyn Session>, ProbeError> {
        Ok(Box::new(ExecSession {
            argv: params.str("cmd").split_whitespace().map(String::from).collect(),
            time_line: params.str("time_line").to_string(),
            value_line: params.str("value_line").to_string(),
            values_prefix: params.str("values_prefix").to_string(),
            rate_line: params.str("rate_line").to_string(),
            rate: None,
            scale: params.float("scale"),
            env: params
                .str("env")
                .split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            cpus: pool.cpus.clone(),
        }))
    }
}

struct ExecSession {
    argv: Vec<String>,
    time_line: String,
    value_line: String,
    values_prefix: String,
    rate_line: String,
    rate: Option<f64>,
    scale: f64,
    env: Vec<(String, String)>,
    cpus: Vec<usize>,
}

impl ExecSession {
    /// Run the program to completion: its output and wall time (ns); a failure is one line.
    fn execute(&self) -> Result<(Output, f64), ProbeError> {
        let t0 = mono_ns();
        let out = Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| ProbeError::io(&self.argv[0], e))?;
        let wall = (mono_ns() - t0) as f64;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
            return Err(ProbeError::Exited { prog: self.argv[0].clone(), status: out.status, last: last.to_string() });
        }
        Ok((out, wall))
    }

    /// `values_prefix` mode: one execution gives the whole run's values.
    fn run_once(&mut self, ctl: &mut Ctl) -> Result<(), RunErr> {
        let (out, wall) = self.execute()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let last_field = |l: &str| l.split_whitespace().last().and_then(|v| v.parse::<f64>().ok());
        for line in text.lines().filter(|l| l.starts_with(self.values_prefix.as_str())) {
            let v = last_field(line).ok_or_else(|| ProbeError::UnreadableLine(line.to_string()))?;
            ctl.values.push(v * self.scale);
        }
        if ctl.values.len() < 2 {
            return Err(RunErr::Fail(ProbeError::TooFewValues {
                prog: self.argv[0].clone(),
                n: ctl.values.len(),
                prefix: self.values_prefix.clone(),
            }));
        }
        if !self.rate_line.is_empty() {
            let line = text.lines().find(|l| l.starts_with(self.rate_line.as_str()));
            self.rate =
                Some(line.and_then(last_field).ok_or_else(|| ProbeError::NoLine {
                    prog: self.argv[0].clone(),
                    prefix: self.rate_line.clone(),
                })?);
        }
        ctl.wall_ns = wall as u64;
        ctl.stopped_by_duration = true; // the program's own limit ended the run
        Ok(())
    }
}

impl Session for ExecSession {
    fn cpus(&self) -> Vec<usize> {
        self.cpus.clone()
    }

    fn run(&mut self, ctl: &mut Ctl) -> Result<(), RunErr> {
        if self.values_prefix.is_empty() {
            return ctl.drive(|| self.iterate());
        }
        self.run_once(ctl)
    }

    fn extra(&self, _values: &[f64]) -> BTreeMap<String, f64> {
        self.rate.map(|r| BTreeMap::from([("rate".to_string(), r)])).unwrap_or_default()
    }

    fn iterate(&mut self) -> Result<f64, ProbeError> {
        let (out, wall) = self.execute()?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !self.value_line.is_empty() {
            return text
                .lines()
                .find(|l| l.starts_with(self.value_line.as_str()))
                .and_then(|l| l.rsplit(':').next())
                .and_then(|v| v.trim().parse::<f64>().ok())
                .map(|v| v * self.scale)
                .ok_or_else(|| ProbeError::NoLine { prog: self.argv[0].clone(), prefix: self.value_line.clone() });
        }
        if self.time_line.is_empty() {
            return Ok(wall);
        }
        text.lines()
            .find_map(|l| l.strip_prefix(self.time_line.as_str()))
            .and_then(|rest| rest.trim().parse::<f64>().ok())
            .map(|s| s * 1e9)
            .ok_or_else(|| ProbeError::NoLine { prog: self.argv[0].clone(), prefix: self.time_line.clone() })
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
        let figure = crate::params::resolve(
            "exec",
            &PARAMS,
            &[
                "cmd=printenv X".into(),
                "value_line=+F".into(),
                "env=X=+F:22:aes-128-gcm:2500000.5".into(),
                "scale=0.000001".into(),
            ],
        )
        .unwrap();
        let mut s = EXEC.setup(&figure, &pool).unwrap();
        assert!((s.iterate().unwrap() - 2.5000005).abs() < 1e-12);
        let both =
            crate::params::resolve("exec", &PARAMS, &["cmd=true".into(), "time_line=T".into(), "value_line=V".into()])
                .unwrap();
        assert!(EXEC.validate(&both).unwrap_err().to_string().contains("not both"));
        let lonely_rate = crate::params::resolve("exec", &PARAMS, &["cmd=true".into(), "rate_line=R".into()]).unwrap();
        assert!(EXEC.validate(&lonely_rate).unwrap_err().to_string().contains("goes with"));
        let env = crate::params::resolve("exec", &PARAMS, &["cmd=true".into(), "env=NOEQUALS".into()]).unwrap();
        assert!(EXEC.validate(&env).unwrap_err().to_string().contains("NAME=VALUE"));
        let bad = crate::params::resolve("exec", &PARAMS, &["cmd=false".into()]).unwrap();
        assert!(EXEC.setup(&bad, &pool).unwrap().iterate().unwrap_err().to_string().contains("exited"));
    }

    #[test]
    fn one_execution_gives_every_value_it_prints_and_its_own_rate() {
        let pool = CpuPool { cpus: vec![0], requested: false };
        // awk's program has no space in it: `cmd` is split on spaces.
        let params = crate::params::resolve(
            "exec",
            &PARAMS,
            &[
                "cmd=awk BEGIN{print(\"tx\",1,500);print(\"tx\",2,700);print(\"noise\");print(\"rate:\",12.5);print(\"tx\",3,600)}".into(),
                "values_prefix=tx".into(),
                "rate_line=rate:".into(),
                "scale=2".into(),
            ],
        )
        .unwrap();
        EXEC.validate(&params).unwrap();
        let mut s = EXEC.setup(&params, &pool).unwrap();
        let mut ctl = Ctl::new(1, 1000, Some(10.0));
        s.run(&mut ctl).unwrap();
        assert_eq!(ctl.values, vec![1000.0, 1400.0, 1200.0]);
        assert!(ctl.warm.is_empty() && ctl.stopped_by_duration && ctl.wall_ns > 0);
        assert_eq!(s.extra(&ctl.values).get("rate"), Some(&12.5));
        let few =
            crate::params::resolve("exec", &PARAMS, &["cmd=echo tx 1".into(), "values_prefix=tx".into()]).unwrap();
        let mut s = EXEC.setup(&few, &pool).unwrap();
        let err = s.run(&mut Ctl::new(0, 10, None)).unwrap_err();
        assert!(matches!(err, RunErr::Fail(m) if m.to_string().contains("need at least 2")));
    }
}
