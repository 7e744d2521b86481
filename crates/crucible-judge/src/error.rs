//! The judge's own failures. None of them is ever charged to a candidate: an evaluation that
//! stops on one ends `infra_error`, with this error's text as the diagnostic.

use crate::device::DeviceError;
use crate::process::ChannelError;

#[derive(Debug, thiserror::Error)]
pub enum InfraError {
    /// Scratch directories, the candidate file, spawning a process.
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// A harness process said it cannot start (no device, a broken install).
    #[error("{who} could not start: {reason}")]
    CannotStart { who: &'static str, reason: String },
    /// A harness process died or hung before it was ready.
    #[error("{who} did not start: {channel}\n{log}")]
    DidNotStart {
        who: &'static str,
        channel: ChannelError,
        log: String,
    },
    /// The referee answered a request with an error (a broken task, or a fault of ours).
    #[error("referee failed: {error}\n{traceback}")]
    Referee { error: String, traceback: String },
    /// The referee died, hung or wrote something that is not a reply.
    #[error("referee {channel}\n{log}")]
    RefereeChannel { channel: ChannelError, log: String },
    /// Reading or writing the candidate's channel failed on our side.
    #[error("candidate channel I/O: {0}")]
    CandidateChannel(std::io::Error),
    /// The caller could not set the evaluation up (bad options, no scratch space).
    #[error("{0}")]
    Setup(String),
    /// A trusted harness process sent a reply that does not fit the protocol.
    #[error("the {who} broke the harness protocol: {detail}")]
    Protocol { who: &'static str, detail: String },
    /// The referee ran out of device memory while other processes of the caller's shared the
    /// device (`EvalConfig::device_sharing`): their allocations, not the task or the candidate,
    /// may be why, so the measurement is retried alone rather than left undone.
    #[error(
        "the referee ran out of device memory in `{stage}` while {who} shared the device: {detail}"
    )]
    SharedDeviceOutOfMemory {
        stage: &'static str,
        who: &'static str,
        detail: String,
    },
    /// The referee ran out of device memory with nothing else of the caller's on the device,
    /// while far more than the processes' own CUDA contexts was held outside its allocator: by
    /// the candidate's process after its forward returned, or by a process not the judge's.
    /// Left unmeasured, the check would let a candidate that hoards memory through it.
    #[error(
        "the referee ran out of device memory in `{stage}` while {held_gib:.2} GiB of the device \
         were held outside it (by the candidate's process after its forward returned, or by a \
         process not the judge's): {detail}"
    )]
    // `InfraError::is_held_elsewhere` recognises this message in a result.
    DeviceHeldElsewhere {
        stage: &'static str,
        held_gib: f64,
        detail: String,
    },
    /// The caller stopped the evaluation (its task was cancelled) and killed its processes.
    #[error("the evaluation was stopped by its caller (the task was cancelled)")]
    Aborted,
}

impl InfraError {
    /// Whether a result's `infra_error` message says the judge's side ran out of device memory:
    /// torch's `OutOfMemoryError`, cuBLAS failing to allocate, or the judge's own shortages
    /// ([`InfraError::SharedDeviceOutOfMemory`], [`InfraError::DeviceHeldElsewhere`]).
    pub fn is_out_of_memory(message: &str) -> bool {
        let message = message.to_ascii_lowercase();
        message.contains("out of memory")
            || message.contains("out of device memory")
            || message.contains("alloc_failed")
    }

    /// Whether a result's failure message is [`InfraError::DeviceHeldElsewhere`]'s: the memory
    /// was held by something the caller cannot clear away.
    pub fn is_held_elsewhere(message: &str) -> bool {
        message.contains("of the device were held outside it")
    }

    pub(crate) fn io(what: &'static str) -> impl Fn(std::io::Error) -> InfraError {
        move |source| InfraError::Io { what, source }
    }
}

/// Whether sharing the device with other evaluations may have caused `result`'s failure, so
/// that a run alone decides it: the candidate ran out of memory, or the judge's own side failed
/// (an `infra_error`; measured on an H200: six evaluations of a task with 6 GiB tensors at
/// once, and a referee ran out of memory).
pub fn shared_device_fault(result: &crucible_result::EvalResult) -> bool {
    use crucible_result::FailureClass;
    result.failure.as_ref().is_some_and(|f| {
        matches!(
            f.class,
            FailureClass::OutOfMemory | FailureClass::InfraError
        )
    })
}

/// Whether `result` ended in an `infra_error` saying the judge's side ran out of device memory
/// ([`InfraError::is_out_of_memory`]), which is never the candidate's doing.
pub fn judge_ran_out_of_memory(result: &crucible_result::EvalResult) -> bool {
    infra_error_message(result).is_some_and(InfraError::is_out_of_memory)
}

