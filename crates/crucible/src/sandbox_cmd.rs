//! The sandbox options shared by `eval` and `bench-overhead`, and `crucible sandbox-exec`, which
//! runs any command confined like a candidate (to find out what a program needs from it).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use crucible_judge::{EvalConfig, Runtime, Sandbox, sandbox::Layers};

#[derive(Args, Debug, Clone)]
pub struct SandboxArgs {
    /// Run the candidate without the sandbox (debugging only).
    #[arg(long)]
    no_sandbox: bool,
    #[command(flatten)]
    gpu: GpuSandboxArg,
}

impl SandboxArgs {
    pub fn apply(&self, cfg: &mut EvalConfig) {
        if self.no_sandbox {
            cfg.sandbox = None;
        }
        self.gpu.apply(cfg);
    }
}

/// `--gpu-sandbox`, also on `serve` and `worker` (which have no `--no-sandbox`).
#[derive(Args, Debug, Clone, Copy)]
pub struct GpuSandboxArg {
    /// Sandbox layers for a candidate on a GPU: `all`, `none` or a comma list of landlock,
    /// seccomp, pid, ipc, user, root (default: the layers CUDA is known to work under).
    #[arg(long, env = "CRUCIBLE_GPU_SANDBOX", value_parser = Layers::parse)]
    pub gpu_sandbox: Option<Layers>,
}

impl GpuSandboxArg {
    /// Sets the layers a candidate on a GPU gets, where the option was given.
    pub fn apply(&self, cfg: &mut EvalConfig) {
        if let (Some(sandbox), Some(layers)) = (cfg.sandbox.as_mut(), self.gpu_sandbox) {
            sandbox.gpu_layers = layers;
        }
    }
}

#[derive(Args, Debug)]
pub struct SandboxExecArgs {
    /// Layers to apply on a GPU: `all`, `none` or a comma list of landlock, seccomp, pid, ipc,
    /// user, root (default: all; without --gpu every layer applies).
    #[arg(long, requires = "gpu", value_parser = Layers::parse)]
    layers: Option<Layers>,
    /// Open the NVIDIA device files, as for a candidate on a GPU.
    #[arg(long)]
    gpu: bool,
    /// Directories the command may write (its scratch; Landlock).
    #[arg(long = "rw")]
    read_write: Vec<PathBuf>,
    /// Further directories the command may read and execute (Landlock).
    #[arg(long = "ro")]
    read_only: Vec<PathBuf>,
    /// Most tasks (processes and threads) the command may have at once.
    #[arg(long, default_value_t = Sandbox::default().max_processes)]
    max_processes: u64,
    /// Leave out Landlock's signal and abstract-socket scoping (to diagnose).
    #[arg(long, hide = true)]
    no_landlock_scoping: bool,
    /// The command and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

pub fn run_exec(args: SandboxExecArgs) -> anyhow::Result<ExitCode> {
    let runtime = Runtime::discover()?;
    let sandbox = Sandbox {
        read_write: args.read_write,
        read_only: args.read_only,
        gpu_devices: args.gpu,
        max_processes: args.max_processes,
        gpu_layers: args.layers.unwrap_or(Layers::ALL),
        landlock_scoping: !args.no_landlock_scoping,
        ..Sandbox::default()
    };
    for missing in sandbox.missing_features() {
        eprintln!("sandbox: without {missing}");
    }
    let (program, rest) = args.command.split_first().context("no command given")?;
    let mut command = std::process::Command::new(program);
    command.args(rest);
    let status = sandbox
        .run(&runtime.python, &mut command)
        .with_context(|| format!("cannot run {program} in the sandbox"))?;
    Ok(match status.code() {
        Some(code) => ExitCode::from(code.clamp(0, 255) as u8),
        None => {
            eprintln!("{program}: {status}");
            ExitCode::from(128)
        }
    })
}
