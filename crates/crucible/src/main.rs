//! `crucible`: thin glue that parses arguments and wires the library crates together.

mod agent_cmd;
mod audit_cmd;
mod bench_cmd;
mod bench_load_cmd;
mod eval_cmd;
mod gpu_busy;
mod report_cmd;
mod rl_cmd;
mod sandbox_cmd;
mod serve_cmd;
mod service_judge;
#[cfg(test)]
mod test_results;
mod throughput_cmd;
mod verify_cmd;

use clap::{Parser, Subcommand};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "crucible",
    version,
    about = "Judge and RL toolkit for Triton kernels"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Evaluate candidate solutions against KernelBench-format tasks.
    Eval(eval_cmd::EvalArgs),
    /// Measure the judge's own overhead per evaluation, by stage.
    BenchOverhead(bench_cmd::BenchArgs),
    /// Evaluations per hour for a fixed mixed set, with the service engine on and off.
    BenchThroughput(throughput_cmd::ThroughputArgs),
    /// Run null candidates against every task of a suite and list the degenerate tasks.
    Audit(audit_cmd::AuditArgs),
    /// Print the table of earlier results (JSON lines written by `eval --out`).
    Report(report_cmd::ReportArgs),
    /// Run the static verifier on candidate files.
    Verify(verify_cmd::VerifyArgs),
    /// Print the reward of one judge result.
    Reward(rl_cmd::RewardArgs),
    /// Run a command confined like a candidate (to see what it needs from the sandbox).
    SandboxExec(sandbox_cmd::SandboxExecArgs),
    /// Compute advantages (and rejection-sampling masks) over a trajectory batch.
    Advantages(rl_cmd::AdvantagesArgs),
    /// Run a model against a suite, turn after turn, and report Fast@p (JSON, CSV, PNG, HTML).
    Bench(agent_cmd::BenchArgs),
    /// Run a model against a suite and write RL trajectories with rewards and advantages.
    Rollout(agent_cmd::RolloutArgs),
    /// Run a teacher model and keep correct, honest, fast trajectories as an SFT set.
    Distill(agent_cmd::DistillArgs),
    /// Run the judge as a service: the HTTP API, the queue and one worker per GPU.
    Serve(serve_cmd::ServeArgs),
    /// Judge queued tasks on one device (started by `serve`, or on other nodes with Redis).
    Worker(serve_cmd::WorkerArgs),
    /// Measure the API's submit rate and latency on loopback, with and without a deep queue.
    BenchLoad(bench_load_cmd::BenchLoadArgs),
}

fn main() -> std::process::ExitCode {
    // Die quietly on a closed pipe (`crucible ... | head`), like other Unix tools.
    // SAFETY: resetting a signal disposition before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CRUCIBLE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Eval(args) => eval_cmd::run(args),
        Command::Audit(args) => audit_cmd::run(args),
        Command::Report(args) => report_cmd::run(args),
        Command::BenchOverhead(args) => bench_cmd::run(args),
        Command::BenchThroughput(args) => throughput_cmd::run(args),
        Command::Verify(args) => verify_cmd::run(args),
        Command::Reward(args) => rl_cmd::run_reward(args),
        Command::Advantages(args) => rl_cmd::run_advantages(args),
        Command::SandboxExec(args) => sandbox_cmd::run_exec(args),
        Command::Bench(args) => agent_cmd::run_bench(args),
        Command::Rollout(args) => agent_cmd::run_rollout(args),
        Command::Distill(args) => agent_cmd::run_distill(args),
        Command::Serve(args) => serve_cmd::run_serve(args),
        Command::Worker(args) => serve_cmd::run_worker(args),
        Command::BenchLoad(args) => bench_load_cmd::run(args),
    };
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::from(2)
        }
    }
}
