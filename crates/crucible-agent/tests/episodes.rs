//! Exact multi-turn, best-window, retry, resume and distill runs, driven by the replay server
//! over real HTTP, judged by the scripted judge.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{ReplayServer, Reply, ScriptedJudge, rule};
use crucible_agent::client::{ClientConfig, Sampling};
use crucible_agent::engine::{self, RunConfig, RunSpec};
use crucible_agent::episode::History;
use crucible_agent::store::{Episodes, RECORDS};
use crucible_agent::suite::Task;
use crucible_rl::Recipe;

fn task(name: &str) -> Task {
    Task {
        name: name.into(),
        level: "builtin".into(),
        path: format!("/nonexistent/{name}.py").into(),
        source: format!("# task {name}\nclass Model: pass"),
    }
}

fn spec(url: &str, out: &Path, tasks: Vec<Task>, turns: u32, history: History) -> RunSpec {
    let mut client = ClientConfig::new(url);
    client.backoff = Duration::from_millis(10);
    client.timeout = Duration::from_secs(10);
    client.concurrency = 2;
    RunSpec {
        client,
        run: RunConfig {
            turns,
            samples: 1,
            history,
            sampling: Sampling::default(),
            feedback_tokens: 256,
            recipe: Recipe::from_name("drkernel").unwrap(),
            episodes: 2,
            judge_jobs: 1,
            candidates_dir: out.join("candidates"),
        },
        out_dir: out.to_path_buf(),
        suite: "test".into(),
        tasks,
    }
}

fn run(spec: RunSpec) -> Episodes {
    engine::execute(spec, Arc::new(ScriptedJudge), |_| {}).unwrap()
}

