//! `crucible serve` (the API, the queue's housekeeping, and one supervised `crucible worker`
//! child per device) and `crucible worker` (one device's claim loop).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use crucible_judge::{Device, EvalConfig, Runtime};
use crucible_queue::{Store, WorkerInfo};
use crucible_service::{Limits, ServiceConfig};
use crucible_worker::{Engine, EngineOptions, Evaluator, LoopConfig, Tuning};

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Queue URL: `sqlite:///abs/path.db` or `redis://host:port/db`. Default: a SQLite file
    /// under the cache directory.
    #[arg(long, env = "CRUCIBLE_QUEUE")]
    queue: Option<String>,
    /// Address to listen on. Anything but loopback needs a token.
    #[arg(long, default_value = "127.0.0.1:8700")]
    bind: SocketAddr,
    /// Bearer token clients must send (`Authorization: Bearer TOKEN`).
    #[arg(long, env = "CRUCIBLE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Local worker processes: `auto` (one per visible GPU, or one CPU worker), `0` (none: an
    /// API server in front of remote workers) or a number (spread over the devices).
    #[arg(long, default_value = "auto")]
    workers: String,
    /// Devices for the local workers, e.g. `cuda:0,cuda:1` or `cpu`. Default: every visible GPU.
    #[arg(long, value_delimiter = ',')]
    devices: Vec<String>,
    #[command(flatten)]
    worker: WorkerTuning,
    /// Largest `POST /v1/batches` body, in MiB.
    #[arg(long, default_value_t = 64)]
    max_batch_mib: usize,
    /// Most tasks in one batch.
    #[arg(long, default_value_t = 10_000)]
    max_batch_tasks: usize,
    /// The longest `GET /v1/tasks/{id}?wait=` a client may ask for, in seconds.
    #[arg(long, default_value_t = 300.0)]
    max_wait_secs: f64,
    /// On SIGTERM, how long workers may take to finish what they hold before they are killed.
    #[arg(long, default_value_t = 120.0)]
    drain_secs: f64,
}

/// Settings a `serve` passes on to each `worker` child.
#[derive(clap::Args, Clone)]
pub struct WorkerTuning {
    /// Evaluations in flight per worker (default: the engine's own choice).
    #[arg(long)]
    concurrency: Option<usize>,
    /// Harness pairs kept started ahead per worker (default: the engine's, twice the
    /// concurrency on a GPU). A burst of candidates that fail fast empties a shallow pool, and
    /// the next evaluations then wait for a pair to start; each ready pair holds two CUDA
    /// contexts on its GPU.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
    pool_depth: Option<u32>,
    /// At most this many evaluations' untimed GPU work (trials, building models, the precision
    /// measurement) at once per GPU; the rest wait (default: no limit). Each process with work
    /// on a GPU lengthens every other one's waits for results (time slicing).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
    gpu_slots: Option<u32>,
    /// Seconds a claim holds before a silent worker's task is given to another.
    #[arg(long, default_value_t = 60.0)]
    lease_secs: f64,
    /// Start every candidate process as a fresh interpreter, confined between fork and exec,
    /// instead of forking it from the zygote that imported torch and triton (confined by the
    /// same code after the fork).
    #[arg(long)]
    fresh_candidates: bool,
    #[command(flatten)]
    autotune: crate::eval_cmd::AutotuneArg,
    #[command(flatten)]
    gpu: crate::sandbox_cmd::GpuSandboxArg,
}

