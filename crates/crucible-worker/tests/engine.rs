//! The engine on the CPU with real harness processes (Triton's interpreter): the warm pool, the
//! same verdicts with and without concurrency, the GPU lock across engines and processes, and
//! an infrastructure fault.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crucible_judge::{Device, EvalConfig, Runtime, StageLimits};
use crucible_result::{EvalResult, Verdict};
use crucible_worker::engine::{EngineEvent, GpuLock, Probe, evaluate_all};
use crucible_worker::{Engine, EngineOptions, Job, JudgeOptions, Tuning};

mod common;

use common::{fixture, harness_descendants, runtime, wait_until};

fn job(task: &str, candidate: &str, seed: u64) -> Job {
    Job {
        task_name: task.trim_end_matches(".py").to_string(),
        task_source: fixture(task),
        candidate_source: fixture(candidate),
        options: JudgeOptions {
            seed: Some(seed),
            trials: Some(2),
            ..JudgeOptions::default()
        },
        deadline: None,
    }
}

/// A probe that keeps every event.
fn recorder() -> (Probe, Arc<Mutex<Vec<EngineEvent>>>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    let probe: Probe = Arc::new(move |event| {
        if let Ok(mut events) = sink.lock() {
            events.push(event);
        }
    });
    (probe, events)
}

fn tuning(probe: Option<Probe>) -> Tuning {
    let mut base = EvalConfig::new(Device::Cpu);
    base.limits = StageLimits::uniform(Device::Cpu, Duration::from_secs(60));
    Tuning {
        base: Some(base),
        probe,
        ..Tuning::default()
    }
}

fn engine(runtime: &Runtime, options: EngineOptions, tuning: Tuning) -> Engine {
    Engine::with_tuning(runtime.clone(), Device::Cpu, options, tuning).expect("an engine")
}

fn summary(result: &EvalResult) -> (Verdict, Option<String>, Vec<bool>) {
    (
        result.verdict,
        result
            .failure
            .as_ref()
            .map(|f| format!("{:?}@{}", f.class, f.stage)),
        result.trials.iter().map(|t| t.passed).collect(),
    )
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|line| line.starts_with("Uid:") && line.split_whitespace().nth(2) == Some("0"))
}

fn pid_running(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie would still show, with state Z.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| !stat.contains(") Z "))
        .unwrap_or(false)
}

#[test]
fn the_pool_gives_every_evaluation_a_fresh_candidate_process_and_kills_it() {
    let Some(runtime) = runtime() else { return };
    let (probe, events) = recorder();
    let options = EngineOptions {
        concurrency: 2,
        warm_pool: true,
        reference_cache: true,
        exclusive_timing: true,
    };
    let engine = engine(&runtime, options, tuning(Some(probe)));
    // The pool's first pairs wait for the zygote's imports; an evaluation asking before
    // any pair exists starts its own (on a loaded 2-core CI machine, seconds), which is not what
    // this test is about.
    wait_until("the pool's first pairs", Duration::from_secs(120), || {
        (engine.started() >= 2).then_some(())
    });
    let jobs: Vec<Job> = (0..4)
        .map(|seed| job("task_relu.py", "honest_relu.py", seed))
        .collect();
    let results = evaluate_all(&engine, &jobs);
    for result in &results {
        assert_eq!(result.verdict, Verdict::Correct, "{:#?}", result.failure);
    }
    let pids: Vec<u32> = events
        .lock()
        .expect("events")
        .iter()
        .filter_map(|e| match e {
            EngineEvent::WorkersTaken {
                candidate_pid,
                prestarted: true,
                ..
            } => Some(*candidate_pid),
            _ => None,
        })
        .collect();
    assert!(
        pids.len() >= 2,
        "most evaluations should find a prestarted pair: {pids:?}"
    );
    let mut distinct = pids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        pids.len(),
        "a candidate process was reused: {pids:?}"
    );
    // Killed before its result came back; reaped off the critical path, so allow a moment.
    let reaped_by = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|pid| pid_running(*pid)) && Instant::now() < reaped_by {
        std::thread::sleep(Duration::from_millis(50));
    }
    for pid in &pids {
        assert!(
            !pid_running(*pid),
            "candidate process {pid} outlived its evaluation"
        );
    }
    // Each evaluation's processes report the CPU they used, read before they were killed. The
    // pool forks both from its zygote, so neither imported torch (a fresh interpreter spends
    // well over 0.3 s of CPU on that alone; forked, they used 0.01-0.02 s and 0.05-0.07 s here;
    // an evaluation that found no pair ready starts fresh ones), and what is read is their own
    // work, not nothing.
    let events = events.lock().expect("events");
    let used: Vec<[f64; 2]> = events
        .iter()
        .filter_map(|e| match e {
            EngineEvent::ProcessCpu { cpu_s } => Some(*cpu_s),
            _ => None,
        })
        .collect();
    assert_eq!(used.len(), jobs.len(), "{used:?}");
    assert!(
        used.iter()
            .any(|[referee, candidate]| *referee < 0.3 && *candidate < 0.3),
        "no pair was forked: {used:?}"
    );
    assert!(
        used.iter().all(|[_, candidate]| *candidate > 0.0),
        "{used:?}"
    );
    let at_take: Vec<[f64; 2]> = events
        .iter()
        .filter_map(|e| match e {
            EngineEvent::WorkersTaken { cpu_s, .. } => Some(*cpu_s),
            _ => None,
        })
        .collect();
    let most = |cpu: &[[f64; 2]], side: usize| cpu.iter().map(|c| c[side]).fold(0.0, f64::max);
    assert!(
        most(&at_take, 0) <= most(&used, 0) && most(&at_take, 1) <= most(&used, 1),
        "{at_take:?} {used:?}"
    );
}

