//! `crucible bench-load`: the API's submit path under load, on loopback only. Starts its own
//! server in this process (no workers) over a fresh store, sends single submits from concurrent
//! clients and reports submissions per second and p50/p99 latency; then fills the queue to
//! `--backlog` tasks with batch submits and measures submits and claims again, to show whether a
//! deep queue slows them down. Bounded in requests and time; stops by itself.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use crucible_queue::{Store, WorkerInfo};
use crucible_service::{Limits, ServiceConfig};
use serde_json::json;

#[derive(clap::Args)]
pub struct BenchLoadArgs {
    /// Queue URL; default: a SQLite file in a temporary directory (deleted afterwards). A Redis
    /// queue must be a scratch database: the benchmark leaves its tasks there.
    #[arg(long)]
    queue: Option<String>,
    /// Single submits per measurement.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(100..=1_000_000))]
    requests: u64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=1024))]
    clients: u64,
    /// Queued tasks to add before the second measurement.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    backlog: u64,
    /// Claims timed (one at a time) in each claim measurement.
    #[arg(long, default_value_t = 1_000)]
    claims: u64,
    /// Print the figures as one JSON document.
    #[arg(long)]
    json: bool,
}

/// Latency figures of one measurement, in milliseconds.
#[derive(serde::Serialize)]
struct Figures {
    count: u64,
    per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

fn figures(mut latencies: Vec<Duration>, wall: Duration) -> Figures {
    latencies.sort_unstable();
    let at = |q: f64| {
        let i = ((latencies.len() as f64 - 1.0) * q).round() as usize;
        latencies.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    Figures {
        count: latencies.len() as u64,
        per_second: latencies.len() as f64 / wall.as_secs_f64().max(1e-9),
        p50_ms: at(0.50),
        p99_ms: at(0.99),
        max_ms: at(1.0),
    }
}

/// A small, realistic submission; `n` makes every one distinct (no duplicate sharing).
fn submission(n: u64) -> serde_json::Value {
    json!({
        "task_name": "bench_relu",
        "task_source": format!("import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n\ndef get_inputs():\n    return [torch.randn(4096)]\n\ndef get_init_inputs():\n    return []\n"),
        "candidate_source": format!("# candidate {n}\nimport torch\nimport triton\nimport triton.language as tl\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"),
        "client": format!("client{}", n % 8),
        "priority": (n % 5) as i32 - 2,
    })
}

pub fn run(args: BenchLoadArgs) -> anyhow::Result<ExitCode> {
    let scratch = tempfile::tempdir().context("temporary directory")?;
    let queue = match &args.queue {
        Some(url) => url.clone(),
        None => format!("sqlite://{}", scratch.path().join("bench.db").display()),
    };
    let store = Arc::new(Store::open(&queue).with_context(|| format!("opening {queue}"))?);
    let runtime = tokio::runtime::Runtime::new().context("async runtime")?;
    let report = runtime.block_on(measure(&args, Arc::clone(&store)))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&queue, &args, &report);
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(serde::Serialize)]
struct Report {
    submit_empty: Figures,
    claim_empty: Figures,
    backlog_fill_s: f64,
    backlog_tasks_per_second: f64,
    submit_backlog: Figures,
    claim_backlog: Figures,
}

async fn measure(args: &BenchLoadArgs, store: Arc<Store>) -> anyhow::Result<Report> {
    let listener = tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .context("binding a loopback port")?;
    let addr = listener.local_addr()?;
    let config = ServiceConfig {
        limits: Limits::default(),
        token: None,
        pages: None,
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(crucible_service::serve(
        listener,
        Arc::clone(&store),
        config,
        async {
            let _ = stop_rx.await;
        },
    ));
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.clients as usize)
        .build()?;
    let base = format!("http://{addr}");
    // Warm-up: connections and the store's first pages.
    submit_load(&http, &base, args.clients.min(200), args.clients, 0).await?;
    let submit_empty = submit_load(&http, &base, args.requests, args.clients, 1_000).await?;
    let claim_empty = claim_load(&store, args.claims).await?;
    let fill = Instant::now();
    fill_backlog(&http, &base, args.backlog).await?;
    let fill_s = fill.elapsed().as_secs_f64();
    let submit_backlog = submit_load(&http, &base, args.requests, args.clients, 10_000_000).await?;
    let claim_backlog = claim_load(&store, args.claims).await?;
    let _ = stop_tx.send(());
    server.await??;
    Ok(Report {
        submit_empty,
        claim_empty,
        backlog_fill_s: fill_s,
        backlog_tasks_per_second: args.backlog as f64 / fill_s.max(1e-9),
        submit_backlog,
        claim_backlog,
    })
}

/// `requests` single submits from `clients` concurrent clients.
async fn submit_load(
    http: &reqwest::Client,
    base: &str,
    requests: u64,
    clients: u64,
    offset: u64,
) -> anyhow::Result<Figures> {
    let started = Instant::now();
    let mut handles = Vec::new();
    for client in 0..clients {
        let (http, url) = (http.clone(), format!("{base}/v1/tasks"));
        let mine: Vec<u64> = (client..requests).step_by(clients as usize).collect();
        handles.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(mine.len());
            for n in mine {
                let body = submission(offset + n);
                let sent = Instant::now();
                let response = http.post(&url).json(&body).send().await?;
                let status = response.status();
                response.bytes().await?;
                latencies.push(sent.elapsed());
                if status.as_u16() != 202 {
                    bail!("submit answered {status}");
                }
            }
            Ok::<_, anyhow::Error>(latencies)
        }));
    }
    let mut all = Vec::with_capacity(requests as usize);
    for handle in handles {
        all.extend(handle.await??);
    }
    Ok(figures(all, started.elapsed()))
}

