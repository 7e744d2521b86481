//! The stages of one evaluation, on one referee and one fresh candidate process:
//! start → reference → load → trials → repeat → launch check → generalize → profiler start →
//! timed inputs → timing → profile → timed output. Each stage is a method of [`Session`], which
//! owns the two processes and the scratch paths; what a stage finds goes into the
//! [`Evaluation`] record, and the result is assembled from that record in one place
//! (`judge::assemble`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crucible_result::{
    Failure, FailureClass, Finding, Launch, PrecisionClass, Severity, Stats, Timing,
};

use super::calls::{candidate_call, candidate_call_noting, referee_call};
use super::record::{build_profile, merge_launches, own_launches, record_trial};
use super::{
    Abort, DeviceSharing, Evaluation, LOW_COVERAGE, ReferenceKey, ReferenceTiming,
    ReferenceTimingCache, Stop, TimingConfig, Workers, fresh_seed, generalize,
};
use crate::error::InfraError;
use crate::precision;
use crate::process::HarnessProcess;
use crate::protocol::{
    AwaitPrecisionReply, CandidateRequest, CheckReply, Done, InitReply, MeasurePrecisionReply,
    NOTE_COMPILED, NOTE_COMPILING, NOTE_YIELD, PrepareReply, ProfileReply, RefereeRequest,
    RunReply, StartPrecisionReply, TimeDeliverReply, TimeReferenceReply, TimeReply, TimedLoop,
    TrialSizes, resumed,
};
use crate::timing::{
    TimingEvidence, batch_count, claimed_median_ms, contradicted_witnesses, timing_findings,
};

/// Profiled forwards per evaluation; the busy-time witness keeps the least.
const PROFILED_FORWARDS: u32 = 3;
/// Outside-timed batches of back-to-back forwards, and the length each aims at (at most). 20 ms
/// since 2026-12-04 (60 before): on an H200 (three runs, 138 honest evaluations from 16 rows to
/// full size) honest claims still came out at 1.67 to 2.27 times this witness; the bound is 0.75.
const OUTSIDE_BATCHES: u32 = 3;
const OUTSIDE_BATCH_TARGET_MS: f64 = 20.0;
/// The synchronized batches' length: each forward waits for the device there, so fewer fit. Its
/// bound's margin is thin (honest launch-bound claims from 1.002 times it): at 12 ms, one honest
/// tiny softmax of 8 came out at 0.82 and was rejected (one H200 run, 2026-12-04), so it stays at
/// the length its bounds were measured with.
const SYNCED_BATCH_TARGET_MS: f64 = 30.0;
/// How many more times the outside witnesses are measured where a first measurement
/// contradicts the claim ([`Session::recheck_witnesses`]). On an H200 serving four evaluations
/// at once, one honest matmul's claim came out at 0.838 of its synchronized witness (bound 0.85;
/// 2026-12-04): all three of that witness's batches had come out high, not the claim low (its
/// claim over the back-to-back witness was as usual). Plain CPU load is not the cause: beside
/// 16 busy CPU burners honest claims came out higher against this witness than on an idle host.
const WITNESS_RECHECKS: u32 = 2;

/// Runs every stage after the static verifier. Timing and profile land in `eval` as they are
/// measured, so a later stage's failure keeps them.
pub(super) fn run(
    eval: &mut Evaluation<'_>,
    prestarted: Option<Workers>,
    task_path: &std::path::Path,
    candidate_src: &[u8],
) -> Result<(), Stop> {
    let mut session = Session::start(eval, prestarted, task_path, candidate_src)?;
    let attached = eval.cfg.abort.as_ref().map(|a| a.attach(&session.workers));
    let outcome = session.stages(eval);
    drop(attached);
    match eval.cfg.teardown.as_ref() {
        Some(teardown) => {
            teardown.before_kill(&session.workers);
            session.workers.kill_now();
            teardown.retire(session.workers);
        }
        None => {
            session.workers.candidate.kill();
            session.workers.referee.kill();
        }
    }
    outcome
}

/// One evaluation's processes and paths.
struct Session {
    workers: Workers,
    /// The task file, absolute (the referee loads it).
    task: PathBuf,
    /// The candidate's copy of its source, in its scratch directory.
    candidate_file: PathBuf,
    /// The candidate's own kernel launches over every run so far.
    launches: Vec<Launch>,
    /// Runs that launched none of the candidate's own kernels.
    launch_free: Vec<String>,
    /// Seconds the precision measurement's float64 forwards took on the referee's thread
    /// during the kept trial, where they are ready for it.
    precision_ahead_s: Option<f64>,
}

/// The pauses before the precision measurement is asked for again after running out of device
/// memory beside other evaluations (`DeviceSharing::Evaluations`); after the last, the evaluation
/// ends `infra_error` and the engine retries it alone.
const SHARED_OOM_PAUSES: [Duration; 3] = [
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
];

/// Device memory outside the referee's allocator that still lets a precision measurement that
/// ran out of memory count as the task's size: the referee's own CUDA context and the
/// candidate's (624 to 712 MiB each on an H100) and what an honest candidate's allocator keeps
/// cached, with room to spare. Beyond it, something else held the memory the measurement needed
/// (a candidate can allocate the device full after its last trial, so that a scaled output, which
/// only this measurement refuses, would pass unmeasured).
const HELD_ELSEWHERE_ALLOWANCE: u64 = 4 << 30;

/// A shared claim on the device for untimed work (see [`super::TimedPhaseGate::share`]), when
/// the evaluation has a gate; the large share once a trial showed the evaluation's work large.
pub(super) fn untimed_gpu_work(eval: &Evaluation<'_>) -> Option<super::TimedPhaseGuard> {
    let gate = eval
        .cfg
        .timed_phases
        .as_ref()
        .filter(|_| !eval.holds_device && eval.trial_share.is_none())?;
    Some(large_or_not(eval, gate.as_ref(), eval.large_device_work))
}

/// Between two pieces of untimed GPU work under one `share`: where a timed phase waits for the
/// device, the share goes and is taken again (behind that phase, the share this evaluation's
/// work now needs), so the phase waits for one piece instead of all of them (on an H100 at N 4
/// the timed phases waited 0.6 s median for the shares before them). The large-evaluation
/// claim's holder keeps its share: it goes ahead of waiting timed phases anyway.
fn yield_share(eval: &Evaluation<'_>, share: &mut Option<super::TimedPhaseGuard>) {
    let Some(gate) = eval.cfg.timed_phases.as_ref() else {
        return;
    };
    if share.is_none() || eval.large_claim.is_some() || !gate.timed_phase_waiting() {
        return;
    }
    *share = None;
    *share = Some(large_or_not(eval, gate.as_ref(), eval.large_device_work));
}

/// [`yield_share`] for the share held through a whole trial, where there is one.
fn yield_trial_share(eval: &mut Evaluation<'_>) {
    let mut share = eval.trial_share.take();
    yield_share(eval, &mut share);
    eval.trial_share = share;
}

/// The share for untimed work that is `large` or not: ahead of waiting timed phases while the
/// evaluation holds the large-evaluation claim (which only a large evaluation takes), whose
/// waits are those of every evaluation queued behind the claim.
fn large_or_not(
    eval: &Evaluation<'_>,
    gate: &dyn super::TimedPhaseGate,
    large: bool,
) -> super::TimedPhaseGuard {
    if eval.large_claim.is_some() {
        gate.share_ahead()
    } else if large {
        gate.share_large()
    } else {
        gate.share()
    }
}

/// The precision measurement's device memory above the kept trial, per output element: it
/// peaked at 6.0 times a float32 output's bytes (6.5 reserved by torch's allocator) for a
/// KernelBench 23_Softmax on an H200 (`scripts/probe/precision_memory.py`), three float64
/// copies; with a margin for references that keep more intermediates.
const PRECISION_BYTES_PER_ELEMENT: u64 = 36;