/// A process's nice value, from /proc/PID/stat (field 19); `None` once it is gone.
fn nice_of(pid: u32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    after_name.split(' ').nth(16)?.parse().ok()
}

/// The nice values of this process's descendants running `crucible_harness` (the pools of
/// every test in this binary among them).
fn harness_descendants_nice() -> Vec<i32> {
    harness_descendants()
        .into_iter()
        .filter_map(nice_of)
        .collect()
}

/// A pair counts as ready once both processes said hello, not when it was spawned: the
/// benchmark starts its clock on that count, and `take` prefers such a pair. While it waits it
/// runs below the judge's CPU priority, and gets the judge's when taken.
#[test]
fn the_pool_counts_a_pair_ready_once_it_said_hello() {
    let Some(runtime) = runtime() else { return };
    let own_nice = nice_of(std::process::id()).expect("own nice");
    let taken_nice = Arc::new(Mutex::new(Vec::new()));
    let (probe, events) = {
        let (record, events) = recorder();
        let taken_nice = Arc::clone(&taken_nice);
        let probe: Probe = Arc::new(move |event: EngineEvent| {
            if let EngineEvent::WorkersTaken { candidate_pid, .. } = &event {
                taken_nice
                    .lock()
                    .expect("nice")
                    .push(nice_of(*candidate_pid));
            }
            record(event);
        });
        (probe, events)
    };
    let options = EngineOptions {
        concurrency: 1,
        ..EngineOptions::default()
    };
    let mut tuning = tuning(Some(probe));
    tuning.pool_depth = Some(2);
    let engine = engine(&runtime, options, tuning);
    // Spawned a moment ago; importing torch alone takes longer than this check.
    assert_eq!(engine.warm(), 0, "a pair counted ready before its hello");
    let until = Instant::now() + Duration::from_secs(120);
    while engine.warm() < 2 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!((engine.warm(), engine.started()), (2, 2));
    // Both pairs' referees and candidate harnesses.
    let waiting = harness_descendants_nice()
        .into_iter()
        .filter(|nice| *nice == own_nice + crucible_worker::engine::POOL_NICE)
        .count();
    assert!(
        waiting >= 4,
        "pooled processes below the judge's priority: {waiting}"
    );
    let result = engine.evaluate(&job("task_relu.py", "honest_relu.py", 21));
    assert_eq!(result.verdict, Verdict::Correct, "{:#?}", result.failure);
    let taken: Vec<bool> = events
        .lock()
        .expect("events")
        .iter()
        .filter_map(|e| match e {
            EngineEvent::WorkersTaken { said_hello, .. } => Some(*said_hello),
            _ => None,
        })
        .collect();
    assert_eq!(taken, [true]);
    if is_root() {
        // Raising a priority back needs CAP_SYS_NICE (the judge's, as root).
        assert_eq!(*taken_nice.lock().expect("nice"), [Some(own_nice)]);
    }
    let start = result
        .stages
        .iter()
        .find(|s| s.name == "start")
        .expect("a start stage");
    assert!(
        start.duration_s < 1.0,
        "a ready pair still took {} s to start",
        start.duration_s
    );
}

#[test]
fn concurrency_and_the_pool_give_the_same_verdicts_as_one_at_a_time() {
    let Some(runtime) = runtime() else { return };
    let jobs = vec![
        job("task_relu.py", "honest_relu.py", 11),
        job("task_relu.py", "wrong_relu.py", 12),
        job("task_relu.py", "syntax_error.py", 13),
        job("task_relu.py", "runtime_error.py", 14),
        job("task_relu.py", "compile_error.py", 15),
        job("task_relu.py", "honest_relu.py", 16),
    ];
    let serial = engine(&runtime, EngineOptions::plain(), tuning(None));
    let one_at_a_time: Vec<_> = evaluate_all(&serial, &jobs).iter().map(summary).collect();
    drop(serial);
    let options = EngineOptions {
        concurrency: 3,
        ..EngineOptions::default()
    };
    let concurrent = engine(&runtime, options, tuning(None));
    let at_once: Vec<_> = evaluate_all(&concurrent, &jobs)
        .iter()
        .map(summary)
        .collect();
    assert_eq!(one_at_a_time, at_once);
    // The set is mixed, so the comparison can fail.
    let verdicts: Vec<Verdict> = at_once.iter().map(|s| s.0).collect();
    assert_eq!(
        verdicts,
        [
            Verdict::Correct,
            Verdict::Incorrect,
            Verdict::CompileError,
            Verdict::RuntimeError,
            Verdict::CompileError,
            Verdict::Correct
        ]
    );
}

/// Threads of two engines take their engine's lock, hold it a while, and report the interval.
fn hold_from_both(
    a: &Engine,
    b: &Engine,
    events: &Mutex<Vec<EngineEvent>>,
) -> Vec<(Instant, Instant)> {
    std::thread::scope(|scope| {
        for engine in [a, b, a, b] {
            scope.spawn(move || {
                for _ in 0..3 {
                    let lock = engine.gpu_lock().expect("a lock");
                    let held = lock.acquire();
                    std::thread::sleep(Duration::from_millis(30));
                    drop(held);
                }
            });
        }
    });
    let mut intervals: Vec<(Instant, Instant)> = events
        .lock()
        .expect("events")
        .iter()
        .filter_map(|e| match e {
            EngineEvent::TimedPhases { entered, left, .. } => Some((*entered, *left)),
            _ => None,
        })
        .collect();
    intervals.sort();
    intervals
}

