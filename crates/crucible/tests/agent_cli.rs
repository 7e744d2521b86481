//! `crucible bench`, `distill` and `rollout` end to end: the real binary, the replay server over
//! real HTTP, the real judge on the CPU. A wrong kernel first, the note on it, then the honest
//! solution; the second and third commands resume the run and send nothing.

#[path = "../../crucible-agent/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{ReplayServer, Reply, rule};
use crucible_testkit::recorded_turns;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn crucible(args: &[&str], url: &str, out: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_crucible"))
        .args(args)
        .args([
            "--suite", "builtin", "--limit", "1", "--turns", "2", "--device", "cpu",
        ])
        .args(["--model", url, "--out"])
        .arg(out)
        .output()
        .expect("run crucible");
    assert!(
        output.status.success(),
        "crucible {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn bench_then_distill_and_rollout_resume_the_run() {
    let honest = std::fs::read_to_string(repo().join("examples/solutions/01_relu.py")).unwrap();
    let wrong = honest.replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.5)");
    assert_ne!(honest, wrong);
    let server = ReplayServer::start(vec![
        rule("Reference `01_relu`", vec![Reply::code(&wrong)]),
        rule("Verdict: incorrect", vec![Reply::code(&honest)]),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");

    let stdout = crucible(&["bench"], &server.url, &out);
    assert!(stdout.contains("wrote"), "{stdout}");
    assert_eq!(server.requests().len(), 2);
    let turns = recorded_turns(&out);
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0]["result"]["verdict"], "incorrect");
    let note = turns[0]["feedback"].as_str().unwrap();
    eprintln!("the note on turn 0:\n{note}");
    assert!(note.contains("Mismatch in output 0"), "{note}");
    assert_eq!(turns[1]["result"]["verdict"], "correct");
    // The second prompt carried the note.
    let second = &server.requests()[1]["messages"];
    assert_eq!(second[3]["content"].as_str().unwrap(), note);
    let metrics: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("metrics.json")).unwrap()).unwrap();
    assert_eq!(metrics["overall"]["correct_rate"], 1.0);
    assert_eq!(metrics["overall"]["best_by_turn"][0]["correct_rate"], 0.0);
    for file in [
        "report.html",
        "speedup.png",
        "fast_p_by_turn.png",
        "samples.csv",
    ] {
        assert!(out.join(file).is_file(), "{file}");
    }

    let stdout = crucible(&["distill", "--min-speedup", "0"], &server.url, &out);
    assert!(stdout.contains("\"kept\":1"), "{stdout}");
    let sft = std::fs::read_to_string(out.join("sft.jsonl")).unwrap();
    assert_eq!(sft.lines().count(), 1);
    assert!(out.join("sft.parquet").is_file());

    crucible(&["rollout"], &server.url, &out);
    let rows = crucible_rl::io::read(&out.join("trajectories.parquet"))
        .unwrap()
        .records;
    assert_eq!(rows.len(), 2);
    // drkernel: a correct turn scores at least 0.5, a wrong one 0.
    assert_eq!(rows[0].reward, Some(0.0));
    assert!(
        rows[1].reward.is_some_and(|r| r >= 0.5),
        "{:?}",
        rows[1].reward
    );
    assert_eq!(server.requests().len(), 2, "resumed runs send nothing");
}

/// A `crucible serve` with one CPU worker and a bearer token; SIGTERMed when dropped.
struct Service {
    child: std::process::Child,
    url: String,
    _dir: tempfile::TempDir,
}

const TOKEN: &str = "agent-test-token";

