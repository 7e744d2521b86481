//! Runs episodes: every (task, sample) pair, turn after turn, model calls and judge calls
//! bounded separately (the client's own bound; `judge_jobs` evaluations at once, on blocking
//! threads since the judge is synchronous). Each turn is appended to the store the moment it
//! ends, so a run resumes from its records.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crucible_result::{EvalResult, Verdict};
use crucible_rl::Recipe;
use tokio::sync::Semaphore;

use crate::client::{ChatClient, Sampling};
use crate::episode::{History, TurnRecord, next_messages};
use crate::error::{Error, Result};
use crate::extract::extract_code;
use crate::prompt;
use crate::store::{Episodes, Store};
use crate::suite::Task;

/// Judges one candidate. Never fails: a problem is a verdict in the result.
pub trait Judge: Send + Sync + 'static {
    fn judge(&self, task: &Task, candidate_path: &Path, code: &str) -> EvalResult;
}

/// The in-process judge. With pre-starting on, every evaluation starts the processes of a later
/// one before it runs (as `crucible eval` does in batch mode), so interpreter start-up overlaps
/// the model's generation and other evaluations.
pub struct InProcessJudge {
    runtime: crucible_judge::Runtime,
    cfg: crucible_judge::EvalConfig,
    warm: Option<Mutex<Vec<crucible_judge::Workers>>>,
}

impl InProcessJudge {
    pub fn new(
        runtime: crucible_judge::Runtime,
        cfg: crucible_judge::EvalConfig,
        prestart: bool,
    ) -> InProcessJudge {
        InProcessJudge {
            runtime,
            cfg,
            warm: prestart.then(|| Mutex::new(Vec::new())),
        }
    }
}

impl Judge for InProcessJudge {
    fn judge(&self, task: &Task, candidate_path: &Path, code: &str) -> EvalResult {
        let mut prestarted = None;
        if let Some(pool) = &self.warm {
            match crucible_judge::Workers::start(&self.runtime, &self.cfg) {
                Ok(next) => {
                    if let Ok(mut pool) = pool.lock() {
                        prestarted = pool.pop();
                        pool.push(next);
                    }
                }
                Err(e) => tracing::warn!("cannot prestart workers: {e}"),
            }
        }
        crucible_judge::evaluate_with(
            &self.runtime,
            &task.path,
            task.source.as_bytes(),
            candidate_path,
            code.as_bytes(),
            &self.cfg,
            prestarted,
        )
    }
}

/// What one run does.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub turns: u32,
    pub samples: u32,
    pub history: History,
    pub sampling: Sampling,
    /// Token budget of one feedback note.
    pub feedback_tokens: usize,
    pub recipe: Recipe,
    /// Episodes in progress at once.
    pub episodes: usize,
    /// Evaluations at once.
    pub judge_jobs: usize,
    /// Where candidate files are written (`DIR/TASK/sS-tT.py`).
    pub candidates_dir: PathBuf,
}

struct Shared {
    client: ChatClient,
    judge: Arc<dyn Judge>,
    cfg: RunConfig,
    store: Store,
    judge_slots: Semaphore,
    progress: Box<dyn Fn(&TurnRecord) + Send + Sync>,
}

/// Runs every episode to `cfg.turns` turns, continuing those in `done`; returns all episodes.
pub async fn run(
    client: ChatClient,
    judge: Arc<dyn Judge>,
    tasks: &[Task],
    cfg: RunConfig,
    store: Store,
    done: Episodes,
    progress: Box<dyn Fn(&TurnRecord) + Send + Sync>,
) -> Result<Episodes> {
    let episode_slots = Arc::new(Semaphore::new(cfg.episodes.max(1)));
    let shared = Arc::new(Shared {
        judge_slots: Semaphore::new(cfg.judge_jobs.max(1)),
        client,
        judge,
        cfg,
        store,
        progress,
    });
    let mut set = tokio::task::JoinSet::new();
    let mut done = done;
    for task in tasks {
        for sample in 0..shared.cfg.samples {
            let earlier = done
                .remove(&(task.name.clone(), sample))
                .unwrap_or_default();
            let (shared, task, slots) = (shared.clone(), task.clone(), episode_slots.clone());
            set.spawn(async move {
                let _slot = slots.acquire_owned().await;
                let turns = episode(&shared, &task, sample, earlier).await;
                ((task.name, sample), turns)
            });
        }
    }
    // Episodes of tasks or samples outside this run stay in the records, not in the result.
    drop(done);
    let mut episodes = Episodes::new();
    while let Some(joined) = set.join_next().await {
        let (key, turns) = joined.map_err(|e| Error::Client(format!("episode task: {e}")))?;
        episodes.insert(key, turns?);
    }
    Ok(episodes)
}

/// Continues one episode from its recorded turns.
async fn episode(
    shared: &Shared,
    task: &Task,
    sample: u32,
    mut turns: Vec<TurnRecord>,
) -> Result<Vec<TurnRecord>> {
    while (turns.len() as u32) < shared.cfg.turns {
        if turns.last().is_some_and(|t| t.error.is_some()) {
            break;
        }
        let record = one_turn(shared, task, sample, &turns).await?;
        shared.store.append(&record)?;
        (shared.progress)(&record);
        turns.push(record);
    }
    Ok(turns)
}

