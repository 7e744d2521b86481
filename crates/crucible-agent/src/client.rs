//! An OpenAI-compatible chat client: `POST {base}/chat/completions`, bounded concurrency,
//! retries with exponential backoff on transient failures, a deadline per request. It keeps the
//! token log-probs when the server returns them (MRS needs them) and the token usage.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use crate::error::{Error, Result};

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn system(content: impl Into<String>) -> Message {
        Message {
            role: "system".into(),
            content: content.into(),
        }
    }
    pub fn user(content: impl Into<String>) -> Message {
        Message {
            role: "user".into(),
            content: content.into(),
        }
    }
    pub fn assistant(content: impl Into<String>) -> Message {
        Message {
            role: "assistant".into(),
            content: content.into(),
        }
    }
}

/// Token counts as the server reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
}

/// One sampled token and its log-probability under the serving model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f32,
}

/// What one request produced.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    pub content: String,
    /// `stop`, `length`, ...; `length` means the response was cut.
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    /// Empty when the server returned none.
    pub logprobs: Vec<TokenLogprob>,
}

impl Completion {
    pub fn truncated(&self) -> bool {
        self.finish_reason.as_deref() == Some("length")
    }
}

/// Sampling parameters sent with every request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    pub temperature: f64,
    pub top_p: f64,
    pub max_tokens: u32,
    /// Ask for per-token log-probs.
    pub logprobs: bool,
}

impl Default for Sampling {
    fn default() -> Sampling {
        Sampling {
            temperature: 0.7,
            top_p: 0.95,
            max_tokens: 4096,
            logprobs: true,
        }
    }
}

/// How the client talks to the server.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The API root, e.g. `http://127.0.0.1:8000/v1`.
    pub base_url: String,
    /// The served model's name; `None` asks `GET {base}/models` for the first one.
    pub model: Option<String>,
    pub api_key: Option<String>,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Attempts after the first one, on a transient failure.
    pub retries: u32,
    /// The first backoff; it doubles each retry.
    pub backoff: Duration,
    /// Deadline of one request, response body included.
    pub timeout: Duration,
}

impl ClientConfig {
    pub fn new(base_url: impl Into<String>) -> ClientConfig {
        ClientConfig {
            base_url: base_url.into(),
            model: None,
            api_key: None,
            concurrency: 8,
            retries: 4,
            backoff: Duration::from_millis(500),
            timeout: Duration::from_secs(600),
        }
    }
}

/// A cheap-to-clone handle; clones share the concurrency bound.
#[derive(Clone)]
pub struct ChatClient {
    http: reqwest::Client,
    cfg: Arc<ClientConfig>,
    model: String,
    slots: Arc<Semaphore>,
}

#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: &'a [Message],
    temperature: f64,
    top_p: f64,
    max_tokens: u32,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    logprobs: bool,
    /// Sent as 0 with `logprobs`: some servers (llama-cpp-python) return log-probs only when it
    /// is set, and 0 asks for the sampled token's alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    top_logprobs: Option<u32>,
}

#[derive(Deserialize)]
struct ChatResponse {
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Choice {
    message: ResponseMessage,
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    logprobs: Option<ChoiceLogprobs>,
}

#[derive(Deserialize)]
struct ResponseMessage {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Deserialize)]
struct ChoiceLogprobs {
    #[serde(default)]
    content: Option<Vec<TokenLogprob>>,
}

#[derive(Deserialize)]
struct ModelList {
    data: Vec<ModelEntry>,
}

#[derive(Deserialize)]
struct ModelEntry {
    id: String,
}

/// Whether a failed attempt is worth another one.
enum Attempt {
    Transient(String),
    Fatal(Error),
}

