//! `crucible verify`: the static verifier over candidate files.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use crucible_verify::{Policy, Report};

#[derive(clap::Args)]
pub struct VerifyArgs {
    /// Candidate solution files (Python, KernelBench format).
    #[arg(required_unless_present = "list_rules")]
    files: Vec<PathBuf>,
    /// Policy preset: `strict` (the default), `kernelbench` or `lenient`.
    #[arg(long, value_name = "PRESET", conflicts_with = "policy_file")]
    policy: Option<String>,
    /// TOML policy file: `preset = "..."` plus a `[severity]` table of per-code overrides.
    #[arg(long, value_name = "FILE")]
    policy_file: Option<PathBuf>,
    /// Print one JSON array (one entry per file) instead of text.
    #[arg(long)]
    json: bool,
    /// Print the rule reference (docs/verifier-rules.md) as Markdown and exit.
    #[arg(long)]
    list_rules: bool,
}

pub fn run(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    if args.list_rules {
        print!("{}", crucible_verify::rules_markdown());
        return Ok(ExitCode::SUCCESS);
    }
    let policy = match (&args.policy, &args.policy_file) {
        (_, Some(path)) => Policy::from_file(path)?,
        (Some(name), None) => Policy::preset(name)?,
        (None, None) => Policy::default(),
    };
    // Read every file first, so a bad path fails before any output.
    let mut sources = Vec::with_capacity(args.files.len());
    for path in &args.files {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read candidate file {}", path.display()))?;
        sources.push(text);
    }
    let reports: Vec<Report> = sources
        .iter()
        .map(|source| crucible_verify::verify(source, &policy))
        .collect();
    let rejected = reports.iter().filter(|r| r.rejected()).count();
    if args.json {
        let entries: Vec<serde_json::Value> = args
            .files
            .iter()
            .zip(&reports)
            .map(|(path, report)| {
                serde_json::json!({
                    "file": path.display().to_string(),
                    "rejected": report.rejected(),
                    "findings": report.findings,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&entries)?);
    } else {
        for (path, report) in args.files.iter().zip(&reports) {
            print!("{}", render_text(path, report));
        }
        eprintln!(
            "{} file(s) checked with policy `{}`: {rejected} rejected",
            reports.len(),
            policy.name()
        );
    }
    Ok(if rejected > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// `file:line:col: severity code: message`, one finding per line.
fn render_text(path: &Path, report: &Report) -> String {
    let mut out = String::new();
    for f in &report.findings {
        let severity = match f.severity {
            crucible_result::Severity::Info => "info",
            crucible_result::Severity::Flag => "flag",
            crucible_result::Severity::Reject => "reject",
        };
        let _ = match (f.line, f.column) {
            (Some(line), Some(col)) => writeln!(
                out,
                "{}:{line}:{col}: {severity} {}: {}",
                path.display(),
                f.code,
                f.message
            ),
            _ => writeln!(
                out,
                "{}: {severity} {}: {}",
                path.display(),
                f.code,
                f.message
            ),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(files: Vec<PathBuf>) -> VerifyArgs {
        VerifyArgs {
            files,
            policy: None,
            policy_file: None,
            json: false,
            list_rules: false,
        }
    }

    #[test]
    fn missing_file_is_a_clear_error() {
        let missing = PathBuf::from("/nonexistent/candidate.py");
        let err = run(args(vec![missing])).err().map(|e| format!("{e:#}"));
        let err = err.unwrap_or_default();
        assert!(
            err.contains("cannot read candidate file /nonexistent/candidate.py"),
            "{err}"
        );
    }

    #[test]
    fn rejected_file_exits_one_and_prints_positions() {
        let dir = std::env::temp_dir().join(format!("crucible-verify-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.py");
        std::fs::write(&bad, "class ModelNew(nn.Module)\n    pass\n").unwrap();
        let code = run(args(vec![bad.clone()])).unwrap();
        assert_eq!(format!("{code:?}"), format!("{:?}", ExitCode::from(1)));
        let report = crucible_verify::verify("def f(:\n", &Policy::default());
        let text = render_text(Path::new("x.py"), &report);
        assert!(
            text.starts_with("x.py:1:7: reject syntax-error: "),
            "{text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unknown_preset_is_an_error() {
        let mut a = args(vec![PathBuf::from("x.py")]);
        a.policy = Some("paranoid".into());
        let err = run(a).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("unknown policy preset `paranoid`"), "{err}");
    }
}