/// The share for the precision measurement of trial 0's outputs: large ones one at a time.
fn precision_gpu_work(eval: &Evaluation<'_>) -> Option<super::TimedPhaseGuard> {
    let elements: u64 = eval.trials.first().map_or(0, |trial| {
        trial.outputs.iter().map(|output| output.numel).sum()
    });
    let gate = eval
        .cfg
        .timed_phases
        .as_ref()
        .filter(|_| !eval.holds_device)?;
    let large =
        eval.large_device_work || precision_work_is_large(elements, eval.cfg.large_work_bytes);
    Some(large_or_not(eval, gate.as_ref(), large))
}

/// What the referee's sizing of the trials says, before the first is drawn: a task whose trials
/// are large work takes the gate's large share from its first claim on (and later evaluations of
/// it too, `EvalConfig::large_tasks`), instead of from its first trial's run; and where its
/// trials with the precision measurement would need more than half of the device's memory, the
/// evaluation takes the gate's large-evaluation claim (stage `large-claim`, the wait) and holds
/// it to its end, so that no two such evaluations hold their tensors at once.
fn keep_large_trials_apart(eval: &mut Evaluation<'_>, sizes: TrialSizes) -> Result<(), Stop> {
    if !trial_work_is_large(sizes.trial_bytes, eval.cfg.large_work_bytes) {
        return Ok(());
    }
    eval.large_device_work = true;
    if let Some(large) = &eval.cfg.large_tasks {
        large.insert(&eval.task_sha256, eval.cfg.size_profile.as_deref());
    }
    let (Some(gate), Some(memory)) = (&eval.cfg.timed_phases, eval.cfg.device_memory_bytes) else {
        return Ok(());
    };
    let needs = evaluation_bytes(sizes);
    if needs.saturating_mul(2) <= memory {
        return Ok(());
    }
    let gate = Arc::clone(gate);
    eval.stage("large-claim", |eval| {
        // A cancel (or the deadline, which the caller turns into one) ends the wait, not only
        // the evaluation's processes: the evaluation before may hold the claim for many seconds.
        let abort = eval.cfg.abort.as_ref();
        let claim = gate.large_evaluation(&|| abort.is_some_and(Abort::is_aborted));
        eval.large_claim = Some(claim.ok_or(Stop::Infra(InfraError::Aborted))?);
        Ok(())
    })?;
    eval.findings.push(Finding::new(
        crate::error::RAN_ONE_LARGE_AT_A_TIME,
        Severity::Info,
        format!(
            "by the task's shapes its trials and precision measurement need about {:.1} GiB, \
             more than half of the device's {:.1} GiB, so this evaluation ran beside no other \
             evaluation of such a task (it waited for the one before to end)",
            gib(needs),
            gib(memory)
        ),
    ));
    Ok(())
}

/// An evaluation's device memory at its peak, estimated from its trials' sizes: a trial's
/// tensors and the precision measurement's float64 copies beyond them (for a KernelBench
/// 23_Softmax, 25.8 GB and 58.0 GB: 78 GiB, where an 80 GiB H100 showed its referee at 54.7 to
/// 60.7 GiB and its candidate's process at 6.9 to 12.9 GiB).
fn evaluation_bytes(sizes: TrialSizes) -> u64 {
    (sizes.trial_bytes).saturating_add(precision_bytes(sizes.output_elements))
}

/// Bytes in GiB, for messages.
fn gib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 30)
}

fn precision_work_is_large(output_elements: u64, large_work_bytes: u64) -> bool {
    precision_bytes(output_elements) >= large_work_bytes
}

/// What the precision measurement holds beyond a trial's tensors, for `output_elements`.
fn precision_bytes(output_elements: u64) -> u64 {
    output_elements.saturating_mul(PRECISION_BYTES_PER_ELEMENT)
}

/// The precision measurement's float64 copies computed ahead (during the kept trial) are held
/// through the later trials, so only up to this fraction of the large-work size (2.2 GB on an
/// H200: a 4096 x 4096 output's four copies are 0.54 GB, KernelBench 8_Matmul_with_irregular_
/// shapes' 1.55 GB; 23_Softmax's would be 51 GB).
const PRECISION_AHEAD_FRACTION: u64 = 8;

/// The seconds the precision measurement's float64 forwards may take; past them it is left
/// unmeasured. Half the trial's limit, which leaves room for a forward that started just
/// inside it.
fn precision_budget_s(trial_limit: Duration) -> f64 {
    trial_limit.as_secs_f64() / 2.0
}

/// The referee's precision measurement, and how many attempts it took: beside other
/// evaluations a shortage often passes (their float64 copies and trials come and go), and
/// waiting a little, without a share, is much cheaper than the engine's retry of the whole
/// evaluation alone. Not while holding the device: every other evaluation would wait too.
///
/// `after_a_stop`: asked again once the candidate's process was killed, whose memory the driver
/// gives back a little later (100 GiB: 0.13-0.26 s, `scripts/probe/kill_release.py`), so a
/// shortage is waited out with nobody else beside it too.
fn measure_precision_pausing(
    referee: &mut HarnessProcess,
    request: &RefereeRequest,
    limit: Duration,
    eval: &mut Evaluation<'_>,
    after_a_stop: bool,
) -> Result<(MeasurePrecisionReply, u32), Stop> {
    let mut pauses = SHARED_OOM_PAUSES.iter();
    let mut attempts = 1;
    let may_pause = !eval.holds_device
        && (after_a_stop || eval.cfg.device_sharing == DeviceSharing::Evaluations);
    loop {
        let measured: MeasurePrecisionReply = {
            let _gpu = precision_gpu_work(eval);
            referee_call(referee, request, limit)?
        };
        match pauses.next() {
            Some(pause) if measured.out_of_memory && may_pause => {
                std::thread::sleep(*pause);
                attempts += 1;
            }
            _ => return Ok((measured, attempts)),
        }
    }
}

/// The judge's fault where the precision measurement ran out of memory while something else
/// may have held it: left unmeasured, a candidate that only atol lets through would pass. Beside
/// other evaluations (seen at 8 at once on an H200: both scaled 23_Softmax candidates `correct`)
/// or the warm pool's waiting pairs (an 80 GiB H100 with twelve of them) the memory was ours;
/// with nothing of ours beside it, more than [`HELD_ELSEWHERE_ALLOWANCE`] held outside the
/// referee's allocator (a candidate that filled the device after its last trial) is not the
/// task's size either. `None`: the shortage, if any, is the task's own.
fn memory_shortage_not_the_tasks(
    measured: &MeasurePrecisionReply,
    attempts: u32,
    sharing: DeviceSharing,
) -> Option<InfraError> {
    if !measured.out_of_memory {
        return None;
    }
    let detail = measured.unmeasured.clone().unwrap_or_default();
    if sharing != DeviceSharing::Nobody {
        return Some(InfraError::SharedDeviceOutOfMemory {
            stage: "precision",
            who: sharing.who(),
            detail: format!("{detail} ({attempts} attempts)"),
        });
    }
    let held = measured.held_elsewhere_bytes?;
    (held > HELD_ELSEWHERE_ALLOWANCE).then(|| InfraError::DeviceHeldElsewhere {
        stage: "precision",
        held_gib: gib(held),
        detail,
    })
}

/// Asks the referee to begin the precision measurement's float64 forwards on `trial`'s inputs
/// while the candidate runs it (they do not need its outputs); whether they began.
fn start_precision_ahead(
    referee: &mut HarnessProcess,
    eval: &Evaluation<'_>,
    trial: &str,
    limit: Duration,
) -> Result<bool, Stop> {
    let request = RefereeRequest::StartPrecision {
        trial: trial.to_string(),
        max_bytes: eval.cfg.large_work_bytes / PRECISION_AHEAD_FRACTION,
        budget_s: precision_budget_s(limit),
    };
    let reply: StartPrecisionReply = referee_call(referee, &request, limit)?;
    tracing::debug!(
        "precision forwards ahead on {trial}: {} ({} bytes of float64 copies)",
        if reply.started {
            "begun"
        } else {
            "too large to hold"
        },
        reply.held_bytes
    );
    Ok(reply.started)
}

