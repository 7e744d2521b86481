//! Fast@p against hand-computed values, the distill filter, the trajectory rows and the report
//! files (the HTML page in headless Chromium when it is installed).

mod common;

use std::process::Command;

use common::result;
use crucible_agent::episode::TurnRecord;
use crucible_agent::store::Episodes;
use crucible_agent::{distill, metrics, report, rollout};
use crucible_result::EvalResult;
use crucible_rl::reward::SpeedupBasis;

fn turn(
    task: &str,
    level: &str,
    sample: u32,
    turn: u32,
    r: Option<EvalResult>,
    code: &str,
) -> TurnRecord {
    let reward = r.as_ref().map(|r| if r.correct { 1.0 } else { 0.0 });
    TurnRecord {
        task: task.into(),
        level: level.into(),
        sample,
        turn,
        messages: vec![crucible_agent::client::Message::user(format!(
            "solve {task}"
        ))],
        response: format!("```python\n{code}\n```"),
        finish_reason: Some("stop".into()),
        usage: None,
        logprobs: vec![-0.5],
        code: r.as_ref().map(|_| code.to_string()),
        no_code: r.is_none().then(|| "none".to_string()),
        result: r,
        reward,
        feedback: "note".into(),
        error: None,
    }
}

fn correct(speedup: Option<f64>) -> Option<EvalResult> {
    Some(result("correct", speedup, &[]))
}

fn wrong() -> Option<EvalResult> {
    Some(result("incorrect", None, &[]))
}