/// The contents of a request's messages.
fn contents(request: &serde_json::Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn multi_turn_feeds_each_verdict_back() {
    // Turn 0: no code. Turn 1: wrong. Turn 2: correct at 1.5x.
    let server = ReplayServer::start(vec![
        rule("# task a", vec![Reply::text("I would rather not.")]),
        rule("nothing was judged", vec![Reply::code("WRONG = 1")]),
        rule("Verdict: incorrect", vec![Reply::code("SPEEDUP=1.5")]),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let episodes = run(spec(
        &server.url,
        dir.path(),
        vec![task("a")],
        3,
        History::All,
    ));
    let turns = &episodes[&("a".to_string(), 0)];
    assert_eq!(turns.len(), 3);
    assert!(turns[0].no_code.as_deref().unwrap().contains("no fenced"));
    assert_eq!(turns[0].reward, Some(0.0));
    assert_eq!(
        turns[1].result.as_ref().unwrap().verdict.as_str(),
        "incorrect"
    );
    assert!(turns[2].is_correct());
    // drkernel: 0.5 + 0.5 * 1.5 + 0.5 * 0.9.
    assert!((turns[2].reward.unwrap() - 1.7).abs() < 1e-12);
    assert_eq!(turns[2].logprobs, vec![-0.25, -1.5]);
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0]["model"], "replay-model");
    assert_eq!(requests[0]["logprobs"], true);
    assert_eq!(requests[0]["top_logprobs"], 0);
    // History `all`: system, task, then (answer, note) per earlier turn.
    let last = contents(&requests[2]);
    assert_eq!(last.len(), 6);
    assert_eq!(last[2], "I would rather not.");
    assert!(last[3].starts_with("Verdict: nothing was judged: the response has no fenced"));
    assert!(last[4].contains("WRONG = 1"));
    assert!(
        last[5].starts_with("Verdict: incorrect: the outputs do not match"),
        "{}",
        last[5]
    );
    // The record holds the exact prompt that was sent.
    assert_eq!(turns[2].messages.len(), 6);
    assert!(dir.path().join("candidates/a/s0-t2.py").is_file());
}

#[test]
fn best_window_keeps_the_highest_scoring_consecutive_turns() {
    // Rewards by turn (drkernel, coverage 0.9): 0: 1.45 (1.0x) 1: 0 2: 0 3: 2.45 (3x) 4: 0.
    let replies = vec![
        Reply::code("SPEEDUP=1.0  # t0"),
        Reply::code("WRONG  # t1"),
        Reply::code("WRONG  # t2"),
        Reply::code("SPEEDUP=3.0  # t3"),
        Reply::code("WRONG  # t4"),
        Reply::code("WRONG  # t5"),
    ];
    // Every prompt ends with the task (turn 0) or a note; one rule serves them in order.
    let server = ReplayServer::start(vec![rule("", replies)]);
    let dir = tempfile::tempdir().unwrap();
    let episodes = run(spec(
        &server.url,
        dir.path(),
        vec![task("a")],
        6,
        History::BestWindow(2),
    ));
    let turns = &episodes[&("a".to_string(), 0)];
    assert_eq!(turns.len(), 6);
    let shown = |turn: usize| -> Vec<String> {
        contents(&server.requests()[turn])
            .iter()
            .skip(2)
            .step_by(2)
            .map(|c| c.lines().nth(2).unwrap_or("").to_string())
            .collect()
    };
    // Turn 2 sees turns 0, 1 (fewer than... exactly the window).
    assert_eq!(shown(2), vec!["SPEEDUP=1.0  # t0", "WRONG  # t1"]);
    // Turn 3: windows (0,1)=1.45 (1,2)=0: the first.
    assert_eq!(shown(3), vec!["SPEEDUP=1.0  # t0", "WRONG  # t1"]);
    // Turn 5: windows (0,1)=1.45 (1,2)=0 (2,3)=2.45 (3,4)=2.45: the latest tie, (3,4).
    assert_eq!(shown(5), vec!["SPEEDUP=3.0  # t3", "WRONG  # t4"]);
    let best = crucible_agent::episode::best_turn(turns, Default::default()).unwrap();
    assert_eq!(best.turn, 3);
}

#[test]
fn transient_failures_are_retried_and_fatal_ones_end_the_episode() {
    let server = ReplayServer::start(vec![
        rule(
            "# task a",
            vec![
                Reply::status(503),
                Reply::status(429),
                Reply::code("SPEEDUP=2"),
            ],
        ),
        rule("# task b", vec![Reply::status(400)]),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let episodes = run(spec(
        &server.url,
        dir.path(),
        vec![task("a"), task("b")],
        1,
        History::All,
    ));
    assert!(episodes[&("a".to_string(), 0)][0].is_correct());
    let b = &episodes[&("b".to_string(), 0)][0];
    assert!(
        b.error.as_deref().unwrap().contains("HTTP 400"),
        "{:?}",
        b.error
    );
    assert_eq!(server.requests().len(), 4);
}

#[test]
fn an_interrupted_run_resumes_with_only_the_missing_turns() {
    let replies = || {
        vec![
            rule("# task a", vec![Reply::code("WRONG  # a0")]),
            rule("# task b", vec![Reply::code("SPEEDUP=1.2  # b0")]),
            rule("Verdict: incorrect", vec![Reply::code("SPEEDUP=2  # a1")]),
            rule("Verdict: correct", vec![Reply::code("SPEEDUP=2.5  # b1")]),
        ]
    };
    let dir = tempfile::tempdir().unwrap();
    let first = ReplayServer::start(replies());
    let full = run(spec(
        &first.url,
        dir.path(),
        vec![task("a"), task("b")],
        2,
        History::All,
    ));
    assert_eq!(first.requests().len(), 4);

    // Keep turn 0 of both tasks, and half a line of a third record (the interruption).
    let path = dir.path().join(RECORDS);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let kept: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.contains("\"turn\":0"))
        .collect();
    assert_eq!(kept.len(), 2);
    let partial = &lines.iter().find(|l| l.contains("\"turn\":1")).unwrap()[..40];
    std::fs::write(&path, format!("{}\n{partial}", kept.join("\n"))).unwrap();

    let second = ReplayServer::start(replies());
    let resumed = run(spec(
        &second.url,
        dir.path(),
        vec![task("a"), task("b")],
        2,
        History::All,
    ));
    assert_eq!(
        second.requests().len(),
        2,
        "only the two turn-1 prompts are sent again"
    );
    assert_eq!(resumed, full);
    // A third run has nothing left to do.
    let third = ReplayServer::start(replies());
    let again = run(spec(
        &third.url,
        dir.path(),
        vec![task("a"), task("b")],
        2,
        History::All,
    ));
    assert_eq!(third.requests().len(), 0);
    assert_eq!(again, full);
    // Other settings in the same directory are refused.
    let err = engine::execute(
        spec(&third.url, dir.path(), vec![task("a")], 3, History::All),
        Arc::new(ScriptedJudge),
        |_| {},
    )
    .unwrap_err();
    assert!(err.to_string().contains("turns: 2 then, 3 now"), "{err}");
}
