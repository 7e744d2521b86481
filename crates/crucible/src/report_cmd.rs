//! `crucible report`: the batch table over result files written by `crucible eval --out`.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use crucible_result::EvalResult;

#[derive(clap::Args)]
pub struct ReportArgs {
    /// JSON-lines files of results.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

pub fn run(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let mut results = Vec::new();
    for path in &args.files {
        let file =
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        for (number, line) in std::io::BufReader::new(file).lines().enumerate() {
            let line = line.with_context(|| format!("cannot read {}", path.display()))?;
            if line.trim().is_empty() {
                continue;
            }
            let result: EvalResult = serde_json::from_str(&line).with_context(|| {
                format!("{}:{}: not a crucible result", path.display(), number + 1)
            })?;
            results.push(result);
        }
    }
    crate::eval_cmd::print_table(&results);
    Ok(ExitCode::SUCCESS)
}
