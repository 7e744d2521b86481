//! `crucible serve` for real: the binary, its worker child processes, a SQLite file or our own
//! `redis-server`, and HTTP over loopback sockets. CPU device, builtin tasks.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crucible_testkit::RedisServer;
use reqwest::StatusCode;
use reqwest::blocking::Client;
use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).expect("read a repository file")
}

/// A builtin task with its honest solution, as a submission body.
fn builtin(name: &str) -> Value {
    json!({
        "task_name": name,
        "task_source": read(&format!("tasks/builtin/{name}.py")),
        "candidate_source": read(&format!("examples/solutions/{name}.py")),
        "options": {"trials": 2, "generalize": "off"},
    })
}

/// A `crucible serve` process; SIGTERMed (or SIGKILLed) by pid when dropped.
struct Server {
    child: Child,
    base: String,
    token: Option<String>,
    http: Client,
}

impl Server {
    fn start(queue: &str, port: u16, extra: &[&str]) -> Server {
        Server::start_with(queue, &format!("127.0.0.1:{port}"), port, None, extra)
    }

    fn start_with(
        queue: &str,
        bind: &str,
        port: u16,
        token: Option<&str>,
        extra: &[&str],
    ) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_crucible"));
        cmd.current_dir(repo())
            .args([
                "serve",
                "--queue",
                queue,
                "--bind",
                bind,
                "--devices",
                "cpu",
            ])
            .args(extra)
            .env_remove("CRUCIBLE_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        if let Some(token) = token {
            cmd.args(["--token", token]);
        }
        let child = cmd.spawn().expect("start crucible serve");
        let server = Server {
            child,
            base: format!("http://127.0.0.1:{port}"),
            token: token.map(str::to_string),
            http: Client::builder()
                .timeout(Duration::from_secs(300))
                .build()
                .expect("http client"),
        };
        server.wait_ready();
        server
    }

    fn wait_ready(&self) {
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            if let Ok(r) = self.http.get(format!("{}/healthz", self.base)).send()
                && r.status().is_success()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("crucible serve did not answer /healthz within 30 s");
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::blocking::RequestBuilder {
        let builder = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => builder.bearer_auth(t),
            None => builder,
        }
    }

    fn get(&self, path: &str) -> (StatusCode, Value) {
        let response = self
            .request(reqwest::Method::GET, path)
            .send()
            .expect("GET");
        let status = response.status();
        (status, response.json().unwrap_or(Value::Null))
    }

    fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        let response = self
            .request(reqwest::Method::POST, path)
            .json(body)
            .send()
            .expect("POST");
        let status = response.status();
        (status, response.json().unwrap_or(Value::Null))
    }

    fn metric(&self, name: &str) -> f64 {
        let text = self
            .request(reqwest::Method::GET, "/metrics")
            .send()
            .expect("GET /metrics")
            .text()
            .expect("metrics text");
        text.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// The `crucible worker` children of this server.
    fn worker_pids(&self) -> Vec<u32> {
        let pid = self.child.id();
        let mut pids = Vec::new();
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
        {
            let Ok(task) = task else { continue };
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children
                .split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
            {
                let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
                if String::from_utf8_lossy(&cmdline).contains("worker") {
                    pids.push(child);
                }
            }
        }
        pids
    }

    fn signal(&self, signal: i32) {
        // SAFETY: our own child's pid.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, signal);
        }
    }

    fn kill(mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.signal(libc::SIGTERM);
            let until = Instant::now() + Duration::from_secs(20);
            while Instant::now() < until && matches!(self.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn python_or_skip() -> bool {
    if std::env::var_os("CRUCIBLE_PYTHON").is_none() && !crucible_judge_venv_exists() {
        eprintln!("SKIPPED: no judge Python (set CRUCIBLE_PYTHON or run scripts/bootstrap)");
        return false;
    }
    true
}

fn crucible_judge_venv_exists() -> bool {
    let cache = std::env::var_os("CRUCIBLE_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/crucible")));
    cache
        .and_then(|c| std::fs::read_dir(c).ok())
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("venv-"))
}