impl Service {
    fn start(extra: &[&str]) -> Service {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(env!("CARGO_BIN_EXE_crucible"))
            .current_dir(repo())
            .args([
                "serve",
                "--devices",
                "cpu",
                "--pool-depth",
                "1",
                "--token",
                TOKEN,
            ])
            .arg("--queue")
            .arg(format!("sqlite://{}", dir.path().join("q.db").display()))
            .args(["--bind", &format!("127.0.0.1:{port}")])
            .args(extra)
            .env_remove("CRUCIBLE_TOKEN")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start crucible serve");
        let url = format!("http://127.0.0.1:{port}");
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while reqwest::blocking::get(format!("{url}/healthz")).is_err() {
            assert!(std::time::Instant::now() < until, "no /healthz in 30 s");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Service {
            child,
            url,
            _dir: dir,
        }
    }

    /// `GET path` with the token, as JSON.
    fn get(&self, path: &str) -> serde_json::Value {
        serde_json::from_str(&self.get_text(path)).expect("JSON")
    }

    /// `GET path` with the token.
    fn get_text(&self, path: &str) -> String {
        reqwest::blocking::Client::new()
            .get(format!("{}{path}", self.url))
            .bearer_auth(TOKEN)
            .send()
            .and_then(|r| r.text())
            .expect("GET")
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        // SAFETY: our own child's pid.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

/// `crucible bench` of the first builtin task for `turns` turns, the model at `model`, judged on
/// `service` with `token`.
fn bench_on_service(
    out: &Path,
    model: &str,
    service: &str,
    token: &str,
    turns: &str,
    extra: &[&str],
) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_crucible"))
        .args([
            "bench", "--suite", "builtin", "--limit", "1", "--turns", turns,
        ])
        .args(["--model", model, "--service", service, "--token", token])
        .args(extra)
        .arg("--out")
        .arg(out)
        .output()
        .expect("run crucible")
}

/// `crucible bench --service`: every turn judged by the service's worker (its result documents,
/// its metrics count them), the feedback loop as in-process; a wrong token or no service at all
/// stops the command before it asks the model anything.
#[test]
fn bench_judges_on_a_running_service() {
    let honest = std::fs::read_to_string(repo().join("examples/solutions/01_relu.py")).unwrap();
    let wrong = honest.replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.5)");
    let server = ReplayServer::start(vec![
        rule("Reference `01_relu`", vec![Reply::code(&wrong)]),
        rule("Verdict: incorrect", vec![Reply::code(&honest)]),
    ]);
    let service = Service::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let bench = |out: &Path, service: &str, token: &str| {
        bench_on_service(out, &server.url, service, token, "2", &[])
    };

    let refused = bench(&dir.path().join("refused"), &service.url, "wrong-token");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("refused the bearer token"), "{stderr}");
    let down = bench(&dir.path().join("down"), "http://127.0.0.1:9", TOKEN);
    assert!(!down.status.success());
    let stderr = String::from_utf8_lossy(&down.stderr);
    assert!(stderr.contains("does not answer"), "{stderr}");
    assert_eq!(server.requests().len(), 0, "nothing asked of the model");

    let out = dir.path().join("run");
    let output = bench(&out, &service.url, TOKEN);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let turns = recorded_turns(&out);
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0]["result"]["verdict"], "incorrect");
    assert!(
        turns[0]["feedback"]
            .as_str()
            .unwrap()
            .contains("Mismatch in output 0"),
        "{}",
        turns[0]["feedback"]
    );
    assert_eq!(turns[1]["result"]["verdict"], "correct");
    // The service's worker wrote those documents: it counts one of each verdict.
    assert_eq!(service.get("/v1/workers").as_array().map(Vec::len), Some(1));
    let metrics = service.get_text("/metrics");
    let evaluated = |verdict: &str| {
        metrics
            .lines()
            .filter(|l| l.contains(&format!("verdict=\"{verdict}\"")) && !l.starts_with('#'))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    assert_eq!(
        (evaluated("incorrect"), evaluated("correct")),
        (1.0, 1.0),
        "{metrics}"
    );
}

/// Turns the service could not judge are recorded unscored: a deadline that passed while no
/// worker took the task (the service's `timeout`), and a service that stopped answering after
/// the command started (an `infra_error` once `--service-unreachable` went by).
#[test]
fn bench_leaves_turns_the_service_did_not_judge_unscored() {
    let honest = std::fs::read_to_string(repo().join("examples/solutions/01_relu.py")).unwrap();
    let server = ReplayServer::start(vec![rule(
        "Reference `01_relu`",
        vec![Reply::code(&honest)],
    )]);
    let dir = tempfile::tempdir().unwrap();
    let bench = |out: &Path, service: &str, extra: &[&str]| {
        let output = bench_on_service(out, &server.url, service, TOKEN, "1", extra);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        recorded_turns(out).remove(0)
    };

    let idle = Service::start(&["--workers", "0"]);
    let turn = bench(
        &dir.path().join("deadline"),
        &idle.url,
        &["--service-deadline", "1"],
    );
    assert_eq!(turn["result"]["verdict"], "timeout", "{turn}");
    assert!(
        turn["reward"].is_null(),
        "a passed deadline is not scored: {turn}"
    );

    // Answers the start-up check, then is gone.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let once = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = [0u8; 4096];
        let _ = stream.read(&mut request);
        let _ = stream.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n[]",
        );
    });
    let turn = bench(
        &dir.path().join("gone"),
        &url,
        &["--service-unreachable", "1"],
    );
    once.join().unwrap();
    assert_eq!(turn["result"]["verdict"], "infra_error", "{turn}");
    let message = turn["result"]["failure"]["message"].as_str().unwrap_or("");
    assert!(message.contains("did not answer"), "{message}");
    assert!(turn["reward"].is_null(), "{turn}");
}