#[derive(clap::Args)]
pub struct WorkerArgs {
    /// Queue URL (as for `serve`).
    #[arg(long, env = "CRUCIBLE_QUEUE")]
    queue: String,
    /// `cpu` or `cuda:N`; default: cuda:0 if a GPU exists.
    #[arg(long)]
    device: Option<String>,
    /// Stable worker id (restarts are counted against it). Default: HOST:DEVICE.
    #[arg(long)]
    id: Option<String>,
    #[command(flatten)]
    tuning: WorkerTuning,
    /// Also sweep the queue (expired leases, deadlines, retention): `auto` does for Redis, so
    /// that nothing depends on one API server.
    #[arg(long, default_value = "auto", value_parser = ["auto", "on", "off"])]
    sweep: String,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn request_stop(_signal: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// SIGTERM and SIGINT ask for a graceful drain; a second one changes nothing (kill -9 is the
/// way to not wait).
fn install_stop_handler() {
    let handler = request_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGTERM, handler);
        libc::signal(libc::SIGINT, handler);
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

pub fn run_worker(args: WorkerArgs) -> anyhow::Result<ExitCode> {
    install_stop_handler();
    let device = match &args.device {
        Some(name) => name.parse::<Device>().context("--device")?,
        None => Device::detect(),
    };
    let store = Store::open(&args.queue).with_context(|| format!("opening {}", args.queue))?;
    let runtime = Runtime::discover()?;
    let options = EngineOptions {
        concurrency: args
            .tuning
            .concurrency
            .unwrap_or_else(|| default_concurrency(device)),
        ..EngineOptions::default()
    };
    let tuning = Tuning {
        pool_depth: args.tuning.pool_depth.map(|n| n as usize),
        gpu_slots: args.tuning.gpu_slots.map(|n| n as usize),
        fresh_candidates: args.tuning.fresh_candidates,
        // The engine's own default, with the layers and the budget asked for.
        base: Some({
            let mut base = EvalConfig::new(device);
            args.tuning.gpu.apply(&mut base);
            args.tuning.autotune.apply(&mut base);
            base
        }),
        ..Tuning::default()
    };
    let engine = Engine::with_tuning(runtime, device, options, tuning)
        .with_context(|| format!("starting the judge engine on {device}"))?;
    let info = WorkerInfo {
        id: args
            .id
            .clone()
            .unwrap_or_else(|| format!("{}:{device}", hostname())),
        device: device.to_string(),
        gpu_model: engine.gpu_model().map(str::to_string),
        ..WorkerInfo::default()
    };
    let mut config = LoopConfig::new(info, options.concurrency);
    config.lease = secs("--lease-secs", args.tuning.lease_secs)?;
    config.heartbeat = config.heartbeat.min(config.lease / 3);
    let sweeps = match args.sweep.as_str() {
        "on" => true,
        "off" => false,
        _ => store.backend() == "redis",
    };
    config.sweep_every = sweeps.then_some(Duration::from_secs(2));
    run_loop(&store, &engine, &config)
}

/// The engine's own default on a GPU (CPU work of the next candidates overlaps the timed one);
/// on the CPU the Triton interpreter keeps a core busy per evaluation, so one per core.
fn default_concurrency(device: Device) -> usize {
    if device.is_gpu() {
        EngineOptions::default().concurrency
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

fn run_loop(
    store: &Store,
    evaluator: &dyn Evaluator,
    config: &LoopConfig,
) -> anyhow::Result<ExitCode> {
    let report = crucible_worker::run_worker(store, evaluator, config, &STOP)?;
    eprintln!(
        "crucible worker {}: drained ({} completed, {} retried, {} refused, {} stopped by a cancel)",
        config.worker.id, report.completed, report.retried, report.refused, report.stopped
    );
    Ok(ExitCode::SUCCESS)
}

fn secs(flag: &str, value: f64) -> anyhow::Result<Duration> {
    if !(value.is_finite() && value > 0.0 && value < 1e7) {
        bail!("{flag} must be a positive number of seconds");
    }
    Ok(Duration::from_secs_f64(value))
}

/// The default queue: one SQLite file under the cache directory.
fn default_queue() -> anyhow::Result<String> {
    let dir: PathBuf = crucible_judge::runtime::cache_dir().join("service");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(format!("sqlite://{}", dir.join("queue.db").display()))
}

/// GPUs this process may use: `CUDA_VISIBLE_DEVICES` when set, else what `nvidia-smi -L` lists.
fn visible_gpus() -> usize {
    if let Ok(list) = std::env::var("CUDA_VISIBLE_DEVICES") {
        return list
            .split(',')
            .filter(|s| !s.trim().is_empty() && s.trim() != "-1")
            .count();
    }
    Command::new("nvidia-smi")
        .arg("-L")
        .stderr(Stdio::null())
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.starts_with("GPU "))
                .count()
        })
        .unwrap_or(0)
}

/// One entry per local worker: (worker id, device).
fn worker_slots(args: &ServeArgs) -> anyhow::Result<Vec<(String, String)>> {
    let devices: Vec<String> = if args.devices.is_empty() {
        match visible_gpus() {
            0 => vec!["cpu".into()],
            n => (0..n).map(|i| format!("cuda:{i}")).collect(),
        }
    } else {
        for name in &args.devices {
            name.parse::<Device>()
                .with_context(|| format!("--devices: {name}"))?;
        }
        args.devices.clone()
    };
    let count = match args.workers.as_str() {
        "auto" => devices.len(),
        n => n
            .parse::<usize>()
            .with_context(|| format!("--workers must be auto, 0 or a number, not {n:?}"))?,
    };
    let host = hostname();
    Ok((0..count)
        .map(|i| {
            let device = &devices[i % devices.len()];
            let round = i / devices.len();
            let id = if round == 0 {
                format!("{host}:{device}")
            } else {
                format!("{host}:{device}#{round}")
            };
            (id, device.clone())
        })
        .collect())
}

pub fn run_serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    crucible_service::check_bind(args.bind, args.token.as_deref())?;
    let queue = match &args.queue {
        Some(url) => url.clone(),
        None => default_queue()?,
    };
    let store = Arc::new(Store::open(&queue).with_context(|| format!("opening {queue}"))?);
    let slots = worker_slots(&args)?;
    let limits = Limits {
        max_batch_bytes: args.max_batch_mib << 20,
        max_batch_tasks: args.max_batch_tasks,
        max_wait: secs("--max-wait-secs", args.max_wait_secs)?,
        ..Limits::default()
    };
    let config = ServiceConfig {
        limits,
        token: args.token.clone(),
        pages: None,
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(args.bind))
        .with_context(|| format!("binding {}", args.bind))?;
    let stop = Arc::new(AtomicBool::new(false));
    let supervisors = Supervisors::start(&slots, &queue, &args.worker, &store, &stop)?;
    eprintln!(
        "crucible serve: listening on http://{} (queue {queue}, {} local worker(s))",
        listener.local_addr().unwrap_or(args.bind),
        slots.len()
    );
    let config = ServiceConfig {
        pages: Some(crucible_dashboard::router(crucible_dashboard::Dashboard {
            store: Arc::clone(&store),
            token: config.token.clone(),
        })),
        ..config
    };
    let outcome = runtime.block_on(async {
        let sweeper = tokio::spawn(sweep_forever(Arc::clone(&store)));
        let served =
            crucible_service::serve(listener, Arc::clone(&store), config, shutdown_signal()).await;
        sweeper.abort();
        served
    });
    eprintln!("crucible serve: stopping; draining the workers");
    stop.store(true, Ordering::SeqCst);
    supervisors.drain(secs("--drain-secs", args.drain_secs)?);
    outcome?;
    Ok(ExitCode::SUCCESS)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        // Without a SIGTERM handler, Ctrl-C still stops the server.
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Expired leases, deadlines and retention, once a second.
async fn sweep_forever(store: Arc<Store>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let store = Arc::clone(&store);
        match tokio::task::spawn_blocking(move || store.sweep(crucible_queue::now_unix())).await {
            Ok(Ok(report)) if report != crucible_queue::SweepReport::default() => {
                tracing::info!(?report, "swept");
            }
            Ok(Ok(_)) => {}
            Ok(Err(err)) => tracing::warn!(error = %err, "sweep failed"),
            Err(err) => tracing::warn!(error = %err, "sweep panicked"),
        }
    }
}

