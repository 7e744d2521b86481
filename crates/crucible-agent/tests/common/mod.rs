//! Test helpers: a deterministic replay server (a real HTTP server on a loopback port that
//! answers `/v1/chat/completions` with canned responses chosen by the prompt, and records every
//! request) and a scripted judge that reads the verdict from markers in the code.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use crucible_agent::engine::Judge;
use crucible_agent::suite::Task;
use crucible_result::EvalResult;
use serde_json::{Value, json};

/// One canned reply.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub content: String,
    pub logprobs: Vec<f32>,
    pub finish_reason: &'static str,
}

impl Reply {
    pub fn text(content: &str) -> Reply {
        Reply {
            status: 200,
            content: content.into(),
            logprobs: vec![-0.25, -1.5],
            finish_reason: "stop",
        }
    }
    pub fn code(code: &str) -> Reply {
        Reply::text(&format!("Here it is.\n```python\n{code}\n```\n"))
    }
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            content: String::new(),
            logprobs: vec![],
            finish_reason: "stop",
        }
    }
}

/// Replies for prompts whose last message contains `needle`, served in order (the last one
/// repeats). The first rule that matches answers.
#[derive(Clone, Debug)]
pub struct Rule {
    pub needle: String,
    pub replies: Vec<Reply>,
}

pub fn rule(needle: &str, replies: Vec<Reply>) -> Rule {
    Rule {
        needle: needle.into(),
        replies,
    }
}

#[derive(Default)]
struct Inner {
    rules: Vec<(Rule, usize)>,
    requests: Vec<Value>,
}

pub struct ReplayServer {
    pub url: String,
    inner: Arc<Mutex<Inner>>,
    _runtime: tokio::runtime::Runtime,
}

impl ReplayServer {
    pub fn start(rules: Vec<Rule>) -> ReplayServer {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let inner = Arc::new(Mutex::new(Inner {
            rules: rules.into_iter().map(|r| (r, 0)).collect(),
            requests: vec![],
        }));
        let app = axum::Router::new()
            .route("/v1/models", get(models))
            .route("/v1/chat/completions", post(chat))
            .with_state(inner.clone());
        let addr: SocketAddr = runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
            addr
        });
        ReplayServer {
            url: format!("http://{addr}/v1"),
            inner,
            _runtime: runtime,
        }
    }

    /// Every chat request received, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.inner.lock().unwrap().requests.clone()
    }
}

async fn models() -> Json<Value> {
    Json(json!({"object": "list", "data": [{"id": "replay-model", "object": "model"}]}))
}

async fn chat(
    State(inner): State<Arc<Mutex<Inner>>>,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    let mut inner = inner.lock().unwrap();
    inner.requests.push(body.clone());
    let last = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_string();
    let Some((rule, served)) = inner
        .rules
        .iter_mut()
        .find(|(r, _)| last.contains(&r.needle))
    else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": format!("no canned reply for: {last}")})),
        );
    };
    let reply = rule.replies[(*served).min(rule.replies.len() - 1)].clone();
    *served += 1;
    if reply.status != 200 {
        return (
            StatusCode::from_u16(reply.status).unwrap(),
            Json(json!({"error": "canned failure"})),
        );
    }
    let logprobs: Vec<Value> = reply
        .logprobs
        .iter()
        .map(|l| json!({"token": "x", "logprob": l, "top_logprobs": []}))
        .collect();
    (
        StatusCode::OK,
        Json(json!({
            "id": "r", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.content},
                         "finish_reason": reply.finish_reason,
                         "logprobs": {"content": logprobs}}],
            "usage": {"prompt_tokens": last.len() / 4, "completion_tokens": 2, "total_tokens": 0}
        })),
    )
}

/// A judge result: `verdict`, with `speedup` (and the matched one) when given, `findings` as
/// (code, severity).
pub fn result(verdict: &str, speedup: Option<f64>, findings: &[(&str, &str)]) -> EvalResult {
    let findings: Vec<Value> = findings
        .iter()
        .map(|(code, sev)| json!({"code": code, "severity": sev, "message": format!("{code} says so")}))
        .collect();
    let failure = match verdict {
        "correct" => Value::Null,
        "incorrect" => json!({"class": "incorrect", "stage": "trial_0", "message": "mismatch"}),
        "rejected" => json!({"class": "rejected", "stage": "verify", "message": "rejected"}),
        _ => json!({"class": "runtime_error", "stage": "load", "message": "Traceback: boom"}),
    };
    serde_json::from_value(json!({
        "schema": "crucible.result/1",
        "verdict": verdict,
        "correct": verdict == "correct",
        "speedup": speedup,
        "speedup_matched": speedup,
        "timing": null,
        "coverage": speedup.map(|_| 0.9),
        "failure": failure,
        "findings": findings,
        "stages": [],
        "seeds": {"base": 1, "init": 2, "trials": [3], "timing": 4},
        "tolerance": {"profile": "kb-v0", "atol": 0.01, "rtol": 0.01},
        "size_profile": "small",
        "trials": [],
        "launches": [],
        "task": {"name": "t", "path": "t.py", "sha256": "0"},
        "candidate": {"name": "c", "path": "c.py", "sha256": "0"},
        "env": {"device": "cpu", "device_name": null, "torch": null, "triton": null, "cuda": null,
                "driver": null, "python": null, "crucible": "test", "triton_interpret": true},
        "wall_s": 0.1
    }))
    .unwrap()
}

/// Reads the verdict from markers in the code: `SPEEDUP=x` correct at x (`SPEEDUP=none`
/// untimed), `WRONG` incorrect, `HACK` rejected, `FLAG` a flag finding, else a runtime error.
pub struct ScriptedJudge;

impl Judge for ScriptedJudge {
    fn judge(&self, _task: &Task, path: &Path, code: &str) -> EvalResult {
        assert!(
            path.is_file(),
            "the candidate file is written before judging"
        );
        let flags: &[(&str, &str)] = if code.contains("FLAG") {
            &[("below-bandwidth-floor", "flag")]
        } else {
            &[]
        };
        if let Some(rest) = code.split("SPEEDUP=").nth(1) {
            let word: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
            return result("correct", word.parse().ok(), flags);
        }
        if code.contains("WRONG") {
            return result("incorrect", None, &[]);
        }
        if code.contains("HACK") {
            return result("rejected", None, &[("no-triton-launch", "reject")]);
        }
        result("runtime_error", None, &[])
    }
}