/// Waits for the forwards [`start_precision_ahead`] began; the seconds they took where they
/// are ready for the measurement (where they failed, it runs them itself).
fn await_precision_ahead(
    referee: &mut HarnessProcess,
    limit: Duration,
) -> Result<Option<f64>, Stop> {
    let reply: AwaitPrecisionReply =
        referee_call(referee, &RefereeRequest::AwaitPrecision, limit * 2)?;
    if let Some(error) = &reply.error {
        tracing::debug!("the precision forwards begun ahead failed ({error})");
    }
    Ok(reply.precomputed.then_some(reply.seconds))
}

/// Whether a trial whose referee holds `tensor_bytes` (`PrepareReply::tensor_bytes`) makes the
/// evaluation's device work large. The candidate's forward adds its own intermediates on top.
/// On an H200, KernelBench's 23_Softmax (25.6 GB here) ran the device out of memory in trials
/// beside two or three other softmax evaluations, and the engine retried them alone.
fn trial_work_is_large(tensor_bytes: u64, large_work_bytes: u64) -> bool {
    tensor_bytes >= large_work_bytes
}

/// The timed processes' CPU priority for as long as it lives (`TimingConfig::nice`), then
/// the judge's own again.
struct TimedPriority {
    groups: [libc::pid_t; 2],
    restore: i32,
}

impl TimedPriority {
    fn raise(workers: &Workers, nice: Option<i32>) -> Option<TimedPriority> {
        let nice = nice?;
        let priority = TimedPriority {
            groups: workers.process_groups(),
            restore: crate::process::own_nice(),
        };
        for group in priority.groups {
            if let Err(error) = crate::process::set_group_nice(group, nice) {
                // The timing is as valid as without it; only less shielded from other work.
                tracing::debug!("cannot raise the timed processes' priority: {error}");
            }
        }
        Some(priority)
    }
}

impl Drop for TimedPriority {
    fn drop(&mut self) {
        for group in self.groups {
            let _ = crate::process::set_group_nice(group, self.restore);
        }
    }
}

/// What the timing stage hands to the stages after it.
struct TimedPhase {
    reference: TimeReferenceReply,
    /// The reference timed at the candidate's class, when it differs from its own.
    matched: Option<(PrecisionClass, Vec<f64>)>,
    claimed_ms: Vec<f64>,
    phase_wall_s: f64,
    /// The outside witness: ms per back-to-back forward, and forwards per batch.
    outside: Option<(f64, u32)>,
    /// The synchronized witness: ms per forward followed by a device synchronize, and forwards
    /// per batch.
    synced: Option<(f64, u32)>,
    /// The timed phase's wall time per iteration (ms), which sizes the witnesses' batches.
    iteration_ms: f64,
    payload: String,
    delivered_problem: Option<String>,
}

impl TimedPhase {
    /// What the judge knows against the claim, with the profiled busy time.
    fn evidence<'a>(
        &'a self,
        profiled_busy_ms: Option<f64>,
        device_name: &'a str,
    ) -> TimingEvidence<'a> {
        TimingEvidence {
            candidate: &self.claimed_ms,
            candidate_phase_s: self.phase_wall_s,
            profiled_busy_ms,
            outside_forward_ms: self.outside.map(|(ms, _)| ms),
            synced_forward_ms: self.synced.map(|(ms, _)| ms),
            io_bytes: self.reference.io_bytes,
            device_name,
        }
    }
}

/// The least busy time of the profiled forwards (ms): the busy-time witness.
fn least_busy_ms(profiled: &ProfileReply) -> Option<f64> {
    profiled
        .busy_us
        .iter()
        .copied()
        .reduce(f64::min)
        .map(|us| us / 1e3)
}

/// The lesser of two measurements of one witness (ms, forwards per batch), either possibly
/// missing.
fn least_by_ms(a: Option<(f64, u32)>, b: Option<(f64, u32)>) -> Option<(f64, u32)> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
        (a, b) => a.or(b),
    }
}

impl Session {
    /// The `start` stage: ready processes (prestarted ones if they fit), the candidate's file.
    fn start(
        eval: &mut Evaluation<'_>,
        prestarted: Option<Workers>,
        task_path: &std::path::Path,
        candidate_src: &[u8],
    ) -> Result<Session, Stop> {
        let (cfg, runtime) = (eval.cfg, eval.runtime);
        // Workers started for another device (or configuration) are not used.
        let prestarted = prestarted.filter(|w| w.device == cfg.device);
        let workers = eval.stage("start", |_| {
            let mut workers = match prestarted {
                Some(workers) => workers,
                None => Workers::spawn(runtime, cfg, false).map_err(Stop::Infra)?,
            };
            workers.ready(cfg.limits.start)?;
            Ok(workers)
        })?;
        if !workers.missing_sandbox.is_empty() {
            eval.findings.push(Finding::new(
                "sandbox-degraded",
                Severity::Info,
                format!(
                    "the candidate ran in a partial sandbox, without: {}",
                    workers.missing_sandbox.join("; ")
                ),
            ));
        }
        let infra = |what| move |e| Stop::Infra(InfraError::io(what)(e));
        let candidate_file = workers.candidate_dir.path().join("solution.py");
        std::fs::write(&candidate_file, candidate_src)
            .map_err(infra("writing the candidate file"))?;
        let task = std::fs::canonicalize(task_path).map_err(infra("reading the task"))?;
        Ok(Session {
            workers,
            task,
            candidate_file,
            launches: Vec::new(),
            launch_free: Vec::new(),
            precision_ahead_s: None,
        })
    }

    /// Every stage after `start`, in order; the first failure ends the evaluation.
    fn stages(&mut self, eval: &mut Evaluation<'_>) -> Result<(), Stop> {
        let (init_inputs, sizes) = {
            let _gpu = untimed_gpu_work(eval);
            self.reference(eval)?
        };
        // Outside any share: the claim may wait for another evaluation's timed phases to end.
        if let Some(sizes) = sizes {
            keep_large_trials_apart(eval, sizes)?;
        }
        {
            let _gpu = untimed_gpu_work(eval);
            self.load(eval, init_inputs)?;
        }
        self.trials(eval)?;
        if !self.checks(eval)? {
            return Ok(());
        }
        // Its share is taken once the plan asks for the trial: the plan itself runs nothing on
        // the device, and a share taken for it waited for other evaluations' timed phases (0.56
        // s median outside any stage for a correct candidate on an H100, N 4).
        let usable = {
            generalize::generalize_stage(
                eval,
                &mut self.workers.referee,
                &mut self.workers.candidate,
                &self.task,
            )?
        };
        let Some(timing_cfg) = eval.cfg.timing.clone().filter(|_| eval.cfg.is_gpu()) else {
            return Ok(());
        };
        if !usable {
            return Ok(());
        }
        // Without a share: where the warm-up thread has not finished, this waits for it, and its
        // only kernel has one element.
        self.start_profiler(eval)?;
        let timed = timed_loop(eval, &timing_cfg);
        let references = ReferenceTimings::look_up(eval, &timed);
        // Drawing the timed inputs and mapping them is untimed work: under a share, before the
        // lock, unless a reference timing is to be measured first (its inputs and the staged
        // ones would then be held at once).
        let staged = if references.all_cached() {
            let _gpu = untimed_gpu_work(eval);
            Some(self.timed_inputs(eval, timed.seed)?)
        } else {
            None
        };
        // Exclusive use of the device from the first timed request to the last profiled
        // forward; other evaluations' CPU work goes on meanwhile.
        let _exclusive = eval.cfg.timed_phases.as_ref().map(|gate| gate.enter());
        let phase = {
            // Ahead of other evaluations' CPU work too (compiles, start-ups): a timed sample
            // spans the forward's launch path. Given back before the lock.
            let _priority = TimedPriority::raise(&self.workers, timing_cfg.nice);
            let mut phase = self.timing(eval, timed, references, staged)?;
            let profiled = self.profile(eval, &phase)?;
            let profiled_busy_ms = least_busy_ms(&profiled);
            self.recheck_witnesses(eval, &mut phase, profiled_busy_ms)?;
            self.check_timing(eval, &timing_cfg, &phase, profiled_busy_ms)?;
            phase
        };
        // The referee's comparison of the timed output times nothing, but runs before the lock
        // goes: a share asked for after it waited for the next evaluation's timed phase, queued
        // meanwhile (on an H100 at N 4 most of a correct candidate's 0.56 s median outside any
        // stage), where the comparison itself takes 0.02 s (0.1-0.3 s for 23_Softmax).
        self.timed_output(eval, phase.delivered_problem)
    }

