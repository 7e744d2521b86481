//! A store with finished evaluations whose result documents the real judge wrote (fixtures:
//! two from an H200, one from the CPU), and a dashboard served on a real loopback socket.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crucible_dashboard::{Dashboard, router};
use crucible_queue::{Store, TaskSpec, WorkerInfo};

pub const GPU_CORRECT: &str = include_str!("../fixtures/gpu_correct.json");
pub const GPU_TIMER_TAMPER: &str = include_str!("../fixtures/gpu_timer_tamper.json");
pub const CPU_DECOY: &str = include_str!("../fixtures/cpu_decoy_rejected.json");
pub const DECOY_SOURCE: &str = include_str!("../fixtures/decoy_kernel.py");
pub const RELU_SOLUTION: &str = include_str!("../fixtures/relu_solution.py");
pub const RELU_TASK: &str = include_str!("../fixtures/relu_task.py");
/// A candidate string that would run script in the page if anything were left unescaped.
pub const HOSTILE: &str = "# </code></pre><script>alert('pwned')</script>\n";

/// (fixture name, candidate source, result document)
pub fn fixtures() -> Vec<(&'static str, String, &'static str)> {
    vec![
        (
            "gpu_correct",
            format!("{HOSTILE}{RELU_SOLUTION}"),
            GPU_CORRECT,
        ),
        (
            "gpu_timer_tamper",
            RELU_SOLUTION.replace("relu", "relu_tampered"),
            GPU_TIMER_TAMPER,
        ),
        ("cpu_decoy", DECOY_SOURCE.to_string(), CPU_DECOY),
    ]
}

/// Submits `copies` of every fixture and completes each with its fixture document, the way a
/// worker would. Returns the task ids per fixture name, in submission order.
pub fn populate(store: &Store, copies: usize) -> Vec<(String, String)> {
    let mut specs = Vec::new();
    for copy in 0..copies {
        for (name, source, _) in fixtures() {
            // Distinct sources so neither the cache nor duplicate sharing answers them.
            let mut spec =
                TaskSpec::new("01_relu", RELU_TASK, format!("{source}\n# copy {copy}\n"));
            spec.labels.insert("fixture".into(), name.into());
            specs.push(spec);
        }
    }
    let ids = store.submit(None, specs).expect("submit");
    let worker = WorkerInfo {
        id: "test:cpu".into(),
        device: "cpu".into(),
        versions: "test".into(),
        ..WorkerInfo::default()
    };
    while let Some(lease) = store
        .claim(&worker, Duration::from_secs(60))
        .expect("claim")
    {
        let name = lease.spec.labels["fixture"]
            .as_str()
            .expect("fixture label")
            .to_string();
        let (_, _, doc) = fixtures()
            .into_iter()
            .find(|(n, _, _)| *n == name)
            .expect("fixture");
        let result: serde_json::Value = serde_json::from_str(doc).expect("fixture JSON");
        assert!(store.complete(&lease, result).expect("complete"));
    }
    ids.into_iter()
        .enumerate()
        .map(|(i, id)| (fixtures()[i % 3].0.to_string(), id))
        .collect()
}

/// Serves the dashboard on a free loopback port from a runtime of its own.
pub fn serve(store: Arc<Store>, token: Option<&str>) -> (SocketAddr, tokio::runtime::Runtime) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = router(Dashboard {
        store,
        token: token.map(str::to_string),
    });
    runtime.spawn(async move { axum::serve(listener, app).await });
    (addr, runtime)
}

/// GET over a plain TCP socket (HTTP/1.0, so the server closes the connection): status, body.
pub fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{extra}\r\n").expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}
