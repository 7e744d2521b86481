//! Requests to the two harness processes, and who is charged when one goes wrong: everything
//! the referee does wrong is the judge's (`infra_error`); everything the candidate process does
//! wrong is the candidate's, classified by what happened, never by what it claims.

use std::time::Duration;

use crucible_result::{Failure, FailureClass};
use serde::de::DeserializeOwned;

use super::Stop;
use crate::error::InfraError;
use crate::process::{ChannelError, HarnessProcess};
use crate::protocol::{
    CandidateFailure, CandidateRequest, RefereeFailure, RefereeRequest, Reply, parse_reply,
};

/// Sends a request to the referee and parses its reply strictly.
pub(super) fn referee_call<T: DeserializeOwned>(
    referee: &mut HarnessProcess,
    request: &RefereeRequest,
    timeout: Duration,
) -> Result<T, Stop> {
    let protocol = |detail: String| {
        Stop::Infra(InfraError::Protocol {
            who: "referee",
            detail,
        })
    };
    let message = serde_json::to_value(request).map_err(|e| protocol(e.to_string()))?;
    let reply = referee.request(&message, timeout).map_err(|channel| {
        Stop::Infra(InfraError::RefereeChannel {
            channel,
            log: referee.log_tail(4000),
        })
    })?;
    match parse_reply::<T, RefereeFailure>(reply).map_err(protocol)? {
        Reply::Ok(reply) => Ok(reply),
        Reply::Failed(RefereeFailure { error, traceback }) => {
            Err(Stop::Infra(InfraError::Referee { error, traceback }))
        }
    }
}

/// Sends a request to the candidate process; its failures are classified and charged to it.
pub(super) fn candidate_call<T: DeserializeOwned>(
    candidate: &mut HarnessProcess,
    stage: &str,
    request: &CandidateRequest,
    timeout: Duration,
) -> Result<T, Stop> {
    candidate_call_noting(candidate, stage, request, timeout, &mut |note: &str, _| {
        Err(format!("a note ({note:?}) where none is expected"))
    })
}

/// [`candidate_call`] for a request during which the candidate process sends notes (see
/// `protocol.rs`), each handled by `on_note`; a note it refuses is the candidate's crash, like
/// any message that does not fit the protocol.
pub(super) fn candidate_call_noting<T: DeserializeOwned>(
    candidate: &mut HarnessProcess,
    stage: &str,
    request: &CandidateRequest,
    timeout: Duration,
    on_note: &mut crate::process::NoteHandler<'_>,
) -> Result<T, Stop> {
    let failure = |class, message: String| {
        Stop::Candidate(Failure {
            class,
            stage: stage.to_string(),
            message,
        })
    };
    let corrupted = |detail: String| {
        failure(
            FailureClass::Crashed,
            format!("the candidate process corrupted the judge's channel: {detail}"),
        )
    };
    let message = serde_json::to_value(request).map_err(|e| {
        Stop::Infra(InfraError::Protocol {
            who: "judge",
            detail: e.to_string(),
        })
    })?;
    let reply = match candidate.request_noting(&message, timeout, on_note) {
        Ok(reply) => reply,
        Err(ChannelError::Timeout(limit)) => {
            return Err(failure(
                FailureClass::Timeout,
                format!(
                    "stage `{stage}` did not finish within {:.0} s; look for an infinite loop, a \
                     deadlock or a grid that launches far too many programs",
                    limit.as_secs_f64()
                ),
            ));
        }
        Err(ChannelError::Exited(exit)) => {
            return Err(failure(
                FailureClass::Crashed,
                format!(
                    "the candidate process {exit} during stage `{stage}`\n{}",
                    candidate.log_tail(2000)
                ),
            ));
        }
        Err(ChannelError::Protocol(detail)) => return Err(corrupted(detail)),
        Err(ChannelError::Io(e)) => return Err(Stop::Infra(InfraError::CandidateChannel(e))),
    };
    // Whatever the candidate's process writes is the candidate's: a reply that does not fit
    // the protocol is its crash, never an `infra_error` it could hide behind.
    match parse_reply::<T, CandidateFailure>(reply).map_err(corrupted)? {
        Reply::Ok(reply) => Ok(reply),
        Reply::Failed(CandidateFailure { class, message }) => {
            Err(failure(candidate_class(&class), message))
        }
    }
}

/// The candidate can only charge itself: a claimed `infra_error` (or anything unknown)
/// becomes a runtime error.
pub(super) fn candidate_class(name: &str) -> FailureClass {
    match name {
        "syntax_error" => FailureClass::SyntaxError,
        "import_error" => FailureClass::ImportError,
        "missing_model_new" => FailureClass::MissingModelNew,
        "triton_compile_error" => FailureClass::TritonCompileError,
        "cuda_error" => FailureClass::CudaError,
        "out_of_memory" => FailureClass::OutOfMemory,
        _ => FailureClass::RuntimeError,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidate_cannot_claim_an_infra_error() {
        assert_eq!(candidate_class("infra_error"), FailureClass::RuntimeError);
        assert_eq!(candidate_class("syntax_error"), FailureClass::SyntaxError);
    }
}