    /// The repeat, the launch check and the precision measurement, after the trials; whether
    /// the candidate passed them. With `exclusive_checks` the evaluation has the device to
    /// itself from the repeat's start (the gate's exclusive claim, as in its timed phases; its
    /// wait counts in the repeat) to the measurement's end.
    fn checks(&mut self, eval: &mut Evaluation<'_>) -> Result<bool, Stop> {
        let checked = self.repeat(eval).and_then(|_exclusive| {
            // `_exclusive` (the claim, if any) lives until the measurement is done.
            if self.launch_check(eval) {
                self.precision(eval).map(|()| true)
            } else {
                Ok(false)
            }
        });
        eval.holds_device = false;
        checked
    }

    /// The `timed-inputs` stage: [`stage_timed_inputs`] on its own, before the timed phases.
    fn timed_inputs(&mut self, eval: &mut Evaluation<'_>, seed: u64) -> Result<String, Stop> {
        let limit = eval.cfg.limits.timing;
        let (referee, candidate) = (&mut self.workers.referee, &mut self.workers.candidate);
        eval.stage("timed-inputs", |_| {
            stage_timed_inputs(referee, candidate, "timed-inputs", seed, limit)
        })
    }

    /// The referee loads the task and builds the reference; returns the init inputs and, where
    /// other evaluations share the device, the trials' sizes from the task's shapes.
    fn reference(
        &mut self,
        eval: &mut Evaluation<'_>,
    ) -> Result<(String, Option<TrialSizes>), Stop> {
        let cfg = eval.cfg;
        let request = RefereeRequest::Init {
            task_path: self.task.clone(),
            profile: eval.size_profile.clone(),
            device: cfg.device.harness_name().to_string(),
            transport: cfg.transport_name().to_string(),
            shared_dir: self.workers.shared_dir.clone(),
            init_seed: eval.seeds.init,
            inputs_on_host: cfg.inputs_on_host,
            standing_shares: cfg.standing_shares,
            tolerance: cfg.tolerance.referee_tolerances(),
            // Only what keeps work apart on a shared device needs them (`keep_large_trials_apart`).
            size_trials: cfg.device_sharing == DeviceSharing::Evaluations
                && cfg.timed_phases.is_some(),
        };
        let referee = &mut self.workers.referee;
        eval.stage("reference", |eval| {
            let limit = cfg.limits.load + cfg.limits.trial;
            let reply: InitReply = referee_call(referee, &request, limit)?;
            let env = reply.env;
            eval.env.device_name = env.device_name;
            eval.env.torch = Some(env.torch);
            eval.env.triton = env.triton;
            eval.env.cuda = env.cuda;
            eval.env.driver = env.driver;
            eval.env.python = Some(env.python);
            eval.size_profile = reply.profile;
            Ok((reply.init_inputs, reply.sizes))
        })
    }

    /// The candidate process imports the file and builds `ModelNew`.
    fn load(&mut self, eval: &mut Evaluation<'_>, init_inputs: String) -> Result<(), Stop> {
        let cfg = eval.cfg;
        let request = CandidateRequest::Load {
            candidate_path: self.candidate_file.clone(),
            device: cfg.device.harness_name().to_string(),
            init_seed: eval.seeds.init,
            init_inputs,
            autotune_ms: [cfg.autotune.warmup_ms, cfg.autotune.rep_ms],
        };
        let candidate = &mut self.workers.candidate;
        eval.stage("load", |_| {
            candidate_call::<Done>(candidate, "load", &request, cfg.limits.load).map(drop)
        })
    }

    /// One trial: fresh inputs from the referee, one forward, and the referee's comparison
    /// while the candidate is frozen.
    fn trial(
        &mut self,
        eval: &mut Evaluation<'_>,
        stage: &str,
        seed: u64,
        keep: bool,
        against_kept: bool,
    ) -> Result<(RunReply, CheckReply), Stop> {
        let prepared = self.prepare_trial(eval, stage, seed)?;
        yield_trial_share(eval);
        let ran = self.run_trial(eval, stage, prepared, keep, against_kept)?;
        yield_trial_share(eval);
        let checked = self.check_trial(eval, stage, keep, against_kept)?;
        let launches = own_launches(&ran.launches);
        if launches.is_empty() {
            self.launch_free.push(stage.to_string());
        }
        merge_launches(&mut self.launches, launches);
        Ok((ran, checked))
    }

    /// [`Session::trial`] under one share of the device from its prepare to its check, where
    /// each of the three would take its own: every share asked for while a timed phase waits
    /// for the device waits for that phase too, and a later trial's three pieces of GPU work
    /// take about 0.05 s in all (an H100 at N 4: 0.62 s median of a correct candidate's trials
    /// waited for the lock). For trials whose candidate has compiled already: a share is let go
    /// while the candidate compiles only where each piece takes its own.
    fn trial_under_one_share(
        &mut self,
        eval: &mut Evaluation<'_>,
        stage: &str,
        seed: u64,
        keep: bool,
        against_kept: bool,
    ) -> Result<(RunReply, CheckReply), Stop> {
        if eval.trial_share.is_none() {
            eval.trial_share = untimed_gpu_work(eval);
        }
        let trial = self.trial(eval, stage, seed, keep, against_kept);
        eval.trial_share = None;
        trial
    }

    /// The referee draws the trial's inputs and shares them with poisoned output slots.
    fn prepare_trial(
        &mut self,
        eval: &mut Evaluation<'_>,
        trial: &str,
        seed: u64,
    ) -> Result<PrepareReply, Stop> {
        let prepare = RefereeRequest::Prepare {
            trial: trial.to_string(),
            seed,
        };
        let prepared: PrepareReply = {
            let _gpu = untimed_gpu_work(eval);
            referee_call(&mut self.workers.referee, &prepare, eval.cfg.limits.trial)?
        };
        // From here on, a large trial's work keeps apart from other large work on the device
        // (prepare already ran under an ordinary share unless an earlier evaluation of the
        // task told its size: `EvalConfig::large_tasks`).
        if trial_work_is_large(prepared.tensor_bytes, eval.cfg.large_work_bytes) {
            eval.large_device_work = true;
            if let Some(large) = &eval.cfg.large_tasks {
                large.insert(&eval.task_sha256, eval.cfg.size_profile.as_deref());
            }
        }
        Ok(prepared)
    }