/// The finding of an evaluation that ran beside no other evaluation of a task as large: the
/// judge's, where the task's shapes said two would not fit the device, or the service engine's,
/// where an earlier evaluation of the task ran out of memory beside others.
pub const RAN_ONE_LARGE_AT_A_TIME: &str = "ran-one-large-at-a-time";

/// The finding of an evaluation whose precision measurement found no room while gigabytes were
/// held outside the referee with nothing else of the judge's on the device, and which the judge
/// measured again once it had stopped the candidate's process.
pub const MEMORY_HELD_AFTER_FORWARD: &str = "memory-held-after-forward";

/// Whether `result` ended in [`InfraError::DeviceHeldElsewhere`], or was measured again once the
/// candidate's process was stopped for it ([`MEMORY_HELD_AFTER_FORWARD`]): the judge found no
/// memory while something clearing the device of the judge's processes does not remove held it.
pub fn memory_held_elsewhere(result: &crucible_result::EvalResult) -> bool {
    infra_error_message(result).is_some_and(InfraError::is_held_elsewhere)
        || result
            .findings
            .iter()
            .any(|f| f.code == MEMORY_HELD_AFTER_FORWARD)
}

fn infra_error_message(result: &crucible_result::EvalResult) -> Option<&str> {
    result
        .failure
        .as_ref()
        .filter(|f| f.class == crucible_result::FailureClass::InfraError)
        .map(|f| f.message.as_str())
}

#[cfg(test)]
mod tests {
    use super::{InfraError, MEMORY_HELD_AFTER_FORWARD, memory_held_elsewhere};
    use crucible_result::{EvalResult, Failure, FailureClass, Finding, Severity, Verdict};

    /// A real result document (from the dashboard's fixtures) ended by `failure`.
    fn failed(failure: Failure) -> EvalResult {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../crucible-dashboard/tests/fixtures/gpu_correct.json"
        );
        let text = std::fs::read_to_string(path).expect("read the fixture result");
        let mut result: EvalResult = serde_json::from_str(&text).expect("a result document");
        result.verdict = failure.class.verdict();
        result.correct = false;
        result.failure = Some(failure);
        result
    }

    /// The engine keeps a task from clearing the pool for every later evaluation where memory
    /// proved held by something clearing does not remove: the judge's `infra_error` saying so,
    /// or a verdict measured once the candidate's process was killed for it.
    #[test]
    fn memory_held_elsewhere_is_the_infra_error_or_the_finding_of_a_measurement_made_again() {
        let held = InfraError::DeviceHeldElsewhere {
            stage: "precision",
            held_gib: 71.68,
            detail: "the device ran out of memory".into(),
        };
        let infra = failed(Failure {
            class: FailureClass::InfraError,
            stage: "precision".into(),
            message: held.to_string(),
        });
        assert!(memory_held_elsewhere(&infra));
        let mut measured_again = failed(Failure {
            class: FailureClass::Incorrect,
            stage: "precision".into(),
            message: "output 0 has a relative RMS error of 5.000e-1".into(),
        });
        assert_eq!(measured_again.verdict, Verdict::Incorrect);
        assert!(!memory_held_elsewhere(&measured_again));
        measured_again.findings.push(Finding::new(
            MEMORY_HELD_AFTER_FORWARD,
            Severity::Flag,
            "71.68 GiB were held outside the judge's referee".to_string(),
        ));
        assert!(memory_held_elsewhere(&measured_again));
        let shared = failed(Failure {
            class: FailureClass::InfraError,
            stage: "precision".into(),
            message: "the referee ran out of device memory beside other evaluations".into(),
        });
        assert!(!memory_held_elsewhere(&shared));
    }

    /// The engine tells this fault from other shortages by its message, the only part of it a
    /// result keeps.
    #[test]
    fn a_result_message_says_whether_memory_ran_out_and_was_held_elsewhere() {
        let held = InfraError::DeviceHeldElsewhere {
            stage: "precision",
            held_gib: 71.68,
            detail: "the device ran out of memory".into(),
        };
        assert!(InfraError::is_held_elsewhere(&held.to_string()), "{held}");
        assert!(InfraError::is_out_of_memory(&held.to_string()), "{held}");
        let shared = InfraError::SharedDeviceOutOfMemory {
            stage: "precision",
            who: "the warm pool's waiting processes",
            detail: "the device ran out of memory".into(),
        };
        assert!(
            !InfraError::is_held_elsewhere(&shared.to_string()),
            "{shared}"
        );
    }
}