fn overlapping(intervals: &[(Instant, Instant)]) -> usize {
    intervals.windows(2).filter(|w| w[1].0 < w[0].1).count()
}

fn locking_engine(runtime: &Runtime, file: PathBuf, probe: Probe) -> Engine {
    let options = EngineOptions {
        concurrency: 2,
        warm_pool: false,
        reference_cache: false,
        exclusive_timing: true,
    };
    let tuning = Tuning {
        lock_file: Some(file),
        ..tuning(Some(probe))
    };
    engine(runtime, options, tuning)
}

#[test]
fn the_lock_file_serializes_timed_phases_across_engines() {
    let Some(runtime) = runtime() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let (probe, events) = recorder();
    let shared = dir.path().join("gpu-test.lock");
    let a = locking_engine(&runtime, shared.clone(), Arc::clone(&probe));
    let b = locking_engine(&runtime, shared, Arc::clone(&probe));
    let intervals = hold_from_both(&a, &b, &events);
    assert_eq!(intervals.len(), 12);
    assert_eq!(overlapping(&intervals), 0, "{intervals:?}");

    // The control: with a lock file each, the same holders overlap (so the check above can fail).
    events.lock().expect("events").clear();
    let c = locking_engine(&runtime, dir.path().join("gpu-c.lock"), Arc::clone(&probe));
    let d = locking_engine(&runtime, dir.path().join("gpu-d.lock"), probe);
    let intervals = hold_from_both(&c, &d, &events);
    assert!(overlapping(&intervals) > 0, "{intervals:?}");
}

