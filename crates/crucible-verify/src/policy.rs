//! Policies: which severity each rule reports at.
//!
//! A policy is a named preset (`strict`, `kernelbench`, `lenient`) plus per-code overrides.
//! The presets live next to each rule (its `strict` / `kernelbench` / `lenient` levels), so a
//! rule and its severities are read in one place. `Policy::from_file` is the only function of
//! this crate that does I/O.

use std::path::{Path, PathBuf};

use crucible_result::Severity;
use serde::Deserialize;

use crate::rules::{RULES, RuleInfo};

/// The names of the presets, in the order they are documented.
pub const PRESETS: [&str; 3] = ["strict", "kernelbench", "lenient"];

/// The severity a policy assigns to one rule; `Off` disables the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    Off,
    Info,
    Flag,
    Reject,
}

impl Level {
    /// The finding severity at this level; `None` for `Off`.
    pub fn severity(self) -> Option<Severity> {
        match self {
            Level::Off => None,
            Level::Info => Some(Severity::Info),
            Level::Flag => Some(Severity::Flag),
            Level::Reject => Some(Severity::Reject),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Off => "off",
            Level::Info => "info",
            Level::Flag => "flag",
            Level::Reject => "reject",
        }
    }

    fn parse(value: &str) -> Option<Level> {
        match value {
            "off" => Some(Level::Off),
            "info" => Some(Level::Info),
            "flag" => Some(Level::Flag),
            "reject" => Some(Level::Reject),
            _ => None,
        }
    }
}

/// Why a policy could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unknown policy preset `{0}`; expected one of: strict, kernelbench, lenient")]
    UnknownPreset(String),
    #[error("unknown rule code `{0}`; `crucible verify --list-rules` lists the codes")]
    UnknownCode(String),
    #[error("invalid severity `{value}` for `{code}`; expected reject, flag, info or off")]
    InvalidLevel { code: String, value: String },
    #[error("`syntax-error` is always `reject` and cannot be overridden")]
    FixedRule,
    #[error("cannot read policy file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid policy file {}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
}

/// The severity of every rule. Build one with [`Policy::preset`] or [`Policy::from_file`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    name: String,
    /// One level per entry of [`RULES`], in the same order.
    levels: Vec<Level>,
}

impl Default for Policy {
    /// The `strict` preset, the default for RL.
    fn default() -> Self {
        Policy::build("strict", |rule| rule.strict)
    }
}

/// The on-disk form of a policy file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    preset: Option<String>,
    #[serde(default)]
    severity: std::collections::BTreeMap<String, String>,
}

impl Policy {
    fn build(name: &str, level: impl Fn(&RuleInfo) -> Level) -> Policy {
        Policy {
            name: name.to_string(),
            levels: RULES.iter().map(|r| level(&r.info)).collect(),
        }
    }

    /// One of the named presets: `strict` (the default for RL), `kernelbench` or `lenient`.
    pub fn preset(name: &str) -> Result<Policy, Error> {
        match name {
            "strict" => Ok(Policy::build(name, |r| r.strict)),
            "kernelbench" => Ok(Policy::build(name, |r| r.kernelbench)),
            "lenient" => Ok(Policy::build(name, |r| r.lenient)),
            other => Err(Error::UnknownPreset(other.to_string())),
        }
    }