/// Fills the queue with batch submits of 10,000.
async fn fill_backlog(http: &reqwest::Client, base: &str, backlog: u64) -> anyhow::Result<()> {
    let mut sent = 0;
    while sent < backlog {
        let n = (backlog - sent).min(10_000);
        let tasks: Vec<_> = (0..n).map(|i| submission(50_000_000 + sent + i)).collect();
        let response = http
            .post(format!("{base}/v1/batches"))
            .json(&json!({ "tasks": tasks }))
            .send()
            .await?;
        if response.status().as_u16() != 202 {
            bail!("batch submit answered {}", response.status());
        }
        sent += n;
    }
    Ok(())
}

/// `count` claims, one at a time, straight on the store (what a worker does).
async fn claim_load(store: &Arc<Store>, count: u64) -> anyhow::Result<Figures> {
    let store = Arc::clone(store);
    tokio::task::spawn_blocking(move || {
        let worker = WorkerInfo {
            id: "bench-load".into(),
            device: "cpu".into(),
            versions: "bench".into(),
            ..WorkerInfo::default()
        };
        let started = Instant::now();
        let mut latencies = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let t = Instant::now();
            if store.claim(&worker, Duration::from_secs(3600))?.is_none() {
                break;
            }
            latencies.push(t.elapsed());
        }
        Ok::<_, anyhow::Error>(figures(latencies, started.elapsed()))
    })
    .await?
}

fn print_report(queue: &str, args: &BenchLoadArgs, r: &Report) {
    let backend = queue.split("://").next().unwrap_or("?");
    println!(
        "crucible bench-load: {backend} store, {} clients, loopback, no workers",
        args.clients
    );
    println!(
        "{:<34} {:>9} {:>10} {:>9} {:>9} {:>9}",
        "measurement", "count", "per s", "p50 ms", "p99 ms", "max ms"
    );
    let row = |name: &str, f: &Figures| {
        println!(
            "{name:<34} {:>9} {:>10.0} {:>9.2} {:>9.2} {:>9.2}",
            f.count, f.per_second, f.p50_ms, f.p99_ms, f.max_ms
        );
    };
    row("submit (queue nearly empty)", &r.submit_empty);
    row("claim (queue nearly empty)", &r.claim_empty);
    row(
        &format!("submit ({} more queued)", args.backlog),
        &r.submit_backlog,
    );
    row(
        &format!("claim ({} more queued)", args.backlog),
        &r.claim_backlog,
    );
    println!(
        "backlog of {} added by batch submits in {:.1} s ({:.0} tasks/s)",
        args.backlog, r.backlog_fill_s, r.backlog_tasks_per_second
    );
}
