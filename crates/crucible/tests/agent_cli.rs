//! `crucible bench`, `distill` and `rollout` end to end: the real binary, the replay server over
//! real HTTP, the real judge on the CPU. A wrong kernel first, the note on it, then the honest
//! solution; the second and third commands resume the run and send nothing.

#[path = "../../crucible-agent/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{ReplayServer, Reply, rule};

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
    let records = std::fs::read_to_string(out.join("records.jsonl")).unwrap();
    let turns: Vec<serde_json::Value> = records
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
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
