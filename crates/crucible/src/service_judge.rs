//! The agent's judge over `crucible serve` (`--service URL`): each candidate is one task of the
//! service, so `bench`, `rollout` and `distill` use the service's warm workers instead of
//! starting the judge's processes in this one. The verdict is always the service's result
//! document; whatever keeps a candidate from being judged there (an unreachable service, a
//! refused submission, a task cancelled from outside) is an `infra_error`, never charged to
//! the candidate, and a passed deadline is the service's own `timeout` (scored by no recipe).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use crucible_agent::engine::Judge;
use crucible_agent::suite::Task;
use crucible_queue::{JudgeOptions, TaskSpec};
use crucible_result::EvalResult;
use crucible_service::api::{Submitted, TaskStateView, TaskView};

/// How long one long-poll asks the service to hold the answer.
const POLL_WAIT_S: u64 = 30;
/// The pause between tries while the service does not answer.
const RETRY_PAUSE: Duration = Duration::from_secs(2);
/// The fair-share name the agent's tasks are queued under.
const CLIENT_NAME: &str = "crucible-agent";

/// Judges on a running `crucible serve` (or its API in front of a Redis queue).
pub struct ServiceJudge {
    base: reqwest::Url,
    token: Option<String>,
    http: reqwest::Client,
    options: JudgeOptions,
    deadline_s: f64,
    /// How long the service may give no answer at all before a candidate counts as not judged.
    unreachable: Duration,
}