/// One thread per worker slot that keeps a `crucible worker` child running.
struct Supervisors {
    threads: Vec<std::thread::JoinHandle<()>>,
    pids: Vec<Arc<AtomicU32>>,
}

struct Slot {
    id: String,
    device: String,
    queue: String,
    tuning: WorkerTuning,
    pid: Arc<AtomicU32>,
}

impl Supervisors {
    fn start(
        slots: &[(String, String)],
        queue: &str,
        tuning: &WorkerTuning,
        store: &Arc<Store>,
        stop: &Arc<AtomicBool>,
    ) -> anyhow::Result<Supervisors> {
        let exe = std::env::current_exe().context("locating the crucible binary")?;
        let mut threads = Vec::new();
        let mut pids = Vec::new();
        for (id, device) in slots {
            let slot = Slot {
                id: id.clone(),
                device: device.clone(),
                queue: queue.to_string(),
                tuning: tuning.clone(),
                pid: Arc::new(AtomicU32::new(0)),
            };
            pids.push(Arc::clone(&slot.pid));
            let (exe, store, stop) = (exe.clone(), Arc::clone(store), Arc::clone(stop));
            threads.push(
                std::thread::Builder::new()
                    .name(format!("supervise {id}"))
                    .spawn(move || supervise(&exe, &slot, &store, &stop))
                    .context("starting a supervisor thread")?,
            );
        }
        Ok(Supervisors { threads, pids })
    }

