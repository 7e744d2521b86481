//! `crucible verify` (owned by the verifier work; placeholder until it lands).
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct VerifyArgs {
    files: Vec<std::path::PathBuf>,
}

pub fn run(_args: VerifyArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("crucible verify is not wired yet")
}