impl ServiceJudge {
    /// A judge for the service at `base` (e.g. `http://127.0.0.1:8000`), after checking that it
    /// answers and takes the token: a wrong address or token is an error now, not an
    /// `infra_error` for every candidate later.
    pub fn connect(
        base: &str,
        token: Option<String>,
        options: JudgeOptions,
        deadline_s: f64,
        unreachable_s: f64,
    ) -> anyhow::Result<ServiceJudge> {
        let mut base = reqwest::Url::parse(base)
            .with_context(|| format!("--service `{base}` is not a URL"))?;
        if !matches!(base.scheme(), "http" | "https") {
            bail!("--service `{base}`: only http:// and https:// URLs");
        }
        // `join` keeps a base path only when it ends in a slash.
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        if !(deadline_s.is_finite() && deadline_s > 0.0) {
            bail!("--service-deadline must be a positive number of seconds");
        }
        let unreachable = Duration::try_from_secs_f64(unreachable_s)
            .ok()
            .filter(|d| !d.is_zero())
            .context("--service-unreachable must be a positive number of seconds")?;
        let mut judge = ServiceJudge {
            base,
            token,
            http: http_client()?,
            options,
            deadline_s,
            unreachable,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(judge.check_reachable())?;
        // A client's pooled connections belong to the runtime that opened them, which ends
        // here: the judge's requests run on the agent's runtime, with a client of their own.
        judge.http = http_client()?;
        Ok(judge)
    }

    /// `GET /v1/workers`: answers only with the right token where one is required.
    async fn check_reachable(&self) -> anyhow::Result<()> {
        let url = self.base.join("v1/workers")?;
        let response = self
            .authorized(self.http.get(url.clone()))
            .send()
            .await
            .with_context(|| format!("the service at {} does not answer", self.base))?;
        match response.status() {
            s if s.is_success() => Ok(()),
            reqwest::StatusCode::UNAUTHORIZED => bail!(
                "the service at {} refused the bearer token (--token or CRUCIBLE_TOKEN)",
                self.base
            ),
            s => bail!("GET {url}: HTTP {s}: {}", body_text(response).await),
        }
    }

    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Queues the candidate and waits for its task to end.
    async fn evaluate(&self, spec: &TaskSpec) -> Result<EvalResult, String> {
        let id = self.submit(spec).await?;
        let view = self.wait(&id).await?;
        match (view.state, view.result) {
            (TaskStateView::Done | TaskStateView::Timeout, Some(result)) => {
                serde_json::from_value(result).map_err(|e| {
                    format!("task {id}: its result is not a crucible.result/1 document: {e}")
                })
            }
            (TaskStateView::Cancelled, _) => Err(format!(
                "task {id} was cancelled at the service before it was judged"
            )),
            (state, _) => Err(format!("task {id} ended {state:?} without a result")),
        }
    }

    async fn submit(&self, spec: &TaskSpec) -> Result<String, String> {
        let url = self.base.join("v1/tasks").map_err(|e| e.to_string())?;
        let response = self
            .retrying(|| {
                self.authorized(self.http.post(url.clone()).json(spec))
                    .send()
            })
            .await?;
        let status = response.status();
        if !status.is_success() {
            // 413 (a candidate over the service's size limit), 422, 401, 503: the service
            // would not take it, which says nothing about the kernel.
            return Err(format!(
                "the service refused the task: HTTP {status}: {}",
                body_text(response).await
            ));
        }
        let submitted: Submitted = response
            .json()
            .await
            .map_err(|e| format!("the service's answer to a submission: {e}"))?;
        Ok(submitted.id)
    }

    /// Long-polls the task until it is terminal.
    async fn wait(&self, id: &str) -> Result<TaskView, String> {
        let mut url = self
            .base
            .join(&format!("v1/tasks/{id}"))
            .map_err(|e| e.to_string())?;
        url.query_pairs_mut()
            .append_pair("wait", &POLL_WAIT_S.to_string());
        loop {
            let response = self
                .retrying(|| self.authorized(self.http.get(url.clone())).send())
                .await?;
            let status = response.status();
            if !status.is_success() {
                return Err(format!(
                    "GET task {id}: HTTP {status}: {}",
                    body_text(response).await
                ));
            }
            let view: TaskView = response
                .json()
                .await
                .map_err(|e| format!("the service's answer for task {id}: {e}"))?;
            if view.state.is_terminal() {
                return Ok(view);
            }
        }
    }

    /// Sends a request until the service answers (any HTTP status), giving up once it has not
    /// answered for `self.unreachable`.
    async fn retrying<F, Fut>(&self, send: F) -> Result<reqwest::Response, String>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = reqwest::Result<reqwest::Response>>,
    {
        let since = Instant::now();
        loop {
            match send().await {
                Ok(response) => return Ok(response),
                Err(e) if since.elapsed() < self.unreachable => {
                    tracing::warn!(
                        "the service at {} does not answer ({e}); trying again",
                        self.base
                    );
                    tokio::time::sleep(RETRY_PAUSE.min(self.unreachable / 4)).await;
                }
                Err(e) => {
                    return Err(format!(
                        "the service at {} did not answer for {} s: {e}",
                        self.base,
                        self.unreachable.as_secs_f64()
                    ));
                }
            }
        }
    }

    fn spec(&self, task: &Task, code: &str) -> TaskSpec {
        // The service takes only plain names; a task file's stem may be anything.
        let name = crucible_service::api::to_name(&task.name);
        let mut spec = TaskSpec::new(&name, &task.source, code);
        spec.options = self.options.clone();
        spec.client = CLIENT_NAME.to_string();
        spec.deadline_s = Some(self.deadline_s);
        spec
    }
}

impl Judge for ServiceJudge {
    fn judge(&self, task: &Task, _candidate_path: &Path, code: &str) -> EvalResult {
        let spec = self.spec(task, code);
        let started = Instant::now();
        // The engine calls judges on its runtime's blocking threads, where `block_on` may wait.
        let outcome = match tokio::runtime::Handle::try_current() {
            Ok(handle) => handle.block_on(self.evaluate(&spec)),
            Err(_) => Err("the service judge runs only inside the agent's runtime".to_string()),
        };
        outcome.unwrap_or_else(|reason| {
            crucible_queue::not_judged_result(&spec, &reason, started.elapsed().as_secs_f64())
        })
    }
}

/// Long enough for a long-poll's answer.
fn http_client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(POLL_WAIT_S + 30))
        .build()
}

async fn body_text(response: reqwest::Response) -> String {
    let text = response.text().await.unwrap_or_default();
    text.chars().take(500).collect()
}