    /// The candidate's forward on the prepared inputs. The kept trial's precision forwards run
    /// on the referee meanwhile (`keep`).
    fn run_trial(
        &mut self,
        eval: &mut Evaluation<'_>,
        trial: &str,
        prepared: PrepareReply,
        keep: bool,
        against_kept: bool,
    ) -> Result<RunReply, Stop> {
        let limit = eval.cfg.limits.trial;
        let (referee, candidate) = (&mut self.workers.referee, &mut self.workers.candidate);
        // The repeat (`against_kept`) runs with autograd on, unlike the trials: a candidate
        // that does its own work in only one grad mode shows there.
        let run = CandidateRequest::Run {
            stage: trial.to_string(),
            trial: trial.to_string(),
            payload: prepared.payload,
            grad: against_kept,
        };
        // Released while the candidate's process compiles (it says when), so that other
        // evaluations' timed phases wait for no compiler; back before its kernels run. The
        // trial's own share, where it holds one, is this run's meanwhile.
        let trial_share = eval.trial_share.take();
        let in_trial_share = trial_share.is_some();
        let mut gpu = trial_share.or_else(|| untimed_gpu_work(eval));
        // The kept trial's precision forwards run on the referee meanwhile, under this share,
        // and end before it goes: a timed phase never runs beside them. Nor does the
        // candidate's autotuner benchmark beside them: it compiles its configs first (the
        // `compiling` note, at which they are awaited) and runs them only once `compiled` is
        // answered, which this thread does after that wait.
        let mut ahead = keep
            && eval.cfg.precision_ahead
            && !eval.large_device_work
            && start_precision_ahead(referee, eval, trial, limit)?;
        let mut awaited = None;
        let mut on_note = |note: &str, message: &serde_json::Value| match note {
            NOTE_COMPILING => {
                if let Some(launchers) = &eval.cfg.launchers {
                    launchers.learn(message);
                }
                if std::mem::take(&mut ahead) {
                    awaited = Some(await_precision_ahead(referee, limit));
                }
                gpu = None;
                Ok(None)
            }
            NOTE_COMPILED => {
                if gpu.is_none() {
                    gpu = untimed_gpu_work(eval);
                }
                Ok(Some(resumed()))
            }
            NOTE_YIELD => {
                // Not while the precision forwards run under this share: they end first.
                if !ahead {
                    yield_share(eval, &mut gpu);
                }
                Ok(Some(resumed()))
            }
            other => Err(format!("unknown note {other:?}")),
        };
        let ran = candidate_call_noting(candidate, trial, &run, limit, &mut on_note);
        if in_trial_share {
            // A run that ended inside a compile (its `compiled` never came) let it go.
            eval.trial_share = gpu.or_else(|| untimed_gpu_work(eval));
        }
        if ahead {
            awaited = Some(await_precision_ahead(referee, limit));
        }
        // The referee's fault is the judge's, whatever the candidate did meanwhile.
        if let Some(awaited) = awaited {
            self.precision_ahead_s = awaited?;
        }
        ran
    }

    /// The referee compares the outputs while the candidate's processes are frozen.
    fn check_trial(
        &mut self,
        eval: &mut Evaluation<'_>,
        trial: &str,
        keep: bool,
        against_kept: bool,
    ) -> Result<CheckReply, Stop> {
        let _gpu = untimed_gpu_work(eval);
        let check = RefereeRequest::Check {
            trial: trial.to_string(),
            keep,
            against_kept,
            // Trial 0 (the kept one) is the one whose precision is measured.
            precision: keep,
        };
        let (referee, candidate) = (&mut self.workers.referee, &mut self.workers.candidate);
        candidate.freeze(true);
        let checked = referee_call(referee, &check, eval.cfg.limits.trial);
        candidate.freeze(false);
        checked
    }

    /// The correctness trials, each on fresh inputs; the first is kept for the repeat.
    fn trials(&mut self, eval: &mut Evaluation<'_>) -> Result<(), Stop> {
        for (index, seed) in eval.seeds.trials.clone().into_iter().enumerate() {
            let name = format!("trial_{index}");
            let passed = eval.stage(&name, |eval| {
                let (ran, checked) = if index == 0 {
                    self.trial(eval, &name, seed, true, false)?
                } else {
                    self.trial_under_one_share(eval, &name, seed, false, false)?
                };
                Ok(record_trial(eval, seed, &ran, &checked))
            })?;
            if !passed {
                return Err(incorrect(eval, name));
            }
            if index == 0 {
                self.warm_profiler(eval)?;
            }
        }
        Ok(())
    }

    /// Trial 0's inputs once more: a candidate that caches by call count, or whose results
    /// depend on more than its inputs, shows here. Returns the device's exclusive claim where
    /// `exclusive_checks` took one (see [`Session::checks`]).
    fn repeat(
        &mut self,
        eval: &mut Evaluation<'_>,
    ) -> Result<Option<super::TimedPhaseGuard>, Stop> {
        let seed = eval.seeds.trials[0];
        let mut held = None;
        let passed = eval.stage("repeat", |eval| {
            held = eval
                .cfg
                .timed_phases
                .as_ref()
                .filter(|_| eval.cfg.exclusive_checks)
                .map(|gate| gate.enter());
            eval.holds_device = held.is_some();
            let (ran, checked) = self.trial_under_one_share(eval, "repeat", seed, false, true)?;
            if !checked.repeat_problems.is_empty() {
                eval.findings.push(Finding::new(
                    "nondeterministic",
                    Severity::Flag,
                    format!(
                        "two runs on the same inputs disagree beyond the tolerance: {}",
                        checked.repeat_problems.join("; ")
                    ),
                ));
            }
            let passed = record_trial(eval, seed, &ran, &checked);
            if let Some(last) = eval.trials.last_mut() {
                last.repeat_of = Some(0);
            }
            Ok(passed)
        })?;
        if passed {
            Ok(held)
        } else {
            Err(incorrect(eval, "repeat".into()))
        }
    }

    /// Every run must have launched the file's own kernels; returns whether they all did.
    fn launch_check(&mut self, eval: &mut Evaluation<'_>) -> bool {
        eval.launches = std::mem::take(&mut self.launches);
        if self.launch_free.is_empty() {
            return true;
        }
        eval.findings.push(Finding::new(
            "no-triton-launch",
            Severity::Reject,
            format!(
                "forward returned correct outputs but launched none of the file's own \
                 @triton.jit kernels in {} (the repeat runs with autograd on); the work must be \
                 done by your Triton kernels",
                self.launch_free.join(", ")
            ),
        ));
        false
    }

    /// The candidate's precision against a float64 copy of the reference, on trial 0 (its
    /// inputs, expected and actual outputs, kept by the referee), once every trial passed.
    /// Whatever stops the measurement leaves it unmeasured; only a referee that stops answering
    /// is the judge's failure.
    fn precision(&mut self, eval: &mut Evaluation<'_>) -> Result<(), Stop> {
        let limit = eval.cfg.limits.trial;
        // The referee gives up (unmeasured) when the float64 forwards would exceed the budget;
        // the deadline leaves room for a forward that started just inside it.
        let request = RefereeRequest::MeasurePrecision {
            budget_s: precision_budget_s(limit),
        };
        let referee = &mut self.workers.referee;
        let (measured, attempts) = eval.stage("precision", |eval| {
            measure_precision_pausing(referee, &request, limit * 2, eval, false)
        })?;
        if attempts > 1 && !measured.out_of_memory {
            eval.add_once(Finding::new(
                "precision-retried",
                Severity::Info,
                format!(
                    "the precision measurement ran out of device memory beside other evaluations; \
                     attempt {attempts} after a pause found room"
                ),
            ));
        }
        if let Some(message) = precision::beyond_rounding(&measured) {
            return Err(Stop::Candidate(Failure {
                class: FailureClass::Incorrect,
                stage: "precision".into(),
                message,
            }));
        }
        if let Some(error) =
            memory_shortage_not_the_tasks(&measured, attempts, eval.cfg.device_sharing)
        {
            return Err(match error {
                InfraError::DeviceHeldElsewhere {
                    held_gib, detail, ..
                } => self.precision_with_candidate_stopped(eval, &request, held_gib, detail),
                error => Stop::Infra(error),
            });
        }
        let mut measured = precision::from_reply(measured, 0);
        measured.forwards_ahead_s = self.precision_ahead_s;
        if let Some(finding) = precision::downgrade_finding(&measured) {
            eval.add_once(finding);
        }
        eval.precision = Some(measured);
        Ok(())
    }