    /// Reads a TOML policy file: an optional `preset = "..."` base (default `strict`) and a
    /// `[severity]` table of `code = "reject" | "flag" | "info" | "off"` overrides.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Policy, Error> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Policy::from_toml(&text).map_err(|err| match err {
            Error::Parse { message, .. } => Error::Parse {
                path: path.to_path_buf(),
                message,
            },
            other => other,
        })
    }

    /// Parses the text of a policy file (see [`Policy::from_file`]).
    pub fn from_toml(text: &str) -> Result<Policy, Error> {
        let file: PolicyFile = toml::from_str(text).map_err(|err| Error::Parse {
            path: PathBuf::from("<policy>"),
            message: err.to_string().trim_end().to_string(),
        })?;
        let base = file.preset.as_deref().unwrap_or("strict");
        let mut policy = Policy::preset(base)?;
        for (code, value) in &file.severity {
            let level = Level::parse(value).ok_or_else(|| Error::InvalidLevel {
                code: code.clone(),
                value: value.clone(),
            })?;
            policy.set(code, level)?;
        }
        if !file.severity.is_empty() {
            policy.name = format!("{base}+overrides");
        }
        Ok(policy)
    }

    /// Overrides the level of one rule.
    pub fn set(&mut self, code: &str, level: Level) -> Result<(), Error> {
        if code == crate::rules::syntax_error::SYNTAX_ERROR.code {
            return if level == Level::Reject {
                Ok(())
            } else {
                Err(Error::FixedRule)
            };
        }
        let index = RULES
            .iter()
            .position(|r| r.info.code == code)
            .ok_or_else(|| Error::UnknownCode(code.to_string()))?;
        self.levels[index] = level;
        Ok(())
    }

    /// The preset this policy was built from (with `+overrides` when a file changed it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The level of the rule with `code`, or `None` for an unknown code.
    pub fn level(&self, code: &str) -> Option<Level> {
        RULES
            .iter()
            .position(|r| r.info.code == code)
            .map(|i| self.levels[i])
    }

    pub(crate) fn level_at(&self, index: usize) -> Level {
        self.levels.get(index).copied().unwrap_or(Level::Off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_differ_where_documented() {
        let strict = Policy::preset("strict").unwrap();
        let kb = Policy::preset("kernelbench").unwrap();
        let lenient = Policy::preset("lenient").unwrap();
        assert_eq!(strict, Policy::default());
        assert_eq!(
            strict.level("torch-compute-in-forward"),
            Some(Level::Reject)
        );
        assert_eq!(lenient.level("torch-compute-in-forward"), Some(Level::Flag));
        assert_eq!(kb.level("unexpected-import"), Some(Level::Off));
        assert!(matches!(
            Policy::preset("paranoid"),
            Err(Error::UnknownPreset(_))
        ));
    }

    #[test]
    fn toml_overrides_apply_on_top_of_the_preset() {
        let p = Policy::from_toml(
            "preset = \"kernelbench\"\n[severity]\ntorch-compute-in-forward = \"flag\"\nmonkeypatch = \"off\"\n",
        )
        .unwrap();
        assert_eq!(p.level("torch-compute-in-forward"), Some(Level::Flag));
        assert_eq!(p.level("monkeypatch"), Some(Level::Off));
        assert_eq!(p.level("no-triton-kernel"), Some(Level::Reject));
        assert_eq!(p.name(), "kernelbench+overrides");
        // No preset means strict.
        assert_eq!(Policy::from_toml("").unwrap(), Policy::default());
    }

    #[test]
    fn bad_policy_files_are_explained() {
        let unknown = Policy::from_toml("[severity]\ntorch-in-forward = \"flag\"\n");
        assert!(matches!(unknown, Err(Error::UnknownCode(c)) if c == "torch-in-forward"));
        let level = Policy::from_toml("[severity]\nmonkeypatch = \"warn\"\n");
        assert!(matches!(level, Err(Error::InvalidLevel { .. })));
        let fixed = Policy::from_toml("[severity]\nsyntax-error = \"off\"\n");
        assert!(matches!(fixed, Err(Error::FixedRule)));
        let syntax = Policy::from_toml("preset = ");
        assert!(matches!(syntax, Err(Error::Parse { .. })));
        let field = Policy::from_toml("presets = \"strict\"");
        assert!(matches!(field, Err(Error::Parse { .. })));
        let missing = Policy::from_file("/nonexistent/crucible-policy.toml");
        assert!(matches!(missing, Err(Error::Read { .. })));
    }
}
