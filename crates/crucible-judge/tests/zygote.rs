//! Referees and candidate processes forked from the zygote, with real processes on the CPU: they
//! judge exactly like fresh ones, they are the zygote's children (so the fork, not a fresh
//! interpreter, started them), a forked candidate is confined by every layer a spawned one has
//! (the attacks of `tests/sandbox.rs` run against forked candidates too, with
//! `CRUCIBLE_TEST_CANDIDATES=forked`), nothing of them is left once the evaluation is over, and a
//! zygote that died is replaced at the next fork.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crucible_judge::{
    Device, EvalConfig, HarnessZygote, Prestart, Runtime, Sandbox, Workers, evaluate_with,
};
use crucible_result::Verdict;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The runtime, a CPU configuration without the verifier, and a zygote; `None` (skipped) without
/// a judge Python runtime.
fn setup() -> Option<(Runtime, EvalConfig, HarnessZygote)> {
    let runtime = match Runtime::discover() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("SKIPPED: no judge Python runtime ({error}); set CRUCIBLE_PYTHON");
            return None;
        }
    };
    let mut cfg = EvalConfig::new(Device::Cpu);
    cfg.verify_policy = None;
    let zygote = HarnessZygote::start(&runtime, Device::Cpu).expect("start the zygote");
    Some((runtime, cfg, zygote))
}

/// The parent pid in /proc/PID/stat, if the process exists.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].split(' ').nth(1)?.parse().ok()
}

fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < until, "{what} within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn forking(zygote: &HarnessZygote) -> Prestart<'_> {
    Prestart {
        zygote: Some(zygote),
        ..Prestart::default()
    }
}

fn judge(runtime: &Runtime, cfg: &EvalConfig, workers: Workers, candidate: &str) -> Verdict {
    let (task, candidate) = (fixture("task_relu.py"), fixture(candidate));
    let (task_src, candidate_src) = (
        std::fs::read(&task).expect("task"),
        std::fs::read(&candidate).expect("candidate"),
    );
    evaluate_with(
        runtime,
        &task,
        &task_src,
        &candidate,
        &candidate_src,
        cfg,
        Some(workers),
    )
    .verdict
}

#[test]
fn a_forked_referee_judges_like_a_fresh_one_and_leaves_nothing_behind() {
    let Some((runtime, cfg, zygote)) = setup() else {
        return;
    };
    for (candidate, expected) in [
        ("honest_relu.py", Verdict::Correct),
        ("wrong_relu.py", Verdict::Incorrect),
    ] {
        let fresh = Workers::spawn(&runtime, &cfg, false).expect("fresh processes");
        assert_eq!(judge(&runtime, &cfg, fresh, candidate), expected);

        let workers =
            Workers::spawn_with(&runtime, &cfg, &forking(&zygote)).expect("forked referee");
        let referee = workers.referee_pid();
        let zygote_pid = zygote.pid().expect("the zygote runs");
        assert_eq!(parent_of(referee), Some(zygote_pid), "forked by the zygote");
        assert_ne!(
            parent_of(workers.candidate_pid()),
            Some(zygote_pid),
            "candidates are never forked from it"
        );
        assert_eq!(judge(&runtime, &cfg, workers, candidate), expected);
        // Killed, released and reaped by the zygote: no process, not even a zombie.
        wait_until(
            "the forked referee is reaped",
            Duration::from_secs(5),
            || parent_of(referee).is_none(),
        );
    }
}

/// The command line of a process, NULs as spaces.
fn cmdline_of(pid: u32) -> String {
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&bytes).replace('\0', " ")
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&child| parent_of(child) == Some(pid))
        .collect()
}

#[test]
fn a_forked_candidate_is_confined_and_judges_like_a_spawned_one() {
    let Some((runtime, mut cfg, zygote)) = setup() else {
        return;
    };
    cfg.sandbox = Some(Sandbox::default());
    let prestart = Prestart {
        zygote: Some(&zygote),
        fork_candidates: true,
        ..Prestart::default()
    };
    for (candidate, expected) in [
        ("honest_relu.py", Verdict::Correct),
        ("wrong_relu.py", Verdict::Incorrect),
    ] {
        let workers = Workers::spawn_with(&runtime, &cfg, &prestart).expect("forked pair");
        let zygote_pid = zygote.pid().expect("the zygote runs");
        let supervisor = workers.candidate_pid();
        assert_eq!(
            parent_of(supervisor),
            Some(zygote_pid),
            "forked by the zygote"
        );
        assert!(
            cmdline_of(supervisor).contains("crucible_harness.zygote"),
            "no fresh interpreter: {}",
            cmdline_of(supervisor)
        );
        // The supervisor's child is the init of the candidate's PID namespace: its pid there is 1.
        let init = (0..250)
            .find_map(|_| {
                let found = children_of(supervisor).first().copied();
                if found.is_none() {
                    std::thread::sleep(Duration::from_millis(20));
                }
                found
            })
            .expect("the sandbox's init");
        let status = std::fs::read_to_string(format!("/proc/{init}/status")).expect("init");
        let nspid = status
            .lines()
            .find(|l| l.starts_with("NSpid:"))
            .expect("NSpid");
        assert!(
            nspid.trim_end().ends_with("\t1"),
            "init is pid 1 of its namespace: {nspid}"
        );
        assert_eq!(judge(&runtime, &cfg, workers, candidate), expected);
        wait_until(
            "the forked candidate is reaped",
            Duration::from_secs(5),
            || parent_of(supervisor).is_none(),
        );
    }
}

#[test]
fn a_dead_zygote_is_replaced_and_its_referees_die_with_it() {
    let Some((runtime, cfg, zygote)) = setup() else {
        return;
    };
    let mut orphaned =
        Workers::spawn_with(&runtime, &cfg, &forking(&zygote)).expect("forked referee");
    let first = zygote.pid().expect("the zygote runs");
    let referee = orphaned.referee_pid();
    assert_eq!(parent_of(referee), Some(first));
    // SAFETY: plain syscall on the zygote this test started.
    unsafe { libc::kill(first as libc::pid_t, libc::SIGKILL) };
    wait_until(
        "the referee dies with its zygote",
        Duration::from_secs(10),
        || !orphaned.alive(),
    );
    assert!(
        orphaned.death_note().contains("the referee ended"),
        "{}",
        orphaned.death_note()
    );
    drop(orphaned);

    let workers = Workers::spawn_with(&runtime, &cfg, &forking(&zygote)).expect("forked referee");
    let second = zygote.pid().expect("a new zygote runs");
    assert_ne!(second, first);
    assert_eq!(parent_of(workers.referee_pid()), Some(second));
    assert_eq!(
        judge(&runtime, &cfg, workers, "honest_relu.py"),
        Verdict::Correct
    );
}