    /// The measurement once more, with the candidate's process killed: a shortage while
    /// gigabytes were held outside the referee with nothing else of the judge's on the device
    /// (`DeviceHeldElsewhere`: `held_gib`, `detail`) is most likely the candidate's doing, a hoard after its
    /// last trial that hides an output only this measurement refuses
    /// (`tests/fixtures/gpu/precision_hoard.py`), and it ended `infra_error` every time the
    /// evaluation was delivered. Measured now, an output beyond rounding is the candidate's
    /// failure as anywhere else; within rounding, or unmeasured again, the evaluation stays the
    /// judge's fault: without its process the candidate cannot be timed.
    fn precision_with_candidate_stopped(
        &mut self,
        eval: &mut Evaluation<'_>,
        request: &RefereeRequest,
        held_gib: f64,
        detail: String,
    ) -> Stop {
        // Killed, not reaped: the teardown reaps it after the caller's abort is detached, which
        // may signal the group until then (`Abort`); the driver takes its memory back at exit.
        self.workers.candidate.kill_group();
        eval.findings.push(Finding::new(
            crate::error::MEMORY_HELD_AFTER_FORWARD,
            Severity::Flag,
            format!(
                "after the candidate's last forward returned, {held_gib:.2} GiB of device memory \
                 were held outside the judge's referee and its precision measurement found no \
                 room; the judge stopped the candidate's process and measured again"
            ),
        ));
        let limit = eval.cfg.limits.trial;
        let referee = &mut self.workers.referee;
        let again = eval.stage("precision-candidate-stopped", |eval| {
            measure_precision_pausing(referee, request, limit * 2, eval, true)
        });
        let measured = match again {
            Ok((measured, _attempts)) => measured,
            Err(stop) => return stop,
        };
        if let Some(message) = precision::beyond_rounding(&measured) {
            return Stop::Candidate(Failure {
                class: FailureClass::Incorrect,
                stage: "precision".into(),
                message: format!(
                    "{message} (measured once the judge had stopped your process: while it \
                     lived, {held_gib:.2} GiB of device memory were held outside the judge's \
                     referee after its last forward returned, which left the measurement no room)"
                ),
            });
        }
        let outcome = match &measured.unmeasured {
            None => "within rounding".to_string(),
            Some(why) => format!("unmeasured again ({why})"),
        };
        Stop::Infra(InfraError::DeviceHeldElsewhere {
            stage: "precision",
            held_gib,
            detail: format!(
                "{detail}; measured again with the candidate's process stopped: {outcome}, but \
                 without that process the candidate cannot be timed"
            ),
        })
    }

    /// Both sides time the same loop on fresh inputs (the reference a second time at the
    /// candidate's measured precision class, when it is not the reference's own); the outside
    /// witness is measured last.
    ///
    /// `staged`: the timed inputs' payload where [`Session::timed_inputs`] already
    /// staged them; otherwise this does, after the reference timings.
    fn timing(
        &mut self,
        eval: &mut Evaluation<'_>,
        timed: TimedLoop,
        references: ReferenceTimings,
        staged: Option<String>,
    ) -> Result<TimedPhase, Stop> {
        let limit = eval.cfg.limits.timing;
        let (referee, candidate) = (&mut self.workers.referee, &mut self.workers.candidate);
        let cache = eval.cfg.reference_timings.clone();
        eval.stage("timing", |_| {
            let cache = cache.as_deref();
            let reference = time_reference(referee, cache, references.plain, timed, limit)?;
            // The same loop at the candidate's measured class (same seed, warmup, iterations
            // and flush).
            let matched = match references.matched {
                Some((class, need)) => {
                    let reply = time_reference(referee, cache, need, timed, limit)?;
                    Some((class, reply.samples_ms))
                }
                None => None,
            };
            let payload = match staged {
                Some(payload) => payload,
                None => stage_timed_inputs(referee, candidate, "timing", timed.seed, limit)?,
            };
            let time = CandidateRequest::Time {
                stage: "timing".into(),
                timed,
                // One timed iteration, unknown to the candidate until now, is checked.
                check_iteration: fresh_seed() % u64::from(timed.iters.max(1)),
            };
            let phase = Instant::now();
            let claimed: TimeReply = candidate_call(candidate, "timing", &time, limit)?;
            let phase_wall_s = phase.elapsed().as_secs_f64();
            let deliver = CandidateRequest::TimeDeliver {
                stage: "timing".into(),
            };
            let delivered: TimeDeliverReply = candidate_call(candidate, "timing", &deliver, limit)?;
            let iteration_ms = phase_wall_s * 1e3 / f64::from(timed.iters + timed.warmup);
            let outside = outside_forward(candidate, limit, iteration_ms, false)?;
            let synced = outside_forward(candidate, limit, iteration_ms, true)?;
            Ok(TimedPhase {
                reference,
                matched,
                claimed_ms: claimed.samples_ms,
                phase_wall_s,
                outside,
                synced,
                iteration_ms,
                payload,
                delivered_problem: delivered.problem,
            })
        })
    }

    /// A candidate process that will be timed and did not start the profiler ahead begins it now,
    /// on a thread of its own, once its first trial passed: it will likely be profiled, its
    /// later stages (the other trials, repeat, precision, generalize) overlap the 4-5
    /// CPU-seconds (measured on an H200, `scripts/probe/candidate_fork_start.py`), and a
    /// candidate that fails to load or in its first trial, most failures, never spends them.
    fn warm_profiler(&mut self, eval: &mut Evaluation<'_>) -> Result<(), Stop> {
        if !eval.cfg.times() || self.workers.profiler_started_ahead() {
            return Ok(());
        }
        let stage = "profiler-warm-up";
        let request = CandidateRequest::WarmProfiler {
            stage: stage.into(),
        };
        self.profiler_request(eval, stage, &request)
    }

    /// The profiler's first start in a process takes seconds (CUPTI; 3.7-4.4 s on an H200) and
    /// would otherwise fall in the profile stage, while every other evaluation waits for the
    /// exclusive GPU lock; a process started ahead already paid it (about 1 ms here), one whose
    /// first trial passed began it then ([`Session::warm_profiler`]) and this waits for the rest.
    fn start_profiler(&mut self, eval: &mut Evaluation<'_>) -> Result<(), Stop> {
        let stage = "profiler-start";
        let request = CandidateRequest::StartProfiler {
            stage: stage.into(),
        };
        self.profiler_request(eval, stage, &request)
    }

    /// One of the profiler's start-up requests, as a stage of its own within the timing limit.
    fn profiler_request(
        &mut self,
        eval: &mut Evaluation<'_>,
        stage: &str,
        request: &CandidateRequest,
    ) -> Result<(), Stop> {
        let limit = eval.cfg.limits.timing;
        let candidate = &mut self.workers.candidate;
        eval.stage(stage, |_| {
            candidate_call::<Done>(candidate, stage, request, limit).map(drop)
        })
    }

    /// Profiled forwards on the timed inputs: coverage, and the busy-time witness.
    fn profile(
        &mut self,
        eval: &mut Evaluation<'_>,
        phase: &TimedPhase,
    ) -> Result<ProfileReply, Stop> {
        let limit = eval.cfg.limits.timing;
        let request = CandidateRequest::Profile {
            stage: "profile".into(),
            payload: phase.payload.clone(),
            forwards: PROFILED_FORWARDS,
        };
        let candidate = &mut self.workers.candidate;
        let profiled: ProfileReply = eval.stage("profile", |_| {
            candidate_call(candidate, "profile", &request, limit)
        })?;
        let profile = build_profile(&profiled);
        let coverage = if profile.total_gpu_us > 0.0 {
            profile.candidate_triton_us / profile.total_gpu_us
        } else {
            0.0
        };
        if coverage < LOW_COVERAGE {
            eval.findings.push(Finding::new(
                "low-coverage",
                Severity::Flag,
                format!(
                    "only {:.1}% of the forward's GPU time is spent in your own Triton kernels; \
                     move the remaining work into them",
                    coverage * 100.0
                ),
            ));
        }
        eval.profile = Some(profile);
        Ok(profiled)
    }