fn wait_batch(server: &Server, batch: &str, limit: Duration) -> Value {
    let until = Instant::now() + limit;
    loop {
        let (status, view) = server.get(&format!("/v1/batches/{batch}"));
        assert_eq!(status, StatusCode::OK, "{view}");
        if view["finished"] == json!(true) {
            return view;
        }
        assert!(Instant::now() < until, "batch not finished in time: {view}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn a_task_result_by_long_poll_and_a_batch_by_events() {
    if !python_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = format!("sqlite://{}", dir.path().join("q.db").display());
    // Worker tuning is passed on to the worker processes: one that refused it would judge nothing.
    let server = Server::start(
        &queue,
        free_port(),
        &["--pool-depth", "1", "--gpu-sandbox", "landlock,pid,root"],
    );

    let (status, submitted) = server.post("/v1/tasks", &builtin("01_relu"));
    assert_eq!(status, StatusCode::ACCEPTED, "{submitted}");
    let id = submitted["id"].as_str().expect("an id");
    let (status, task) = server.get(&format!("/v1/tasks/{id}?wait=240"));
    assert_eq!(status, StatusCode::OK);
    assert_eq!(task["state"], "done", "{task}");
    assert_eq!(task["result"]["verdict"], "correct", "{task}");
    assert_eq!(task["attempts"], 1);

    let mut wrong = builtin("04_row_sum");
    wrong["candidate_source"] = json!(read("examples/wrong/04_row_sum.py"));
    let body =
        json!({"tasks": [builtin("06_softmax"), builtin("07_rmsnorm"), wrong], "client": "tests"});
    let (status, batch) = server.post("/v1/batches", &body);
    assert_eq!(status, StatusCode::ACCEPTED, "{batch}");
    let batch_id = batch["batch_id"].as_str().expect("a batch id");
    assert_eq!(batch["task_ids"].as_array().map(Vec::len), Some(3));

    let events = server
        .request(
            reqwest::Method::GET,
            &format!("/v1/batches/{batch_id}/events"),
        )
        .send()
        .expect("open the event stream");
    assert_eq!(events.status(), StatusCode::OK);
    let mut kinds = Vec::new();
    let mut verdicts = Vec::new();
    let mut current = String::new();
    for line in BufReader::new(events).lines() {
        let line = line.expect("read the event stream");
        if let Some(kind) = line.strip_prefix("event: ") {
            current = kind.to_string();
            kinds.push(current.clone());
        } else if let Some(data) = line.strip_prefix("data: ")
            && current == "task"
        {
            let task: Value = serde_json::from_str(data).expect("a task as JSON");
            verdicts.push(
                task["result"]["verdict"]
                    .as_str()
                    .unwrap_or("?")
                    .to_string(),
            );
        }
        if current == "end" && line.is_empty() {
            break;
        }
    }
    assert_eq!(kinds, ["task", "task", "task", "end"]);
    verdicts.sort();
    assert_eq!(verdicts, ["correct", "correct", "incorrect"]);

    let (_, view) = server.get(&format!("/v1/batches/{batch_id}"));
    assert_eq!(view["counts"]["done"], 3, "{view}");
    assert!(
        view["tasks"]
            .as_array()
            .expect("tasks")
            .iter()
            .all(|t| t["client"] == "tests")
    );
    let (_, workers) = server.get("/v1/workers");
    assert_eq!(workers.as_array().map(Vec::len), Some(1), "{workers}");
    assert_eq!(workers[0]["device"], "cpu");
    assert!(server.metric("crucible_verdicts_total{verdict=\"correct\"}") >= 3.0);
    assert!(server.metric("crucible_http_requests_total") >= 4.0);
}

#[test]
fn cancel_deadline_and_bad_requests_without_workers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = format!("sqlite://{}", dir.path().join("q.db").display());
    let server = Server::start(&queue, free_port(), &["--workers", "0"]);

    let (_, health) = server.get("/healthz");
    assert_eq!(health["status"], "degraded", "no worker: {health}");
    assert_eq!(health["store"], true);

    let (_, submitted) = server.post("/v1/tasks", &builtin("01_relu"));
    let id = submitted["id"].as_str().expect("an id");
    let (_, health) = server.get("/healthz");
    assert_eq!(health["queue_depth"], 1, "{health}");
    let (status, outcome) = server.post(&format!("/v1/tasks/{id}/cancel"), &json!({}));
    assert_eq!(status, StatusCode::OK);
    assert_eq!(outcome["cancelled"], true);
    assert_eq!(outcome["state"], "cancelled");
    let (_, again) = server.post(&format!("/v1/tasks/{id}/cancel"), &json!({}));
    assert_eq!(again["cancelled"], false, "already terminal");

    // A whole batch: the task cancelled on its own is not counted again.
    let body =
        json!({"tasks": [builtin("03_bias_add_mul"), builtin("04_row_sum"), builtin("16_swish")]});
    let (_, batch) = server.post("/v1/batches", &body);
    let batch_id = batch["batch_id"].as_str().expect("a batch id");
    let first = batch["task_ids"][0].as_str().expect("a task id");
    server.post(&format!("/v1/tasks/{first}/cancel"), &json!({}));
    let (status, outcome) = server.post(&format!("/v1/batches/{batch_id}/cancel"), &json!({}));
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(outcome["cancelled"], 2, "{outcome}");
    assert_eq!(outcome["counts"]["cancelled"], 3, "{outcome}");
    assert_eq!(outcome["counts"]["queued"], 0, "{outcome}");
    let (_, again) = server.post(&format!("/v1/batches/{batch_id}/cancel"), &json!({}));
    assert_eq!(again["cancelled"], 0, "{again}");
    let (_, health) = server.get("/healthz");
    assert_eq!(health["queue_depth"], 0, "{health}");
    let (status, _) = server.post(
        "/v1/batches/01234567-89ab-cdef-0123-456789abcdef/cancel",
        &json!({}),
    );
    assert_eq!(status, StatusCode::NOT_FOUND);

    let mut short = builtin("02_gelu_tanh");
    short["deadline_s"] = json!(1.0);
    let (_, submitted) = server.post("/v1/tasks", &short);
    let id = submitted["id"].as_str().expect("an id");
    let (_, task) = server.get(&format!("/v1/tasks/{id}?wait=20"));
    assert_eq!(task["state"], "timeout", "{task}");
    assert_eq!(task["result"]["verdict"], "timeout", "{task}");

    let raw = server
        .request(reqwest::Method::POST, "/v1/tasks")
        .body("{not json")
        .send()
        .expect("POST");
    assert_eq!(raw.status(), StatusCode::BAD_REQUEST);
    let error: Value = raw.json().expect("a JSON error");
    assert_eq!(error["error"]["code"], "malformed_json");

    let mut bad = builtin("01_relu");
    bad["priority"] = json!(11);
    let (status, error) = server.post("/v1/tasks", &bad);
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
    assert_eq!(error["error"]["code"], "invalid_field");

    let mut huge = builtin("01_relu");
    huge["candidate_source"] = json!("#".repeat((1 << 20) + 1));
    let (status, error) = server.post("/v1/tasks", &huge);
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{error}");

    let (status, _) = server.get("/v1/tasks/01234567-89ab-cdef-0123-456789abcdef");
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = server.get("/v1/tasks/x?wait=-1");
    assert!(status.is_client_error());
}

#[test]
fn a_bearer_token_is_required_off_loopback() {
    let port = free_port();
    let refused = Command::new(env!("CARGO_BIN_EXE_crucible"))
        .args([
            "serve",
            "--bind",
            &format!("0.0.0.0:{port}"),
            "--workers",
            "0",
        ])
        .args(["--queue", "sqlite:///dev/null/never-opened.db"])
        .env_remove("CRUCIBLE_TOKEN")
        .output()
        .expect("run crucible serve");
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("token"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let queue = format!("sqlite://{}", dir.path().join("q.db").display());
    let server = Server::start_with(
        &queue,
        &format!("0.0.0.0:{port}"),
        port,
        Some("s3cret-token"),
        &["--workers", "0"],
    );
    let url = format!("{}/v1/workers", server.base);
    let bare = server.http.get(&url).send().expect("GET");
    assert_eq!(bare.status(), StatusCode::UNAUTHORIZED);
    let wrong = server
        .http
        .get(&url)
        .bearer_auth("s3cret-tokeN")
        .send()
        .expect("GET");
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let (status, _) = server.get("/v1/workers");
    assert_eq!(status, StatusCode::OK);
    let metrics = server
        .http
        .get(format!("{}/metrics", server.base))
        .send()
        .expect("GET");
    assert_eq!(metrics.status(), StatusCode::UNAUTHORIZED);
}

/// Kills a worker child with SIGKILL while it evaluates, then the server itself, and starts the
/// server again on the same queue: every task ends `done` exactly once.
fn survive_kills(queue: &str) {
    let tasks = ["01_relu", "03_bias_add_mul", "05_row_max_mean", "16_swish"];
    let port = free_port();
    let lease = ["--lease-secs", "3"];
    let server = Server::start(queue, port, &lease);
    let body = json!({"tasks": tasks.iter().map(|t| builtin(t)).collect::<Vec<_>>()});
    let (status, batch) = server.post("/v1/batches", &body);
    assert_eq!(status, StatusCode::ACCEPTED, "{batch}");
    let batch_id = batch["batch_id"].as_str().expect("a batch id").to_string();

    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, view) = server.get(&format!("/v1/batches/{batch_id}"));
        if view["counts"]["running"].as_u64() >= Some(1) {
            break;
        }
        assert!(Instant::now() < until, "no task started: {view}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let workers = server.worker_pids();
    assert_eq!(workers.len(), 1, "one CPU worker child");
    // SAFETY: a child of the server we started.
    unsafe {
        libc::kill(workers[0] as libc::pid_t, libc::SIGKILL);
    }
    // The supervisor restarts the worker; then the whole server dies too.
    let until = Instant::now() + Duration::from_secs(30);
    while server.metric("crucible_worker_restarts_total") < 1.0 {
        assert!(
            Instant::now() < until,
            "the killed worker was not restarted"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server.kill();

    let server = Server::start(queue, port, &lease);
    let view = wait_batch(&server, &batch_id, Duration::from_secs(300));
    let tasks_done = view["tasks"].as_array().expect("tasks");
    assert_eq!(tasks_done.len(), tasks.len());
    for task in tasks_done {
        assert_eq!(task["state"], "done", "{task}");
        assert_eq!(task["result"]["verdict"], "correct", "{task}");
    }
    assert!(
        tasks_done.iter().any(|t| t["attempts"].as_u64() >= Some(2)),
        "the killed worker's task was delivered again: {view}"
    );
    // Exactly once: the store accepted one evaluation per task, no more.
    assert_eq!(
        server.metric("crucible_evaluations_total"),
        tasks.len() as f64
    );
    assert_eq!(
        server.metric("crucible_tasks_finished_total{state=\"done\"}"),
        tasks.len() as f64
    );
}

#[test]
fn kill_9_and_restart_with_sqlite_completes_every_task_once() {
    if !python_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    survive_kills(&format!("sqlite://{}", dir.path().join("q.db").display()));
}

#[test]
fn kill_9_and_restart_with_redis_completes_every_task_once() {
    if !python_or_skip() {
        return;
    }
    let Some(redis) = RedisServer::start() else {
        return;
    };
    survive_kills(&redis.url(0));
}

/// schemathesis (pinned in python/requirements-dev.lock; `scripts/test` exports its directory as
/// `CRUCIBLE_DEVTOOLS`) against the served OpenAPI document: no 5xx, and every answer as the
/// document says (status codes, content types, schemas, 4xx for invalid input, 401 without the
/// token). Not checked: response time (long-polls wait on purpose) and schemathesis's
/// "positive data acceptance", which counts a non-object body as schema-valid. The stateful
/// phase is left out: without workers, every task it creates would hold a long-poll open.
#[test]
fn schemathesis_finds_no_server_error() {
    let Some(devtools) = std::env::var_os("CRUCIBLE_DEVTOOLS").map(PathBuf::from) else {
        eprintln!(
            "SKIPPED: CRUCIBLE_DEVTOOLS is unset (scripts/test sets it); schemathesis not run"
        );
        return;
    };
    let st = devtools.join("bin/st");
    if !st.exists() {
        eprintln!(
            "SKIPPED: {} is absent (schemathesis needs Python >= 3.11)",
            st.display()
        );
        return;
    }
    let python = std::env::var_os("CRUCIBLE_PYTHON").unwrap_or_else(|| "python3".into());
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = format!("sqlite://{}", dir.path().join("q.db").display());
    let port = free_port();
    let server = Server::start_with(
        &queue,
        &format!("127.0.0.1:{port}"),
        port,
        Some("fuzz-token"),
        &["--workers", "0", "--max-wait-secs", "1"],
    );
    let checks = [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
        "response_headers_conformance",
        "negative_data_rejection",
        "missing_required_header",
        "ignored_auth",
    ];
    let output = Command::new(python)
        .arg(&st)
        .args(["run", &format!("{}/v1/openapi.json", server.base)])
        .args(["-H", "Authorization: Bearer fuzz-token"])
        .args(["--checks", &checks.join(",")])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args(["--max-examples", "50", "--request-timeout", "30"])
        .arg("--generation-deterministic")
        // schemathesis keeps a cache in its working directory: keep it out of the checkout.
        .current_dir(dir.path())
        .env("PYTHONPATH", &devtools)
        .env("SCHEMATHESIS_HOOKS", "")
        .output()
        .expect("run schemathesis");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "schemathesis found failures:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(report.contains("passed"), "{report}");
    drop(server);
}

#[test]
fn an_open_dashboard_event_stream_does_not_hold_up_a_shutdown() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = format!("sqlite://{}", dir.path().join("q.db").display());
    let mut server = Server::start(&queue, free_port(), &["--workers", "0"]);
    let address = server.base.trim_start_matches("http://").to_string();
    let mut stream = std::net::TcpStream::connect(&address).expect("connect");
    write!(
        stream,
        "GET /dashboard/events HTTP/1.1\r\nHost: {address}\r\n\r\n"
    )
    .expect("request the event stream");
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("event: home") {
        let n = stream.read(&mut buf).expect("read the stream");
        assert!(n > 0, "the stream closed before its first event");
        seen.extend_from_slice(&buf[..n]);
    }
    // The stream stays open (as a browser tab would keep it); the server still stops.
    let signalled = Instant::now();
    server.signal(libc::SIGTERM);
    while matches!(server.child.try_wait(), Ok(None)) {
        assert!(
            signalled.elapsed() < Duration::from_secs(15),
            "crucible serve still runs 15 s after SIGTERM with an event stream open"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "stopped {:.2?} after SIGTERM with a stream open",
        signalled.elapsed()
    );
    drop(stream);
}
