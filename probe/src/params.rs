//! Probe parameters: declared once per probe, validated from `--param key=value`.

use crate::output::{ParamInfo, ParamKind, ParamValue};
use std::collections::BTreeMap;

/// A `--param` the probe cannot take: a usage error.
#[derive(Debug, thiserror::Error)]
pub enum ParamError {
    #[error("invalid --param {0:?}: expected key=value")]
    NotKeyValue(String),
    #[error("unknown parameter {key:?} for probe {probe}: it takes no parameters")]
    NoParams { key: String, probe: String },
    #[error("unknown parameter {key:?} for probe {probe} (known: {known})")]
    Unknown { key: String, probe: String, known: String },
    #[error("invalid value {raw:?} for parameter {name}: {problem}")]
    BadValue { raw: String, name: &'static str, problem: ValueProblem },
}

/// What is wrong with one parameter's value.
#[derive(Debug, thiserror::Error)]
pub enum ValueProblem {
    #[error("expected an integer")]
    NotInt,
    #[error("expected a number")]
    NotNumber,
    #[error("must be in {min}..{max}")]
    OutOfRange { min: String, max: String },
    #[error("expected true or false")]
    NotBool,
    #[error("expected one of {0}")]
    NotAChoice(String),
}

// Float and Bool are part of the contract's parameter kinds; today's probes use Int, Str
// and Choice only.
#[allow(dead_code)]
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Int { min: i64, max: i64 },
    Float { min: f64, max: f64 },
    Bool,
    Str,
    Choice(&'static [&'static str]),
}

#[allow(dead_code)]
#[derive(Debug, Clone, Copy)]
pub enum Default {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(&'static str),
}

#[derive(Debug, Clone, Copy)]
pub struct ParamSpec {
    pub name: &'static str,
    pub default: Default,
    pub help: &'static str,
    pub kind: Kind,
}

impl ParamSpec {
    fn default_value(&self) -> ParamValue {
        match self.default {
            Default::Int(i) => ParamValue::Int(i),
            Default::Float(f) => ParamValue::Float(f),
            Default::Bool(b) => ParamValue::Bool(b),
            Default::Str(s) => ParamValue::Str(s.to_string()),
        }
    }

    pub fn info(&self) -> ParamInfo {
        let (kind, choices) = match self.kind {
            Kind::Int { .. } => (ParamKind::Int, None),
            Kind::Float { .. } => (ParamKind::Float, None),
            Kind::Bool => (ParamKind::Bool, None),
            Kind::Str => (ParamKind::Str, None),
            Kind::Choice(c) => (ParamKind::Choice, Some(c.iter().map(|s| s.to_string()).collect())),
        };
        let help = match self.kind {
            Kind::Int { min, max } => format!("{} ({min}..{max})", self.help),
            Kind::Float { min, max } => format!("{} ({min}..{max})", self.help),
            _ => self.help.to_string(),
        };
        ParamInfo { name: self.name.to_string(), default: self.default_value(), help, kind, choices }
    }

    fn parse(&self, raw: &str) -> Result<ParamValue, ParamError> {
        let bad = |problem: ValueProblem| ParamError::BadValue { raw: raw.to_string(), name: self.name, problem };
        let range = |min: &dyn std::fmt::Display, max: &dyn std::fmt::Display| ValueProblem::OutOfRange {
            min: min.to_string(),
            max: max.to_string(),
        };
        match self.kind {
            Kind::Int { min, max } => {
                let v: i64 = raw.parse().map_err(|_| bad(ValueProblem::NotInt))?;
                if v < min || v > max {
                    return Err(bad(range(&min, &max)));
                }
                Ok(ParamValue::Int(v))
            }
            Kind::Float { min, max } => {
                let v: f64 = raw.parse().map_err(|_| bad(ValueProblem::NotNumber))?;
                if !v.is_finite() || v < min || v > max {
                    return Err(bad(range(&min, &max)));
                }
                Ok(ParamValue::Float(v))
            }
            Kind::Bool => match raw {
                "true" | "1" | "yes" | "on" => Ok(ParamValue::Bool(true)),
                "false" | "0" | "no" | "off" => Ok(ParamValue::Bool(false)),
                _ => Err(bad(ValueProblem::NotBool)),
            },
            Kind::Str => Ok(ParamValue::Str(raw.to_string())),
            Kind::Choice(c) => {
                if c.contains(&raw) {
                    Ok(ParamValue::Str(raw.to_string()))
                } else {
                    Err(bad(ValueProblem::NotAChoice(c.join(", "))))
                }
            }
        }
    }
}

/// Resolved parameters of one invocation: defaults overridden by `--param`.
#[derive(Debug, Clone)]
pub struct Params(pub BTreeMap<String, ParamValue>);

#[allow(dead_code)]
impl Params {
    pub fn int(&self, name: &str) -> i64 {
        match self.0.get(name) {
            Some(ParamValue::Int(i)) => *i,
            other => panic!("parameter {name} is not an int: {other:?}"),
        }
    }