impl ChatClient {
    /// Builds the client; without a model name it asks the server which model it serves.
    pub async fn connect(cfg: ClientConfig) -> Result<ChatClient> {
        let http = reqwest::Client::builder()
            .timeout(cfg.timeout)
            .build()
            .map_err(|e| Error::Client(e.to_string()))?;
        let model = match &cfg.model {
            Some(m) => m.clone(),
            None => served_model(&http, &cfg).await?,
        };
        Ok(ChatClient {
            http,
            slots: Arc::new(Semaphore::new(cfg.concurrency.max(1))),
            cfg: Arc::new(cfg),
            model,
        })
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    /// One chat completion, retried on connection failures, timeouts, 429 and 5xx.
    pub async fn chat(&self, messages: &[Message], sampling: &Sampling) -> Result<Completion> {
        let _slot = self
            .slots
            .acquire()
            .await
            .map_err(|e| Error::Client(e.to_string()))?;
        let request = ChatRequest {
            model: &self.model,
            messages,
            temperature: sampling.temperature,
            top_p: sampling.top_p,
            max_tokens: sampling.max_tokens,
            logprobs: sampling.logprobs,
            top_logprobs: sampling.logprobs.then_some(0),
        };
        let mut delay = self.cfg.backoff;
        let mut attempt = 0;
        loop {
            match self.attempt(&request).await {
                Ok(c) => return Ok(c),
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Transient(why)) if attempt >= self.cfg.retries => {
                    return Err(Error::Server(format!(
                        "{why} (gave up after {} attempts)",
                        attempt + 1
                    )));
                }
                Err(Attempt::Transient(why)) => {
                    tracing::warn!("chat request failed ({why}); retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                    delay = delay.saturating_mul(2);
                    attempt += 1;
                }
            }
        }
    }

    async fn attempt(&self, request: &ChatRequest<'_>) -> std::result::Result<Completion, Attempt> {
        let url = format!(
            "{}/chat/completions",
            self.cfg.base_url.trim_end_matches('/')
        );
        let mut builder = self.http.post(&url).json(request);
        if let Some(key) = &self.cfg.api_key {
            builder = builder.bearer_auth(key);
        }
        let response = builder
            .send()
            .await
            .map_err(|e| Attempt::Transient(e.to_string()))?;
        let status = response.status();
        let body = response
            .text()
            .await
            .map_err(|e| Attempt::Transient(e.to_string()))?;
        if status.as_u16() == 429 || status.is_server_error() {
            return Err(Attempt::Transient(format!(
                "HTTP {status}: {}",
                excerpt(&body)
            )));
        }
        if !status.is_success() {
            return Err(Attempt::Fatal(Error::Server(format!(
                "HTTP {status} from {url}: {}",
                excerpt(&body)
            ))));
        }
        parse_completion(&body).map_err(Attempt::Fatal)
    }
}

fn parse_completion(body: &str) -> Result<Completion> {
    let parsed: ChatResponse = serde_json::from_str(body)
        .map_err(|e| Error::Server(format!("unreadable completion ({e}): {}", excerpt(body))))?;
    let Some(choice) = parsed.choices.into_iter().next() else {
        return Err(Error::Server("the completion has no choices".into()));
    };
    Ok(Completion {
        content: choice.message.content.unwrap_or_default(),
        finish_reason: choice.finish_reason,
        usage: parsed.usage,
        logprobs: choice.logprobs.and_then(|l| l.content).unwrap_or_default(),
    })
}

async fn served_model(http: &reqwest::Client, cfg: &ClientConfig) -> Result<String> {
    let url = format!("{}/models", cfg.base_url.trim_end_matches('/'));
    let mut builder = http.get(&url);
    if let Some(key) = &cfg.api_key {
        builder = builder.bearer_auth(key);
    }
    let response = builder
        .send()
        .await
        .map_err(|e| Error::Server(format!("cannot reach {url}: {e}")))?;
    let body = response
        .text()
        .await
        .map_err(|e| Error::Server(format!("{url}: {e}")))?;
    let list: ModelList = serde_json::from_str(&body).map_err(|e| {
        Error::Server(format!(
            "{url} gave no model list ({e}): {}",
            excerpt(&body)
        ))
    })?;
    list.data
        .into_iter()
        .next()
        .map(|m| m.id)
        .ok_or_else(|| Error::Server(format!("{url} lists no model; pass --model-name")))
}

fn excerpt(body: &str) -> String {
    crate::prompt::truncate_chars(body.trim(), 300)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_keeps_logprobs_usage_and_finish_reason() {
        let body = r#"{"choices":[{"message":{"role":"assistant","content":"hi"},
            "finish_reason":"length","logprobs":{"content":[{"token":"hi","logprob":-0.5,"top_logprobs":[]}]}}],
            "usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8}}"#;
        let c = parse_completion(body).unwrap();
        assert_eq!(c.content, "hi");
        assert!(c.truncated());
        assert_eq!(c.usage.unwrap().prompt_tokens, 7);
        assert_eq!(c.logprobs[0].logprob, -0.5);
    }

    #[test]
    fn completion_without_choices_is_an_error() {
        let err = parse_completion(r#"{"choices":[]}"#).unwrap_err();
        assert!(err.to_string().contains("no choices"), "{err}");
        let err = parse_completion("<html>").unwrap_err();
        assert!(err.to_string().contains("unreadable"), "{err}");
    }
}