#[test]
fn another_process_holding_the_gpu_lock_makes_the_engine_wait() {
    let Some(runtime) = runtime() else { return };
    if !Path::new("/usr/bin/flock").exists() {
        eprintln!("SKIPPED: no /usr/bin/flock to hold the lock from another process");
        return;
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("gpu-shared.lock");
    let (probe, _events) = recorder();
    let engine = locking_engine(&runtime, file.clone(), probe);
    let mut holder = std::process::Command::new("/usr/bin/flock")
        .arg(&file)
        .args(["sleep", "1"])
        .spawn()
        .expect("flock runs");
    // Let it take the lock first.
    std::thread::sleep(Duration::from_millis(300));
    let asked = Instant::now();
    let held = engine.gpu_lock().expect("a lock").acquire();
    let waited = asked.elapsed();
    drop(held);
    let _ = holder.wait();
    assert!(
        waited >= Duration::from_millis(500),
        "took the lock after {waited:?} while another process held it"
    );
}

#[test]
fn a_fault_of_the_judge_is_an_infra_error_never_the_candidates() {
    let Some(runtime) = runtime() else { return };
    let engine = engine(&runtime, EngineOptions::default(), tuning(None));
    // The referee cannot draw this task's inputs: the judge's (or the task's) fault.
    let broken = job("broken_task.py", "honest_relu.py", 1);
    let result = engine.evaluate(&broken);
    assert_eq!(result.verdict, Verdict::InfraError, "{:#?}", result.failure);
    // Options the judge cannot apply are refused the same way, before any process starts.
    let mut bad = job("task_relu.py", "honest_relu.py", 1);
    bad.options.tolerance = Some("loose".into());
    let result = engine.evaluate(&bad);
    assert_eq!(result.verdict, Verdict::InfraError);
    let failure = result.failure.expect("a failure");
    assert_eq!(failure.stage, "setup");
    assert!(failure.message.contains("loose"), "{}", failure.message);
    // And the engine still judges the next candidate.
    let fine = engine.evaluate(&job("task_relu.py", "honest_relu.py", 2));
    assert_eq!(fine.verdict, Verdict::Correct, "{:#?}", fine.failure);
}

#[test]
fn versions_name_the_judge_and_the_python_side() {
    let Some(runtime) = runtime() else { return };
    let engine = engine(&runtime, EngineOptions::plain(), tuning(None));
    let versions = engine.versions();
    for part in ["crucible ", "harness-", "torch ", "triton ", "gpu cpu"] {
        assert!(versions.contains(part), "{versions}");
    }
}

/// The scratch file `name` of a candidate process, once one has made it (`None` after `limit`).
fn wait_for_scratch_file(name: &str, limit: Duration) -> Option<PathBuf> {
    let deadline = Instant::now() + limit;
    let parents = [PathBuf::from("/dev/shm"), std::env::temp_dir()];
    while Instant::now() < deadline {
        for parent in &parents {
            let Ok(entries) = std::fs::read_dir(parent) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path().join(name);
                if entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with("crucible-cand-")
                    && path.exists()
                {
                    return Some(path);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// While the candidate's process compiles (it says so, see protocol.rs), the judge holds no
/// share of the GPU, so another evaluation's timed phase gets it at once; the judge takes its
/// share back only after that phase is over, before the candidate's kernels run. The stand-in
/// compile lasts 1.5 s; the test takes the lock exclusively during it and keeps it for 2 s.
#[test]
fn the_judge_lets_the_gpu_go_while_the_candidate_compiles() {
    lets_the_gpu_go_during("compile");
}

/// The same for Triton's launcher build at a kernel's first launch (gcc, outside the compile).
#[test]
fn the_judge_lets_the_gpu_go_while_the_candidate_builds_a_launcher() {
    lets_the_gpu_go_during("launcher");
}

fn lets_the_gpu_go_during(stage: &str) {
    let Some(runtime) = runtime() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let (probe, _events) = recorder();
    let mut tuning = Tuning {
        lock_file: Some(dir.path().join("gpu-notes.lock")),
        ..tuning(Some(probe))
    };
    // The static verifier refuses the fixture (file access, a suppressed error); this tests
    // the judge.
    if let Some(base) = tuning.base.as_mut() {
        base.verify_policy = None;
    }
    let options = EngineOptions {
        concurrency: 1,
        warm_pool: false,
        reference_cache: false,
        exclusive_timing: true,
    };
    let engine = engine(&runtime, options, tuning);
    let marker = format!("compile-notes-{stage}-{}", std::process::id());
    let mut job = job("task_relu.py", "honest_relu.py", 1);
    job.candidate_source = fixture("compile_notes_relu.py")
        .replace("@MARKER@", &marker)
        .replace("@STAGE@", stage);
    let lock = engine.gpu_lock().expect("a lock");
    let (result, waited) = std::thread::scope(|scope| {
        let evaluation = scope.spawn(|| engine.evaluate(&job));
        let found = wait_for_scratch_file(&marker, Duration::from_secs(60));
        let asked = Instant::now();
        let held = found.map(|_| lock.acquire());
        let waited = asked.elapsed();
        std::thread::sleep(Duration::from_secs(2));
        drop(held);
        (evaluation.join().expect("the evaluation"), waited)
    });
    assert_eq!(result.verdict, Verdict::Correct, "{:#?}", result.failure);
    assert!(
        waited < Duration::from_millis(700),
        "a timed phase waited {waited:?} for a candidate that was in its {stage} stand-in"
    );
}

/// Findings that say how an evaluation shared the device: a retry alone, a run alone, a run
/// with no other large task's evaluation beside it.
fn sharing_codes(result: &EvalResult) -> Vec<String> {
    result
        .findings
        .iter()
        .map(|f| f.code.clone())
        .filter(|code| code.ends_with("-alone") || code == "ran-one-large-at-a-time")
        .collect()
}

/// A task whose own trials are large work, and whose evaluation ran out of memory beside other
/// evaluations, runs one at a time among such tasks' evaluations from then on, and alone once
/// it ran out of memory that way too (on an 80 GiB H100 each correct 23_Softmax failed beside
/// three matmuls, and they beside it); a retry that large work did not follow marks nothing.
#[test]
fn a_large_task_that_ran_out_of_memory_beside_others_runs_apart_then_alone() {
    let Some(runtime) = runtime() else { return };
    let options = EngineOptions {
        concurrency: 2,
        warm_pool: false,
        ..EngineOptions::default()
    };
    for (large_work_bytes, marked) in [(1, true), (u64::MAX, false)] {
        let mut tuning = tuning(None);
        if let Some(base) = tuning.base.as_mut() {
            // The engine sets these from the GPU's memory; on the CPU every trial is large here.
            base.large_work_bytes = large_work_bytes;
            base.large_tasks = Some(Arc::new(crucible_judge::LargeTasks::new()));
        }
        let engine = engine(&runtime, options, tuning);
        let honest = |seed| {
            let result = engine.evaluate(&job("task_relu.py", "honest_relu.py", seed));
            assert_eq!(result.verdict, Verdict::Correct, "{:#?}", result.failure);
            sharing_codes(&result)
        };
        let out_of_memory = |seed| {
            let result = engine.evaluate(&job("task_relu.py", "out_of_memory.py", seed));
            assert_eq!(
                result.verdict,
                Verdict::RuntimeError,
                "{:#?}",
                result.failure
            );
            sharing_codes(&result)
        };
        assert_eq!(out_of_memory(1), ["retried-alone"]);
        if marked {
            assert_eq!(honest(2), ["ran-one-large-at-a-time"]);
            assert_eq!(out_of_memory(3), ["retried-alone"]);
            assert_eq!(honest(4), ["ran-alone"]);
        } else {
            assert_eq!(
                honest(2),
                Vec::<String>::new(),
                "large work {large_work_bytes}"
            );
        }
        let other_task = engine.evaluate(&job("task_wide_softmax.py", "honest_wide_softmax.py", 5));
        assert_eq!(
            other_task.verdict,
            Verdict::Correct,
            "{:#?}",
            other_task.failure
        );
        assert_eq!(sharing_codes(&other_task), Vec::<String>::new());
    }
}

/// Two evaluations of a task that runs one at a time among such tasks' evaluations: the
/// second takes its processes only once the first ended, while another task's evaluation runs
/// beside the first from start to end.
#[test]
fn a_task_run_one_at_a_time_waits_for_its_own_kind_only() {
    let Some(runtime) = runtime() else { return };
    let options = EngineOptions {
        concurrency: 3,
        warm_pool: false,
        ..EngineOptions::default()
    };
    let mut tuning = tuning(None);
    if let Some(base) = tuning.base.as_mut() {
        // Every trial is large work on the CPU here; the held candidate's file access is
        // refused by the static verifier, rightly: this tests the engine.
        base.large_work_bytes = 1;
        base.large_tasks = Some(Arc::new(crucible_judge::LargeTasks::new()));
        base.verify_policy = None;
    }
    let engine = engine(&runtime, options, tuning);
    let oom = engine.evaluate(&job("task_relu.py", "out_of_memory.py", 1));
    assert_eq!(sharing_codes(&oom), ["retried-alone"]);

    let marker = format!("held-relu-{}", std::process::id());
    let mut held = job("task_relu.py", "honest_relu.py", 2);
    held.candidate_source = fixture("held_relu.py").replace("@MARKER@", &marker);
    let second = job("task_relu.py", "honest_relu.py", 3);
    let other = job("task_wide_softmax.py", "honest_wide_softmax.py", 4);
    let second_control = crucible_worker::engine::Control::new();
    let (first, second, other, second_stage_then) = std::thread::scope(|scope| {
        let first = scope.spawn(|| engine.evaluate(&held));
        let in_trial = wait_for_scratch_file(&marker, Duration::from_secs(120))
            .expect("the held candidate reached its first forward");
        let second = scope.spawn(|| engine.evaluate_controlled(&second, &second_control));
        let other = engine.evaluate(&other);
        // The other task's evaluation ran from start to end beside the held one; the second
        // of the held task's kind has not started a trial (nor any stage: it waits to take its
        // processes, and the static verifier is off).
        let second_stage_then = (!second.is_finished()).then(|| second_control.stage());
        std::fs::create_dir(in_trial.with_file_name(format!("{marker}-go"))).expect("go");
        (
            first.join().expect("the held evaluation"),
            second.join().expect("the second evaluation"),
            other,
            second_stage_then,
        )
    });
    assert_eq!(other.verdict, Verdict::Correct, "{:#?}", other.failure);
    assert_eq!(sharing_codes(&other), Vec::<String>::new());
    assert_eq!(
        second_stage_then,
        Some(None),
        "the second evaluation (Some: not finished; its stage) while the first held its trial"
    );
    for result in [&first, &second] {
        assert_eq!(result.verdict, Verdict::Correct, "{:#?}", result.failure);
        assert_eq!(sharing_codes(result), ["ran-one-large-at-a-time"]);
    }
}

/// An engine judging two at once without a pool, timing under the GPU lock in `lock_file`,
/// whose trials are large work from `large_work_bytes` on, on a device of `device_memory_bytes`
/// (the engine sets both from a GPU's memory), `configure`d further.
fn large_task_engine(
    runtime: &Runtime,
    lock_file: &Path,
    large_work_bytes: u64,
    device_memory_bytes: u64,
    configure: impl FnOnce(&mut EvalConfig),
) -> Engine {
    large_task_engine_keeping_slots(
        runtime,
        lock_file,
        (large_work_bytes, device_memory_bytes),
        false,
        configure,
    )
}

/// [`large_task_engine`] (`sizes`: its large-work size and device memory), whose evaluations
/// waiting for the large-evaluation claim keep their slots where `keep_slots` says so.
fn large_task_engine_keeping_slots(
    runtime: &Runtime,
    lock_file: &Path,
    (large_work_bytes, device_memory_bytes): (u64, u64),
    keep_slots: bool,
    configure: impl FnOnce(&mut EvalConfig),
) -> Engine {
    let options = EngineOptions {
        concurrency: 2,
        warm_pool: false,
        reference_cache: false,
        exclusive_timing: true,
    };
    let mut tuning = Tuning {
        lock_file: Some(lock_file.to_path_buf()),
        keep_slots_while_waiting: keep_slots,
        ..tuning(None)
    };
    if let Some(base) = tuning.base.as_mut() {
        base.large_work_bytes = large_work_bytes;
        base.large_tasks = Some(Arc::new(crucible_judge::LargeTasks::new()));
        base.device_memory_bytes = Some(device_memory_bytes);
        configure(base);
    }
    engine(runtime, options, tuning)
}

/// Beside other evaluations the referee sizes the trials at `init`; where the task's trials and
/// precision measurement would need more than half of the device's memory, the evaluation waits
/// for the GPU lock's large-evaluation file (stage `large-claim`) and holds it to its end. Here
/// the test holds that file, as another worker's evaluation would (real processes on the CPU,
/// the lock in a file of the test's, the device's memory set as the engine sets it from a
/// GPU's); where two such evaluations fit, the evaluation never asks for it.
#[test]
fn a_task_too_large_to_fit_twice_waits_for_the_large_evaluation_claim() {
    let Some(runtime) = runtime() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let lock_file = dir.path().join("gpu-large.lock");
    let engine_with_memory = |device_memory_bytes| {
        // The relu's small trials: 12,800 bytes each, 41,600 at the peak by the judge's
        // estimate (with the precision measurement's 36 bytes for each of 800 outputs).
        large_task_engine(&runtime, &lock_file, 12_800, device_memory_bytes, |_| {})
    };
    let elsewhere = GpuLock::new(lock_file.clone(), None).expect("a second lock on the file");
    let held = elsewhere.large_evaluation();
    let control = crucible_worker::engine::Control::new();

    // A device of 83,199 bytes does not hold two.
    let small = engine_with_memory(2 * 41_600 - 1);
    let (result, stage_then) = std::thread::scope(|scope| {
        let evaluation = scope.spawn(|| {
            small.evaluate_controlled(&job("task_relu.py", "honest_relu.py", 1), &control)
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        while control.stage().as_deref() != Some("large-claim") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(500));
        let stage_then = (!evaluation.is_finished()).then(|| control.stage());
        drop(held);
        (evaluation.join().expect("the evaluation"), stage_then)
    });
    assert_eq!(
        stage_then,
        Some(Some("large-claim".to_string())),
        "the evaluation (Some: not finished; its stage) while the claim was held elsewhere"
    );
    assert_eq!(result.verdict, Verdict::Correct, "{:#?}", result.failure);
    assert_eq!(sharing_codes(&result), ["ran-one-large-at-a-time"]);
    let waited = (result.stages.iter())
        .find(|stage| stage.name == "large-claim")
        .map(|stage| stage.duration_s);
    assert!(waited.is_some_and(|s| s >= 0.5), "{:?}", result.stages);

    // One of 83,200 bytes holds two: it never asks, and ends while the claim is held elsewhere.
    let _held = elsewhere.large_evaluation();
    let fits = engine_with_memory(2 * 41_600).evaluate(&job("task_relu.py", "honest_relu.py", 2));
    assert_eq!(fits.verdict, Verdict::Correct, "{:#?}", fits.failure);
    assert_eq!(sharing_codes(&fits), Vec::<String>::new());
    assert!(
        !fits.stages.iter().any(|stage| stage.name == "large-claim"),
        "{:?}",
        fits.stages
    );
}

/// While evaluations of a task too large to fit twice wait for the large-evaluation claim
/// (held here by the test, as another worker's evaluation would), their slots go to another
/// task's evaluation: with both of an engine's two slots taken by such waits, a small task's
/// evaluation runs from start to end, where an engine that keeps the waiting evaluations'
/// slots (as before) leaves it waiting to begin. The waiting ones then take their slots back
/// and end correct, one at a time.
#[test]
fn evaluations_waiting_for_the_large_evaluation_claim_lend_their_slots() {
    let Some(runtime) = runtime() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let lock_file = dir.path().join("gpu-large.lock");
    // The wide softmax's trials (524,288 bytes) are large work and the relu's (12,800) are
    // not; a device of 1 byte holds no large evaluation twice.
    let engine_keeping = |keep_slots| {
        large_task_engine_keeping_slots(&runtime, &lock_file, (100_000, 1), keep_slots, |_| {})
    };
    let elsewhere = GpuLock::new(lock_file.clone(), None).expect("a second lock on the file");
    // The small evaluation's result where it ended while both large ones waited (else `None`),
    // the large ones' results, and how long the small one took.
    let small_beside_two_waiting = |engine: &Engine, within: Duration| {
        let held = elsewhere.large_evaluation();
        let controls = [(); 3].map(|()| crucible_worker::engine::Control::new());
        std::thread::scope(|scope| {
            let large: Vec<_> = (1..=2)
                .map(|seed| {
                    let control = &controls[seed - 1];
                    let job = job(
                        "task_wide_softmax.py",
                        "honest_wide_softmax.py",
                        seed as u64,
                    );
                    scope.spawn(move || engine.evaluate_controlled(&job, control))
                })
                .collect();
            let waiting = || {
                controls[..2]
                    .iter()
                    .all(|c| c.stage().as_deref() == Some("large-claim"))
            };
            wait_until(
                "both large evaluations to wait for the claim",
                Duration::from_secs(120),
                || waiting().then_some(()),
            );
            let began = Instant::now();
            let small = scope.spawn(|| {
                engine.evaluate_controlled(&job("task_relu.py", "honest_relu.py", 3), &controls[2])
            });
            while !small.is_finished() && began.elapsed() < within {
                std::thread::sleep(Duration::from_millis(20));
            }
            let took = began.elapsed();
            let ended_beside = small.is_finished() && waiting();
            let small_stage = controls[2].stage();
            drop(held);
            let small = small.join().expect("the small evaluation");
            let large: Vec<_> = large
                .into_iter()
                .map(|e| e.join().expect("a large evaluation"))
                .collect();
            (ended_beside.then_some(small), small_stage, large, took)
        })
    };

    let lending = engine_keeping(false);
    assert_eq!(
        lending.callers(),
        4,
        "a thread for each slot that may be lent"
    );
    let (small, _, large, took) = small_beside_two_waiting(&lending, Duration::from_secs(120));
    let small = small.expect("the small evaluation ended while both large ones waited");
    assert_eq!(small.verdict, Verdict::Correct, "{:#?}", small.failure);
    for result in &large {
        assert_eq!(result.verdict, Verdict::Correct, "{:#?}", result.failure);
        assert_eq!(sharing_codes(result), ["ran-one-large-at-a-time"]);
    }

    // Kept: in more than twice that time the small one has not begun (no stage: it waits for
    // a slot), and it runs once the claim goes.
    let keeping = engine_keeping(true);
    assert_eq!(keeping.callers(), 2);
    let (ended, stage, large, _) =
        small_beside_two_waiting(&keeping, took * 2 + Duration::from_secs(2));
    assert!(
        ended.is_none(),
        "the small evaluation ended beside two waits that kept their slots"
    );
    assert_eq!(
        stage, None,
        "the small evaluation's stage while both slots were kept"
    );
    for result in &large {
        assert_eq!(result.verdict, Verdict::Correct, "{:#?}", result.failure);
    }
}

/// A cancel (the worker loop's, for a cancelled task or one past its deadline) ends an
/// evaluation's wait for its turn among large ones at once, `infra_error`, never charged to the
/// candidate, while the turn stays with the evaluation that has it: the wait for the GPU lock's
/// large-evaluation claim (held here by the test, as another worker's evaluation would) and the
/// wait to run one at a time among evaluations of a task that ran out of memory beside others
/// (held by an evaluation whose candidate the test holds in its first forward); and another
/// task's wait to begin while an evaluation runs alone.
#[test]
fn a_cancel_ends_a_wait_for_the_turn_among_large_evaluations() {
    let Some(runtime) = runtime() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let lock_file = dir.path().join("gpu-large.lock");
    // Every trial is large work, and a device of 1 byte holds no evaluation twice. The held
    // candidate's file access is refused by the static verifier, rightly: this tests the engine.
    let engine = large_task_engine(&runtime, &lock_file, 1, 1, |base| {
        base.verify_policy = None;
    });
    // The evaluation of `job`, cancelled once it waits in `stage`; `release` then lets the turn
    // go, so that where the cancel did not end the wait this fails instead of waiting for good.
    // Its result, and whether it ended within 3 s of the cancel.
    let cancelled_while_in = |stage: Option<&str>, job: &Job, release: &mut dyn FnMut()| {
        let control = crucible_worker::engine::Control::new();
        std::thread::scope(|scope| {
            let evaluation = scope.spawn(|| engine.evaluate_controlled(job, &control));
            std::thread::sleep(Duration::from_millis(500));
            let deadline = Instant::now() + Duration::from_secs(60);
            while control.stage().as_deref() != stage && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            std::thread::sleep(Duration::from_millis(300));
            assert!(!evaluation.is_finished(), "it did not wait");
            assert_eq!(control.stage().as_deref(), stage);
            control.cancel();
            let cancelled = Instant::now();
            while !evaluation.is_finished() && cancelled.elapsed() < Duration::from_secs(3) {
                std::thread::sleep(Duration::from_millis(10));
            }
            let ended_in_time = evaluation.is_finished();
            release();
            (evaluation.join().expect("the evaluation"), ended_in_time)
        })
    };
    let assert_stopped = |result: &EvalResult, ended_in_time: bool| {
        assert!(ended_in_time, "the cancelled wait went on for 3 s");
        assert_eq!(result.verdict, Verdict::InfraError, "{:#?}", result.failure);
        let failure = result.failure.as_ref().expect("a failure");
        assert!(
            failure.message.contains("stopped by its caller"),
            "{failure:#?}"
        );
    };

    // The claim, held elsewhere: the evaluation waits in `large-claim` until cancelled.
    let elsewhere = GpuLock::new(lock_file.clone(), None).expect("a second lock on the file");
    let mut held = Some(elsewhere.large_evaluation());
    let (result, ended_in_time) = cancelled_while_in(
        Some("large-claim"),
        &job("task_relu.py", "honest_relu.py", 1),
        &mut || drop(held.take()),
    );
    assert_stopped(&result, ended_in_time);
    let last = result.stages.last().map(|stage| stage.name.as_str());
    assert_eq!(last, Some("large-claim"), "{:?}", result.stages);

    // Its task runs one at a time from now on: the next evaluation's turn is held by one whose
    // candidate waits in its first forward; the one after waits to take its processes (no
    // stage) until cancelled, and the held one then ends correct.
    let oom = engine.evaluate(&job("task_relu.py", "out_of_memory.py", 2));
    assert_eq!(sharing_codes(&oom), ["retried-alone"]);
    let second = job("task_relu.py", "honest_relu.py", 4);
    let (first, (second, ended_in_time)) = while_a_relu_is_held(&engine, 3, |release| {
        cancelled_while_in(None, &second, release)
    });
    assert_stopped(&second, ended_in_time);
    assert_eq!(sharing_codes(&second), Vec::<String>::new());
    assert_eq!(first.verdict, Verdict::Correct, "{:#?}", first.failure);
    assert_eq!(sharing_codes(&first), ["ran-one-large-at-a-time"]);

    // Out of memory one at a time too, its task runs alone from now on: while one of its
    // evaluations, held in its first forward, runs alone, another task's evaluation waits to
    // begin (no stage) until cancelled.
    let oom = engine.evaluate(&job("task_relu.py", "out_of_memory.py", 5));
    assert_eq!(sharing_codes(&oom), ["retried-alone"]);
    let other = job("task_wide_softmax.py", "honest_wide_softmax.py", 7);
    let (alone, (other, ended_in_time)) = while_a_relu_is_held(&engine, 6, |release| {
        cancelled_while_in(None, &other, release)
    });
    assert_stopped(&other, ended_in_time);
    assert_eq!(alone.verdict, Verdict::Correct, "{:#?}", alone.failure);
    assert_eq!(sharing_codes(&alone), ["ran-alone"]);
}

/// What `while_held` returns, run while `engine` evaluates an honest relu (`seed`) whose
/// candidate waits in its first forward until `release` (which `while_held` may call, and which
/// is called after it), and that evaluation's result.
fn while_a_relu_is_held<T>(
    engine: &Engine,
    seed: u64,
    while_held: impl FnOnce(&mut dyn FnMut()) -> T,
) -> (EvalResult, T) {
    let marker = format!("held-relu-{seed}-{}", std::process::id());
    let mut held = job("task_relu.py", "honest_relu.py", seed);
    held.candidate_source = fixture("held_relu.py").replace("@MARKER@", &marker);
    std::thread::scope(|scope| {
        let evaluation = scope.spawn(|| engine.evaluate(&held));
        let in_trial = wait_for_scratch_file(&marker, Duration::from_secs(120))
            .expect("the held candidate reached its first forward");
        let go = in_trial.with_file_name(format!("{marker}-go"));
        let mut release = || std::fs::create_dir_all(&go).expect("go");
        let value = while_held(&mut release);
        release();
        (evaluation.join().expect("the held evaluation"), value)
    })
}

/// An engine judging two at once with a warm pool of two, whose trials are large work from
/// `large_work_bytes` on (the engine sets it from the GPU's memory), and the events it reported.
fn two_at_once_with_a_pool(
    runtime: &Runtime,
    large_work_bytes: u64,
) -> (Engine, Arc<Mutex<Vec<EngineEvent>>>) {
    let (probe, events) = recorder();
    let mut tuning = tuning(Some(probe));
    tuning.pool_depth = Some(2);
    if let Some(base) = tuning.base.as_mut() {
        base.large_work_bytes = large_work_bytes;
        base.large_tasks = Some(Arc::new(crucible_judge::LargeTasks::new()));
    }
    let options = EngineOptions {
        concurrency: 2,
        ..EngineOptions::default()
    };
    (engine(runtime, options, tuning), events)
}

/// A task that runs alone keeps the warm pool's waiting pairs beside it (on an H200 killing them
/// for each 23_Softmax cost the evaluations after it their start-up: 1505 evaluations an hour at
/// N 8 against 3942 at N 4) until it runs out of memory beside them; from then on it clears the
/// device of them too. A candidate the static verifier refuses never waits for the device.
#[test]
fn a_task_run_alone_clears_the_pools_pairs_only_once_it_ran_out_of_memory_beside_them() {
    let Some(runtime) = runtime() else { return };
    // On the CPU every trial is large here.
    let (engine, events) = two_at_once_with_a_pool(&runtime, 1);
    let made_way = || {
        events
            .lock()
            .expect("events")
            .iter()
            .filter(|event| matches!(event, EngineEvent::MadeWay { .. }))
            .count()
    };
    let alone = |result: &EvalResult| -> Vec<(String, String)> {
        result
            .findings
            .iter()
            .filter(|f| f.code.ends_with("-alone"))
            .map(|f| (f.code.clone(), f.message.clone()))
            .collect()
    };
    let codes = |result: &EvalResult| -> Vec<String> {
        alone(result).into_iter().map(|(code, _)| code).collect()
    };

    // Out of memory beside others: retried with the device cleared, and marked to run apart
    // from other large tasks' evaluations; out of memory that way too: retried so again, and
    // marked to run alone.
    for (seed, made_way_then) in [(1, 1), (11, 2)] {
        let oom = engine.evaluate(&job("task_relu.py", "out_of_memory.py", seed));
        assert_eq!(oom.verdict, Verdict::RuntimeError, "{:#?}", oom.failure);
        assert_eq!(codes(&oom), ["retried-alone"]);
        assert_eq!(made_way(), made_way_then);
    }

    // The task's next evaluation: no other evaluation beside it, the pool's pairs stay.
    let honest = engine.evaluate(&job("task_relu.py", "honest_relu.py", 2));
    assert_eq!(honest.verdict, Verdict::Correct, "{:#?}", honest.failure);
    let found = alone(&honest);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "ran-alone");
    assert!(
        found[0].1.contains("no other evaluation beside it"),
        "{found:?}"
    );
    assert_eq!(made_way(), 2, "the pool kept its pairs");

    // Refused by the static verifier: it never took the device, so it never ran alone.
    let refused = engine.evaluate(&job("task_relu.py", "syntax_error.py", 3));
    assert_eq!(
        refused.verdict,
        Verdict::CompileError,
        "{:#?}",
        refused.failure
    );
    assert_eq!(
        refused.failure.as_ref().map(|f| f.stage.as_str()),
        Some("verify")
    );
    assert_eq!(codes(&refused), Vec::<String>::new());
    assert_eq!(made_way(), 2);

    // Out of memory again beside the pool's pairs: retried with the device cleared ...
    let oom_again = engine.evaluate(&job("task_relu.py", "out_of_memory.py", 4));
    assert_eq!(
        oom_again.verdict,
        Verdict::RuntimeError,
        "{:#?}",
        oom_again.failure
    );
    assert_eq!(codes(&oom_again), ["retried-alone", "ran-alone"]);
    assert_eq!(made_way(), 3);

    // ... and the task clears it from the start from then on.
    let cleared = engine.evaluate(&job("task_relu.py", "honest_relu.py", 5));
    assert_eq!(cleared.verdict, Verdict::Correct, "{:#?}", cleared.failure);
    let found = alone(&cleared);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].1.contains("the device to itself"), "{found:?}");
    assert_eq!(made_way(), 4);
}

/// A small task retried after failing beside others runs with no other evaluation beside it,
/// but keeps the warm pool's waiting pairs: they were never its trouble (an 80 GiB H100: six
/// matmuls failed beside one 23_Softmax, and clearing the pool for each of their retries left
/// 31 of 64 evaluations starting their own processes). Its second failure is its result.
#[test]
fn a_small_task_retried_alone_keeps_the_pools_pairs() {
    let Some(runtime) = runtime() else { return };
    let (engine, events) = two_at_once_with_a_pool(&runtime, u64::MAX);
    wait_until("two pairs ready", Duration::from_secs(180), || {
        (engine.warm() >= 2).then_some(())
    });
    let oom = engine.evaluate(&job("task_relu.py", "out_of_memory.py", 1));
    assert_eq!(oom.verdict, Verdict::RuntimeError, "{:#?}", oom.failure);
    let retries: Vec<&str> = oom
        .findings
        .iter()
        .filter(|f| f.code.ends_with("-alone"))
        .map(|f| f.message.as_str())
        .collect();
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert!(
        retries[0].contains("while sharing the device with other evaluations"),
        "{retries:?}"
    );
    let events = events.lock().expect("events");
    assert!(
        !events
            .iter()
            .any(|event| matches!(event, EngineEvent::MadeWay { .. })),
        "the pool made way for a small task"
    );
    let taken = events
        .iter()
        .filter(|event| matches!(event, EngineEvent::WorkersTaken { .. }))
        .count();
    assert_eq!(taken, 2, "a first attempt and one retry");
}