    /// Asks every worker to drain (SIGTERM), waits up to `grace`, then kills what is left.
    fn drain(self, grace: Duration) {
        signal_all(&self.pids, libc::SIGTERM);
        let until = Instant::now() + grace;
        while Instant::now() < until && self.threads.iter().any(|t| !t.is_finished()) {
            std::thread::sleep(Duration::from_millis(50));
        }
        signal_all(&self.pids, libc::SIGKILL);
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

fn signal_all(pids: &[Arc<AtomicU32>], signal: libc::c_int) {
    for pid in pids {
        let pid = pid.load(Ordering::SeqCst);
        if pid != 0 {
            // SAFETY: kill has no memory effects; a stale pid at worst hits nothing we own.
            unsafe {
                libc::kill(pid as libc::pid_t, signal);
            }
        }
    }
}

fn worker_command(exe: &std::path::Path, slot: &Slot) -> Command {
    let mut cmd = Command::new(exe);
    cmd.args([
        "worker",
        "--queue",
        &slot.queue,
        "--device",
        &slot.device,
        "--id",
        &slot.id,
    ])
    .arg("--lease-secs")
    .arg(slot.tuning.lease_secs.to_string());
    if let Some(n) = slot.tuning.concurrency {
        cmd.arg("--concurrency").arg(n.to_string());
    }
    if let Some(n) = slot.tuning.pool_depth {
        cmd.arg("--pool-depth").arg(n.to_string());
    }
    if let Some(n) = slot.tuning.gpu_slots {
        cmd.arg("--gpu-slots").arg(n.to_string());
    }
    if slot.tuning.fresh_candidates {
        cmd.arg("--fresh-candidates");
    }
    if let Some(layers) = slot.tuning.gpu.gpu_sandbox {
        cmd.arg("--gpu-sandbox").arg(layers.names());
    }
    if let Some(budget) = slot.tuning.autotune.autotune_budget {
        cmd.arg("--autotune-budget").arg(budget.to_string());
    }
    cmd.stdin(Stdio::null());
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe. A worker whose server died (even by kill -9) gets
    // SIGTERM and drains instead of lingering as an orphan.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    cmd
}

/// Restarts the slot's worker whenever it exits, waiting longer after each quick death (1 s,
/// doubling to 30 s; back to 1 s after a minute of uptime), and counts every restart.
fn supervise(exe: &std::path::Path, slot: &Slot, store: &Store, stop: &AtomicBool) {
    let mut backoff = Duration::from_secs(1);
    let mut first = true;
    while !stop.load(Ordering::SeqCst) {
        if !first && let Err(err) = store.note_restart(&slot.id) {
            tracing::warn!(error = %err, worker = %slot.id, "could not count a restart");
        }
        first = false;
        let started = Instant::now();
        let mut child = match worker_command(exe, slot).spawn() {
            Ok(child) => child,
            Err(err) => {
                tracing::error!(error = %err, worker = %slot.id, "cannot start a worker");
                sleep_unless(stop, backoff);
                backoff = (backoff * 2).min(Duration::from_secs(30));
                continue;
            }
        };
        slot.pid.store(child.id(), Ordering::SeqCst);
        let status = child.wait();
        slot.pid.store(0, Ordering::SeqCst);
        if stop.load(Ordering::SeqCst) {
            return;
        }
        tracing::warn!(worker = %slot.id, ?status, "worker exited; restarting");
        eprintln!(
            "crucible serve: worker {} exited ({status:?}); restarting",
            slot.id
        );
        if started.elapsed() > Duration::from_secs(60) {
            backoff = Duration::from_secs(1);
        }
        sleep_unless(stop, backoff);
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

fn sleep_unless(flag: &AtomicBool, total: Duration) {
    let until = Instant::now() + total;
    while !flag.load(Ordering::SeqCst) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Tuned {
        #[command(flatten)]
        tuning: WorkerTuning,
    }

    /// What `serve` was asked for reaches each worker it starts, as flags `worker` parses back.
    #[test]
    fn a_worker_gets_the_servers_tuning() {
        let tuned = Tuned::try_parse_from([
            "serve",
            "--concurrency",
            "4",
            "--gpu-slots",
            "3",
            "--autotune-budget",
            "2/10",
        ])
        .expect("valid flags");
        let slot = Slot {
            id: "host:cuda:1".into(),
            device: "cuda:1".into(),
            queue: "sqlite:///tmp/q.db".into(),
            tuning: tuned.tuning,
            pid: Arc::new(AtomicU32::new(0)),
        };
        let command = worker_command(std::path::Path::new("crucible"), &slot);
        let args: Vec<String> = command
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let mut worker = vec!["crucible".to_string()];
        worker.extend(args.iter().skip(1).cloned());
        let back = WorkerCli::try_parse_from(&worker).expect("the worker parses its flags");
        assert_eq!(args[0], "worker");
        assert_eq!(back.worker.tuning.concurrency, Some(4));
        assert_eq!(back.worker.tuning.gpu_slots, Some(3));
        assert_eq!(
            back.worker.tuning.autotune.autotune_budget,
            Some(crucible_judge::AutotuneBudget {
                warmup_ms: 2,
                rep_ms: 10
            })
        );
        assert!(
            Tuned::try_parse_from(["serve", "--autotune-budget", "quick"]).is_err(),
            "a budget that is neither a name nor WARMUP/REP is refused"
        );
    }

    #[derive(Parser)]
    struct WorkerCli {
        #[command(flatten)]
        worker: WorkerArgs,
    }
}