/// Five samples over two levels, two turns each.
fn episodes() -> Episodes {
    let mut e = Episodes::new();
    let mut add = |task: &str, level: &str, sample, turns: Vec<(Option<EvalResult>, &str)>| {
        let turns = turns
            .into_iter()
            .enumerate()
            .map(|(i, (r, code))| turn(task, level, sample, i as u32, r, code))
            .collect();
        e.insert((task.to_string(), sample), turns);
    };
    // A: wrong, then correct 1.1x (best: turn 1).
    add(
        "a",
        "l1",
        0,
        vec![(wrong(), "a0"), (correct(Some(1.1)), "a1")],
    );
    // A: correct 2.5x at turn 0, slower at turn 1 (best: turn 0).
    add(
        "a",
        "l1",
        1,
        vec![(correct(Some(2.5)), "a2"), (correct(Some(0.8)), "a3")],
    );
    // B: correct, untimed.
    add("b", "l2", 0, vec![(None, ""), (correct(None), "b1")]);
    // B: a hack then wrong.
    add(
        "b",
        "l2",
        1,
        vec![
            (
                Some(result("rejected", None, &[("no-triton-launch", "reject")])),
                "b2",
            ),
            (wrong(), "b3"),
        ],
    );
    // C: correct 1.6x but flagged.
    add(
        "c",
        "l2",
        0,
        vec![
            (wrong(), "c0"),
            (
                Some(result(
                    "correct",
                    Some(1.6),
                    &[("below-bandwidth-floor", "flag")],
                )),
                "c1",
            ),
        ],
    );
    e
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn fast_p_matches_hand_computed_values() {
    let r = metrics::report(&episodes());
    let m = &r.overall;
    assert_eq!((m.samples, m.correct), (5, 4));
    // Best speedups of correct samples: 1.1, 2.5, untimed, 1.6.
    // fast_p over 5 samples at p = 0, 1, 1.2, 1.5, 2, 3.
    let expected = [4.0 / 5.0, 3.0 / 5.0, 2.0 / 5.0, 2.0 / 5.0, 1.0 / 5.0, 0.0];
    for (got, want) in m.fast_p.all.iter().zip(expected) {
        assert!(close(*got, want), "{:?} vs {expected:?}", m.fast_p.all);
    }
    let over_correct = [1.0, 3.0 / 4.0, 2.0 / 4.0, 2.0 / 4.0, 1.0 / 4.0, 0.0];
    for (got, want) in m.fast_p.correct.iter().zip(over_correct) {
        assert!(close(got.unwrap(), want), "{:?}", m.fast_p.correct);
    }
    // Geomean of 1.1, 2.5, 1.6.
    let geo = (1.1f64 * 2.5 * 1.6).powf(1.0 / 3.0);
    assert!(close(m.geomean_speedup_fp32.unwrap(), geo));
    assert_eq!(m.timed_correct, 3);
    // Judged turns: 9 (one turn had no code); one hack, one flag.
    assert_eq!(m.judged_turns, 9);
    assert!(close(m.hack_rate, 1.0 / 9.0));
    assert!(close(m.flag_rate, 1.0 / 9.0));
    assert!(close(m.no_code_rate, 1.0 / 10.0));
    // Best by turn: after turn 0 only sample a/1 is correct (2.5x); after turn 1, four.
    assert!(close(m.best_by_turn[0].correct_rate, 1.0 / 5.0));
    assert!(close(m.best_by_turn[0].fast_p.all[4], 1.0 / 5.0));
    assert!(close(m.best_by_turn[1].correct_rate, 4.0 / 5.0));
    // Per level: l1 has two samples, both correct, 1.1x and 2.5x.
    let l1 = &r.per_level["l1"];
    assert_eq!(l1.samples, 2);
    assert!(close(l1.fast_p.all[2], 0.5));
    let l2 = &r.per_level["l2"];
    assert_eq!((l2.samples, l2.correct), (3, 2));
}

#[test]
fn distill_keeps_correct_honest_fast_unique_final_kernels() {
    let mut e = episodes();
    // A third sample of `a` whose final code repeats sample 0's (whitespace aside).
    e.insert(
        ("a".into(), 2),
        vec![turn("a", "l1", 2, 0, correct(Some(1.1)), "a1  \n\n")],
    );
    // A fourth, fast and unique, over the cap of 2 for `a` with sample 0 (1.1x) behind it.
    e.insert(
        ("a".into(), 3),
        vec![turn("a", "l1", 3, 0, correct(Some(1.9)), "a9")],
    );
    let filter = distill::Filter {
        min_speedup: 1.0,
        basis: SpeedupBasis::Matched,
        per_task: 2,
    };
    let (examples, tally) = distill::select(&e, &filter);
    // Finals: a/0 1.1 keep, a/1 0.8 slow, a/2 dup of a/0, a/3 1.9 keep, b/0 untimed slow,
    // b/1 wrong, c/0 flagged. Order: fastest first: a/3, a/0 (cap 2), so a/2 is the duplicate.
    let kept: Vec<(String, u32)> = examples
        .iter()
        .map(|x| (x.task.clone(), x.sample))
        .collect();
    assert_eq!(kept, vec![("a".to_string(), 3), ("a".to_string(), 0)]);
    assert_eq!(
        (
            tally.episodes,
            tally.kept,
            tally.slow,
            tally.incorrect,
            tally.dishonest,
            tally.duplicate,
            tally.over_cap
        ),
        (7, 2, 2, 1, 1, 1, 0)
    );
    // The conversation: the final prompt, then the final response.
    let last = examples[1].messages.last().unwrap();
    assert_eq!(
        (last.role.as_str(), last.content.as_str()),
        ("assistant", "```python\na1\n```")
    );
    // With min 0, the untimed CPU result passes; a cap of 1 leaves one of a's out.
    let (examples, tally) = distill::select(
        &e,
        &distill::Filter {
            min_speedup: 0.0,
            basis: SpeedupBasis::Matched,
            per_task: 1,
        },
    );
    assert!(examples.iter().any(|x| x.task == "b"));
    assert_eq!(tally.over_cap, 2);

    let dir = tempfile::tempdir().unwrap();
    let (jsonl, parquet) = (dir.path().join("sft.jsonl"), dir.path().join("sft.parquet"));
    distill::write_jsonl(&jsonl, &examples).unwrap();
    distill::write_parquet(&parquet, &examples).unwrap();
    let lines = std::fs::read_to_string(&jsonl).unwrap();
    let first: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    assert_eq!(first["messages"][0]["role"], "user");
    check_with_pyarrow(&parquet, examples.len());
}

/// Reads the Parquet file back with pyarrow (the judge's venv has it) when Python is there.
fn check_with_pyarrow(path: &std::path::Path, rows: usize) {
    let Ok(python) = std::env::var("CRUCIBLE_PYTHON") else {
        eprintln!("SKIP pyarrow check: CRUCIBLE_PYTHON is not set");
        return;
    };
    // With `datasets` importable, also load it the way a trainer does.
    let script = "import sys, pyarrow.parquet as pq\n\
                  t = pq.read_table(sys.argv[1])\n\
                  m = t.column('messages').to_pylist()\n\
                  print(t.num_rows, m[0][-1]['role'], str(t.schema.field('messages').type))\n\
                  try:\n    import datasets\n\
                  except ImportError:\n    print('SKIP datasets: not installed', file=sys.stderr)\n\
                  else:\n\
                  \x20   ds = datasets.load_dataset('parquet', data_files=sys.argv[1])['train']\n\
                  \x20   assert ds[0]['messages'][-1]['role'] == 'assistant', ds[0]\n\
                  \x20   print('datasets rows', len(ds), file=sys.stderr)";
    let out = Command::new(python)
        .args(["-c", script])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.trim(),
        format!(
            "{rows} assistant list<item: struct<role: string not null, content: string not null>>"
        )
    );
}

