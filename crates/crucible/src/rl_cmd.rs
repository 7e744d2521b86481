//! `crucible reward` and `crucible advantages` (owned by the RL work; placeholder until it lands).
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct RewardArgs {
    result: std::path::PathBuf,
}

#[derive(clap::Args)]
pub struct AdvantagesArgs {
    input: std::path::PathBuf,
}

pub fn run_reward(_args: RewardArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("crucible reward is not wired yet")
}

pub fn run_advantages(_args: AdvantagesArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("crucible advantages is not wired yet")
}