    /// Where the claimed median falls below a witness timed from outside, that witness is
    /// measured again (at most [`WITNESS_RECHECKS`] more times, still under the exclusive lock)
    /// and keeps its least: host noise only ever adds to it (every batch of one measurement can
    /// come out high), so another measurement can only bring it nearer the cost it bounds, and
    /// a claim that is really below that cost stays below it. The `timing-rechecked` finding
    /// gives the figures either way.
    fn recheck_witnesses(
        &mut self,
        eval: &mut Evaluation<'_>,
        phase: &mut TimedPhase,
        profiled_busy_ms: Option<f64>,
    ) -> Result<(), Stop> {
        let device_name = eval.env.device_name.clone().unwrap_or_default();
        // Only where every contradiction is an outside witness's: the busy time is GPU time,
        // which no measurement of these changes.
        let outside_contradicted = |phase: &TimedPhase| {
            let found = contradicted_witnesses(&phase.evidence(profiled_busy_ms, &device_name));
            !found.is_empty() && found.iter().all(|c| c.witness.outside())
        };
        if !outside_contradicted(phase) {
            return Ok(());
        }
        let first = (phase.outside, phase.synced);
        let claimed_ms = claimed_median_ms(&phase.evidence(profiled_busy_ms, &device_name));
        let limit = eval.cfg.limits.timing;
        let candidate = &mut self.workers.candidate;
        let rounds = eval.stage("timing-recheck", |_| {
            let mut rounds = 0;
            while rounds < WITNESS_RECHECKS && outside_contradicted(phase) {
                rounds += 1;
                let outside = outside_forward(candidate, limit, phase.iteration_ms, false)?;
                let synced = outside_forward(candidate, limit, phase.iteration_ms, true)?;
                phase.outside = least_by_ms(phase.outside, outside);
                phase.synced = least_by_ms(phase.synced, synced);
            }
            Ok(rounds)
        })?;
        let ms = |witness: Option<(f64, u32)>| {
            witness.map_or("none".to_string(), |(ms, _)| format!("{ms:.4} ms"))
        };
        eval.findings.push(Finding::new(
            "timing-rechecked",
            Severity::Info,
            format!(
                "the claimed median ({:.4} ms) was below a bound of the witnesses timed from \
                 outside (back to back {}, synchronized {}), which were measured again {rounds} \
                 time(s) and keep their least: back to back {}, synchronized {}",
                claimed_ms,
                ms(first.0),
                ms(first.1),
                ms(phase.outside),
                ms(phase.synced),
            ),
        ));
        Ok(())
    }

    /// The candidate's claims against the witnesses (`timing.rs`), and the timing record.
    fn check_timing(
        &mut self,
        eval: &mut Evaluation<'_>,
        timing_cfg: &TimingConfig,
        phase: &TimedPhase,
        profiled_busy_ms: Option<f64>,
    ) -> Result<(), Stop> {
        let device_name = eval.env.device_name.as_deref().unwrap_or("");
        let findings = timing_findings(&phase.evidence(profiled_busy_ms, device_name));
        eval.findings.extend(findings);
        let (Some(reference), Some(candidate)) = (
            Stats::from_samples(&phase.reference.samples_ms),
            Stats::from_samples(&phase.claimed_ms),
        ) else {
            return Err(Stop::Infra(InfraError::Protocol {
                who: "harness",
                detail: "a timing reply holds no samples".into(),
            }));
        };
        eval.timing = Some(Timing {
            reference,
            candidate,
            warmup: timing_cfg.warmup,
            l2_flush_bytes: timing_cfg.flush_bytes,
            candidate_phase_wall_s: phase.phase_wall_s,
            profiled_busy_ms,
            outside_forward_ms: phase.outside.map(|(ms, _)| ms),
            outside_batch_forwards: phase.outside.map(|(_, count)| count),
            synced_forward_ms: phase.synced.map(|(ms, _)| ms),
            reference_matched: phase
                .matched
                .as_ref()
                .and_then(|(_, samples)| Stats::from_samples(samples)),
            reference_matched_class: phase.matched.as_ref().map(|(class, _)| *class),
            autotune: Some(eval.cfg.autotune),
        });
        Ok(())
    }

    /// Last, since the profile still maps the timing buffers: was the timed output right?
    fn timed_output(
        &mut self,
        eval: &mut Evaluation<'_>,
        delivered_problem: Option<String>,
    ) -> Result<(), Stop> {
        let limit = eval.cfg.limits.timing;
        let (referee, candidate) = (&mut self.workers.referee, &mut self.workers.candidate);
        let checked: CheckReply = eval.stage("timed-output", |_| {
            let check = RefereeRequest::Check {
                trial: "timing".into(),
                keep: false,
                against_kept: false,
                precision: false,
            };
            candidate.freeze(true);
            let checked = referee_call(referee, &check, limit);
            candidate.freeze(false);
            checked
        })?;
        let problems: Vec<String> = delivered_problem
            .into_iter()
            .chain(checked.problems)
            .collect();
        if !problems.is_empty() {
            eval.findings.push(Finding::new(
                "timed-output-mismatch",
                Severity::Reject,
                format!(
                    "the output of a timed iteration is wrong although the correctness trials \
                     passed (cached, replayed or skipped work while being timed): {}",
                    problems.join("; ")
                ),
            ));
        }
        Ok(())
    }
}

/// The outside witness of one forward's cost (ms) and the batch size it used: batches of
/// back-to-back forwards on the timed inputs (with `synchronize_each`, each followed by a
/// device synchronize), each timed here around its request, less the cost of an empty
/// request; the least of several, since host noise only adds time.
fn outside_forward(
    candidate: &mut crate::process::HarnessProcess,
    limit: std::time::Duration,
    iteration_ms: f64,
    synchronize_each: bool,
) -> Result<Option<(f64, u32)>, Stop> {
    let target_ms = if synchronize_each {
        SYNCED_BATCH_TARGET_MS
    } else {
        OUTSIDE_BATCH_TARGET_MS
    };
    let count = batch_count(iteration_ms, target_ms);
    let mut least_ms = |count: u32| -> Result<f64, Stop> {
        let mut least = f64::INFINITY;
        for _ in 0..OUTSIDE_BATCHES {
            let request = CandidateRequest::TimeBatch {
                stage: "timing".into(),
                count,
                synchronize_each,
            };
            let started = Instant::now();
            candidate_call::<Done>(candidate, "timing", &request, limit)?;
            least = least.min(started.elapsed().as_secs_f64() * 1e3);
        }
        Ok(least)
    };
    let empty_ms = least_ms(0)?;
    let batch_ms = least_ms(count)?;
    let per_forward = (batch_ms - empty_ms).max(0.0) / f64::from(count);
    Ok(per_forward.is_finite().then_some((per_forward, count)))
}

/// The timed loop of this evaluation: its own seed, the configured warm-up, iterations and flush.
fn timed_loop(eval: &Evaluation<'_>, timing_cfg: &TimingConfig) -> TimedLoop {
    TimedLoop {
        seed: eval.seeds.timing,
        warmup: timing_cfg.warmup,
        iters: timing_cfg.iters,
        flush_bytes: timing_cfg.flush_bytes,
    }
}

/// One reference timing the timing stage needs: its cache key, and what the cache answered
/// (asked once: a lookup counts towards the entry's re-measurement and the cache's hit rate).
struct ReferenceNeed {
    key: ReferenceKey,
    cached: Option<ReferenceTiming>,
}

/// The reference timings the timing stage needs: the reference as it is, and at the candidate's
/// measured precision class where that differs.
struct ReferenceTimings {
    plain: ReferenceNeed,
    matched: Option<(PrecisionClass, ReferenceNeed)>,
}

impl ReferenceTimings {
    fn look_up(eval: &Evaluation<'_>, timed: &TimedLoop) -> ReferenceTimings {
        let cache = eval.cfg.reference_timings.as_deref();
        let need = |precision| {
            let key = reference_key(eval, timed, precision);
            let cached = cache.and_then(|c| c.lookup(&key));
            ReferenceNeed { key, cached }
        };
        let matched = eval.precision.as_ref().and_then(precision::matched_class);
        ReferenceTimings {
            plain: need(None),
            matched: matched.map(|class| (class, need(Some(class)))),
        }
    }

    /// Whether the timing stage measures none of them.
    fn all_cached(&self) -> bool {
        self.plain.cached.is_some()
            && self
                .matched
                .as_ref()
                .is_none_or(|(_, need)| need.cached.is_some())
    }
}