#[test]
fn rollout_rows_carry_rewards_masks_and_advantages() {
    let mut e = episodes();
    // A rollout error masks its episode.
    let mut broken = turn("c", "l2", 1, 0, None, "");
    broken.error = Some("model server: gave up".into());
    broken.no_code = None;
    e.insert(("c".into(), 1), vec![broken]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.parquet");
    let recipe = crucible_rl::Recipe::from_name("drkernel").unwrap();
    let cfg = crucible_rl::Config::new(crucible_rl::Estimator::Trloo);
    let (rows, summary) = rollout::write(&e, &recipe, &cfg, &out).unwrap();
    assert_eq!(rows.len(), 11);
    assert_eq!(summary.masked, 1);
    let broken = rows
        .iter()
        .find(|r| r.prompt_id == "c" && r.sample == 1)
        .unwrap();
    assert_eq!(broken.mask_reason.as_deref(), Some("episode_error"));
    let back = crucible_rl::io::read(&out).unwrap();
    assert_eq!(back.records, rows);
    assert!(
        rows.iter()
            .filter(|r| r.weight == Some(1.0))
            .all(|r| r.advantage.is_some())
    );
    let prompts = std::fs::read_to_string(dir.path().join("t.prompts.jsonl")).unwrap();
    assert_eq!(prompts.lines().count(), 11);
}

#[test]
fn report_files_and_the_page_in_chromium() {
    let e = episodes();
    let r = metrics::report(&e);
    let dir = tempfile::tempdir().unwrap();
    let written = report::write_all(dir.path(), "test report", &e, &r).unwrap();
    assert_eq!(written.len(), 6);
    for png in [report::SPEEDUP_PNG, report::FAST_P_PNG] {
        let bytes = std::fs::read(dir.path().join(png)).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{png}");
    }
    let csv = std::fs::read_to_string(dir.path().join("samples.csv")).unwrap();
    assert_eq!(csv.lines().count(), 6);
    assert!(csv.contains("a,l1,1,2,0,correct,true,2.5,2.5,"), "{csv}");
    let metrics_csv = std::fs::read_to_string(dir.path().join("metrics.csv")).unwrap();
    assert!(
        metrics_csv.contains("all,fast_p,1.2,0.4\n"),
        "{metrics_csv}"
    );
    chromium_check(&dir.path().join(report::HTML));
}

fn chromium() -> Option<String> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(str::to_string)
}

/// Loads the page headless: both plots must load, and the console must stay quiet. With
/// CRUCIBLE_SCREENSHOT set, also writes a screenshot there.
fn chromium_check(page: &std::path::Path) {
    let Some(browser) = chromium() else {
        eprintln!("SKIP the report page check: no chromium on PATH (apt-get install chromium)");
        return;
    };
    let url = format!("file://{}", page.display());
    let profile = tempfile::tempdir().unwrap();
    let base = |cmd: &mut Command| {
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args([
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=5000",
        ]);
    };
    let mut cmd = Command::new(&browser);
    base(&mut cmd);
    let out = cmd.arg("--dump-dom").arg(&url).output().unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        dom.contains("data-plots-loaded=\"2/2\""),
        "plots did not load: {dom:.400}"
    );
    let log = String::from_utf8_lossy(&out.stderr);
    let console: Vec<&str> = log.lines().filter(|l| l.contains("CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:?}");
    if let Ok(shot) = std::env::var("CRUCIBLE_SCREENSHOT") {
        let mut cmd = Command::new(&browser);
        base(&mut cmd);
        let status = cmd
            .arg(format!("--screenshot={shot}"))
            .arg("--window-size=1280,1500")
            .arg(&url)
            .status()
            .unwrap();
        assert!(status.success());
    }
}