async fn one_turn(
    shared: &Shared,
    task: &Task,
    sample: u32,
    turns: &[TurnRecord],
) -> Result<TurnRecord> {
    let cfg = &shared.cfg;
    let messages = next_messages(&task.name, &task.source, cfg.history, turns);
    let mut record = TurnRecord {
        task: task.name.clone(),
        level: task.level.clone(),
        sample,
        turn: turns.len() as u32,
        messages,
        response: String::new(),
        finish_reason: None,
        usage: None,
        logprobs: Vec::new(),
        code: None,
        no_code: None,
        result: None,
        reward: None,
        feedback: String::new(),
        error: None,
    };
    let completion = match shared.client.chat(&record.messages, &cfg.sampling).await {
        Ok(c) => c,
        Err(e) => {
            record.error = Some(e.to_string());
            return Ok(record);
        }
    };
    record.response = completion.content;
    record.finish_reason = completion.finish_reason;
    record.usage = completion.usage;
    record.logprobs = completion.logprobs.iter().map(|t| t.logprob).collect();
    match extract_code(&record.response) {
        Ok(code) => {
            let result = judge(shared, task, sample, record.turn, &code).await?;
            record.reward = cfg.recipe.reward(&result).ok();
            record.feedback = prompt::feedback(&result, cfg.feedback_tokens);
            record.code = Some(code);
            record.result = Some(result);
        }
        Err(why) => {
            record.reward = Some(cfg.recipe.void_reward());
            record.feedback = prompt::no_code_feedback(&why.0);
            record.no_code = Some(why.0);
        }
    }
    Ok(record)
}

async fn judge(
    shared: &Shared,
    task: &Task,
    sample: u32,
    turn: u32,
    code: &str,
) -> Result<EvalResult> {
    let dir = shared.cfg.candidates_dir.join(&task.name);
    std::fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
    let path = dir.join(format!("s{sample}-t{turn}.py"));
    std::fs::write(&path, code).map_err(Error::io(&path))?;
    let _slot = shared
        .judge_slots
        .acquire()
        .await
        .map_err(|e| Error::Client(e.to_string()))?;
    let (judge, task, code) = (shared.judge.clone(), task.clone(), code.to_string());
    let result = tokio::task::spawn_blocking(move || judge.judge(&task, &path, &code))
        .await
        .map_err(|e| Error::Client(format!("judge thread: {e}")))?;
    if result.verdict == Verdict::InfraError {
        tracing::warn!(
            "{} sample {sample} turn {turn}: the judge failed (infra_error); the turn is not scored",
            task_name(&result)
        );
    }
    Ok(result)
}

fn task_name(r: &EvalResult) -> &str {
    &r.task.name
}

/// What [`execute`] reports as it goes.
pub enum Progress<'a> {
    /// Before the first new turn: turns already recorded, and turns in the whole run.
    Start {
        done: u64,
        total: u64,
    },
    Turn(&'a TurnRecord),
}

/// Everything one run needs.
pub struct RunSpec {
    pub client: crate::client::ClientConfig,
    pub run: RunConfig,
    pub out_dir: PathBuf,
    /// The suite as given, recorded in the manifest.
    pub suite: String,
    pub tasks: Vec<Task>,
}

/// Connects, opens (or resumes) the run directory and runs every episode to the end, on a
/// runtime of its own; returns every episode of the run.
pub fn execute(
    spec: RunSpec,
    judge: Arc<dyn Judge>,
    progress: impl Fn(Progress<'_>) + Send + Sync + 'static,
) -> Result<Episodes> {
    let runtime = tokio::runtime::Runtime::new().map_err(Error::io(&spec.out_dir))?;
    runtime.block_on(async move {
        let client = ChatClient::connect(spec.client.clone()).await?;
        let manifest = crate::store::Manifest {
            suite: spec.suite.clone(),
            // The model by name: the same model served at another address is the same run.
            model: client.model().to_string(),
            turns: spec.run.turns,
            samples: spec.run.samples,
            history: spec.run.history,
            recipe: spec.run.recipe.name().to_string(),
            sampling: spec.run.sampling.clone(),
            feedback_tokens: spec.run.feedback_tokens,
        };
        let (store, done) = Store::open(&spec.out_dir, &manifest)?;
        let names: std::collections::HashSet<&str> =
            spec.tasks.iter().map(|t| t.name.as_str()).collect();
        let recorded = done
            .iter()
            .filter(|((task, sample), _)| {
                names.contains(task.as_str()) && *sample < spec.run.samples
            })
            .map(|(_, turns)| turns.len().min(spec.run.turns as usize) as u64)
            .sum();
        progress(Progress::Start {
            done: recorded,
            total: spec.tasks.len() as u64
                * u64::from(spec.run.samples)
                * u64::from(spec.run.turns),
        });
        let progress: Box<dyn Fn(&TurnRecord) + Send + Sync> =
            Box::new(move |t| progress(Progress::Turn(t)));
        run(client, judge, &spec.tasks, spec.run, store, done, progress).await
    })
}
