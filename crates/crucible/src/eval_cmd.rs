//! `crucible eval` (placeholder until the judge lands).
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct EvalArgs {
    #[arg(long)]
    task: Option<std::path::PathBuf>,
}

pub fn run(_args: EvalArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("crucible eval is not wired yet")
}