/// The timed inputs, shared like a trial's (their expected outputs kept for the timed-output
/// check) and mapped by the candidate; returns their payload. Mapping (and, with `shm`,
/// staging) is a request of its own, so the measured window holds the timed loop alone, like
/// the referee's.
fn stage_timed_inputs(
    referee: &mut crate::process::HarnessProcess,
    candidate: &mut crate::process::HarnessProcess,
    stage: &str,
    seed: u64,
    limit: std::time::Duration,
) -> Result<String, Stop> {
    let prepare = RefereeRequest::Prepare {
        trial: "timing".into(),
        seed,
    };
    let prepared: PrepareReply = referee_call(referee, &prepare, limit)?;
    let open = CandidateRequest::TimeOpen {
        stage: stage.into(),
        payload: prepared.payload.clone(),
    };
    candidate_call::<Done>(candidate, stage, &open, limit)?;
    Ok(prepared.payload)
}

/// What a reference timing of this evaluation depends on (its cache key).
fn reference_key(
    eval: &Evaluation<'_>,
    timed: &TimedLoop,
    precision: Option<PrecisionClass>,
) -> ReferenceKey {
    let env = &eval.env;
    let harness = eval
        .runtime
        .harness_root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let versions = [
        Some(env.crucible.as_str()),
        Some(harness.as_str()),
        env.torch.as_deref(),
        env.triton.as_deref(),
        env.cuda.as_deref(),
        env.driver.as_deref(),
        env.python.as_deref(),
    ]
    .map(|part| part.unwrap_or("-"))
    .join(" ");
    ReferenceKey {
        task_sha256: eval.task_sha256.clone(),
        size_profile: eval.size_profile.clone(),
        device_name: env.device_name.clone().unwrap_or_default(),
        versions,
        warmup: timed.warmup,
        iters: timed.iters,
        flush_bytes: timed.flush_bytes,
        precision,
    }
}

/// The reference's timing: the cache's answer when it had a current one, else timed by the
/// referee (on this evaluation's timed inputs) and stored under its key.
fn time_reference(
    referee: &mut crate::process::HarnessProcess,
    cache: Option<&dyn ReferenceTimingCache>,
    need: ReferenceNeed,
    timed: TimedLoop,
    limit: std::time::Duration,
) -> Result<TimeReferenceReply, Stop> {
    let ReferenceNeed { key, cached } = need;
    if let Some(hit) = cached {
        return Ok(TimeReferenceReply {
            samples_ms: hit.samples_ms,
            io_bytes: hit.io_bytes,
        });
    }
    let request = RefereeRequest::TimeReference {
        timed,
        precision: key.precision.map(|class| class.as_str().to_string()),
    };
    let reply: TimeReferenceReply = referee_call(referee, &request, limit)?;
    if let Some(cache) = cache {
        cache.store(
            key,
            ReferenceTiming {
                samples_ms: reply.samples_ms.clone(),
                io_bytes: reply.io_bytes,
            },
        );
    }
    Ok(reply)
}

/// The failure for the trial just recorded.
fn incorrect(eval: &Evaluation<'_>, stage: String) -> Stop {
    let message = eval
        .trials
        .last()
        .and_then(|t| t.message.clone())
        .unwrap_or_default();
    Stop::Candidate(Failure {
        class: FailureClass::Incorrect,
        stage,
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default size of large work.
    fn large() -> u64 {
        super::super::EvalConfig::new(crate::Device::Cpu).large_work_bytes
    }

    /// A measurement that ran out of memory, with `held` bytes outside the referee's allocator.
    fn short_of_memory(held: Option<u64>) -> MeasurePrecisionReply {
        MeasurePrecisionReply {
            outputs: None,
            unmeasured: Some("the float64 reference ran out of memory".into()),
            errors: Vec::new(),
            out_of_memory: true,
            held_elsewhere_bytes: held,
        }
    }

    #[test]
    fn a_precision_shortage_is_the_tasks_only_with_nothing_else_holding_the_device() {
        let own = |reply: &MeasurePrecisionReply, sharing| {
            memory_shortage_not_the_tasks(reply, 1, sharing).map(|e| e.to_string())
        };
        let little_held = short_of_memory(Some(HELD_ELSEWHERE_ALLOWANCE));
        // Beside other evaluations or the pool's waiting pairs: ours, whatever the referee saw.
        for sharing in [DeviceSharing::Evaluations, DeviceSharing::WaitingProcesses] {
            let message = own(&little_held, sharing).expect("the judge's fault");
            assert!(message.contains(sharing.who()), "{message}");
        }
        // Nothing of ours beside it: the task's size, unless a candidate held gigabytes.
        assert_eq!(own(&little_held, DeviceSharing::Nobody), None);
        assert_eq!(own(&short_of_memory(None), DeviceSharing::Nobody), None);
        let hoarded = short_of_memory(Some(HELD_ELSEWHERE_ALLOWANCE + (1 << 30)));
        let message = own(&hoarded, DeviceSharing::Nobody).expect("the judge's fault");
        assert!(message.contains("5.00 GiB"), "{message}");
        // Measured, or unmeasured for another reason: nothing to say.
        let measured = MeasurePrecisionReply {
            out_of_memory: false,
            ..hoarded
        };
        assert_eq!(own(&measured, DeviceSharing::Evaluations), None);
    }

    #[test]
    fn only_gigabyte_outputs_make_the_precision_measurement_large() {
        // KernelBench 23_Softmax: 4096 x 393216 float32 outputs (6.4 GB), about 60 GB measured.
        assert!(precision_work_is_large(4096 * 393_216, large()));
        // A 64 MB output, and the builtin tasks' at full size, measure beside each other.
        assert!(!precision_work_is_large(16 << 20, large()));
        assert!(!precision_work_is_large(0, large()));
        assert!(precision_work_is_large(u64::MAX, large()));
    }

    #[test]
    fn a_softmax_trial_at_kernelbench_size_is_large_work() {
        // 23_Softmax: a 4096 x 393216 float32 input and output, each with its copy or slot.
        let softmax_trial = 4 * 4096 * 393_216 * 4;
        assert!(trial_work_is_large(softmax_trial, large()));
        // 8_Matmul's irregular shapes: three matrices of a few hundred megabytes at most.
        let matmul_trial = 2 * (8205 * 2949 + 2949 * 5921) * 4 + 2 * 8205 * 5921 * 4;
        assert!(!trial_work_is_large(matmul_trial, large()));
        assert!(!trial_work_is_large(0, large()));
    }

    fn need(cached: bool, precision: Option<PrecisionClass>) -> ReferenceNeed {
        ReferenceNeed {
            key: ReferenceKey {
                task_sha256: "t".into(),
                size_profile: "full".into(),
                device_name: "NVIDIA H200".into(),
                versions: "v".into(),
                warmup: 3,
                iters: 30,
                flush_bytes: 1 << 28,
                precision,
            },
            cached: cached.then(|| ReferenceTiming {
                samples_ms: vec![1.0],
                io_bytes: 8.0,
            }),
        }
    }

    /// The timed inputs are staged before the lock only where the timing stage measures no
    /// reference timing: every one it needs came from the cache.
    #[test]
    fn staging_early_needs_every_reference_timing_cached() {
        let timings = |plain, matched: Option<bool>| ReferenceTimings {
            plain: need(plain, None),
            matched: matched
                .map(|hit| (PrecisionClass::Tf32, need(hit, Some(PrecisionClass::Tf32)))),
        };
        assert!(timings(true, None).all_cached());
        assert!(timings(true, Some(true)).all_cached());
        assert!(!timings(false, None).all_cached());
        assert!(!timings(true, Some(false)).all_cached());
        assert!(!timings(false, Some(true)).all_cached());
    }

    /// A witness measured again keeps its least; a measurement that failed keeps the other.
    #[test]
    fn a_witness_measured_again_keeps_its_least() {
        assert_eq!(
            least_by_ms(Some((0.36, 83)), Some((0.31, 83))),
            Some((0.31, 83))
        );
        assert_eq!(
            least_by_ms(Some((0.31, 83)), Some((0.36, 83))),
            Some((0.31, 83))
        );
        assert_eq!(least_by_ms(None, Some((0.36, 83))), Some((0.36, 83)));
        assert_eq!(least_by_ms(Some((0.36, 83)), None), Some((0.36, 83)));
        assert_eq!(least_by_ms(None, None), None);
    }
}