    pub fn float(&self, name: &str) -> f64 {
        match self.0.get(name) {
            Some(ParamValue::Float(f)) => *f,
            Some(ParamValue::Int(i)) => *i as f64,
            other => panic!("parameter {name} is not a float: {other:?}"),
        }
    }

    pub fn str(&self, name: &str) -> &str {
        match self.0.get(name) {
            Some(ParamValue::Str(s)) => s,
            other => panic!("parameter {name} is not a string: {other:?}"),
        }
    }

    pub fn bool(&self, name: &str) -> bool {
        match self.0.get(name) {
            Some(ParamValue::Bool(b)) => *b,
            other => panic!("parameter {name} is not a bool: {other:?}"),
        }
    }
}

/// Validate `key=value` pairs against the probe's parameters.
pub fn resolve(probe: &str, specs: &[ParamSpec], given: &[String]) -> Result<Params, ParamError> {
    let mut out: BTreeMap<String, ParamValue> = specs.iter().map(|s| (s.name.to_string(), s.default_value())).collect();
    for kv in given {
        let (k, v) = kv.split_once('=').ok_or_else(|| ParamError::NotKeyValue(kv.to_string()))?;
        let spec = specs.iter().find(|s| s.name == k).ok_or_else(|| {
            let names: Vec<&str> = specs.iter().map(|s| s.name).collect();
            if names.is_empty() {
                ParamError::NoParams { key: k.to_string(), probe: probe.to_string() }
            } else {
                ParamError::Unknown { key: k.to_string(), probe: probe.to_string(), known: names.join(", ") }
            }
        })?;
        out.insert(k.to_string(), spec.parse(v)?);
    }
    Ok(Params(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPECS: &[ParamSpec] = &[
        ParamSpec { name: "n", default: Default::Int(5), help: "count", kind: Kind::Int { min: 1, max: 10 } },
        ParamSpec { name: "x", default: Default::Float(0.5), help: "x", kind: Kind::Float { min: 0.0, max: 1.0 } },
        ParamSpec { name: "mode", default: Default::Str("a"), help: "m", kind: Kind::Choice(&["a", "b"]) },
        ParamSpec { name: "flag", default: Default::Bool(false), help: "f", kind: Kind::Bool },
    ];

    #[test]
    fn defaults_and_overrides() {
        let p = resolve("t", SPECS, &[]).unwrap();
        assert_eq!(p.int("n"), 5);
        let p = resolve("t", SPECS, &["n=7".into(), "mode=b".into(), "flag=true".into(), "x=0.25".into()]).unwrap();
        assert_eq!((p.int("n"), p.str("mode"), p.bool("flag"), p.float("x")), (7, "b", true, 0.25));
    }

    #[test]
    fn rejects_bad_input() {
        for bad in ["n=0", "n=11", "n=abc", "mode=c", "flag=maybe", "x=2", "x=nan", "zzz=1", "noequals"] {
            let err = resolve("t", SPECS, &[bad.to_string()]).unwrap_err().to_string();
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn messages_name_the_value_and_the_rule() {
        let msg = |kv: &str| resolve("t", SPECS, &[kv.to_string()]).unwrap_err().to_string();
        assert_eq!(msg("n=0"), "invalid value \"0\" for parameter n: must be in 1..10");
        assert_eq!(msg("x=2"), "invalid value \"2\" for parameter x: must be in 0..1");
        assert_eq!(msg("n=abc"), "invalid value \"abc\" for parameter n: expected an integer");
        assert_eq!(msg("mode=c"), "invalid value \"c\" for parameter mode: expected one of a, b");
        assert_eq!(msg("flag=maybe"), "invalid value \"maybe\" for parameter flag: expected true or false");
        assert_eq!(msg("noequals"), "invalid --param \"noequals\": expected key=value");
        assert_eq!(msg("zzz=1"), "unknown parameter \"zzz\" for probe t (known: n, x, mode, flag)");
    }

    #[test]
    fn info_lists_choices_and_ranges() {
        let i = SPECS[2].info();
        assert_eq!(i.choices.unwrap(), vec!["a", "b"]);
        assert!(SPECS[0].info().help.contains("1..10"));
    }
}
