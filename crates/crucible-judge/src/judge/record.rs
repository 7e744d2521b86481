//! Turning what the harness processes reported into the result's records: trials, launches,
//! the profile, and the findings a trial shows.

use std::collections::HashSet;

use crucible_result::{Finding, KernelTime, Launch, OutputError, Profile, Severity, Trial};

use super::{CANDIDATE_MODULE, Evaluation};
use crate::protocol::{CheckReply, LaunchReport, OutputStats, ProfileReply, RunReply};

pub(super) fn output_error(stats: &OutputStats) -> OutputError {
    OutputError {
        index: stats.index,
        shape: stats.shape.clone(),
        dtype: stats.dtype.clone(),
        max_abs: stats.max_abs,
        mean_abs: stats.mean_abs,
        max_rel: stats.max_rel,
        mean_rel: stats.mean_rel,
        mismatched: stats.mismatched,
        numel: stats.numel,
    }
}

/// Records one trial and the findings it shows; returns whether it passed.
pub(super) fn record_trial(
    eval: &mut Evaluation<'_>,
    seed: u64,
    ran: &RunReply,
    checked: &CheckReply,
) -> bool {
    let problems: Vec<String> = match &ran.problem {
        Some(problem) => vec![problem.clone()],
        None => checked.problems.clone(),
    };
    if !checked.mutated_inputs.is_empty() {
        eval.add_once(Finding::new(
            "input-mutated",
            Severity::Reject,
            format!(
                "forward modified its input tensor(s) {:?}; inputs are read-only, write results \
                 into freshly allocated outputs",
                checked.mutated_inputs
            ),
        ));
    }
    if !checked.changed_after_return.is_empty() {
        eval.add_once(Finding::new(
            "output-changed-after-return",
            Severity::Reject,
            "the outputs changed after forward returned (a background thread or unfinished \
             device work); forward must finish its work before returning",
        ));
    }
    if !ran.aliased_outputs.is_empty() {
        eval.add_once(Finding::new(
            "output-aliases-input",
            Severity::Reject,
            "forward returned one of its inputs as an output; allocate a new output tensor",
        ));
    }
    let passed = problems.is_empty();
    eval.trials.push(Trial {
        seed,
        passed,
        outputs: checked.outputs.iter().map(output_error).collect(),
        message: (!passed).then(|| problems.join("\n")),
        repeat_of: None,
    });
    passed
}

/// The launches of the candidate's own kernels in one run.
pub(super) fn own_launches(report: &[LaunchReport]) -> Vec<Launch> {
    report
        .iter()
        .filter(|l| l.module == CANDIDATE_MODULE && l.calls > 0)
        .map(|l| Launch {
            kernel: l.kernel.clone(),
            calls: l.calls,
            autotune_config: l.autotune_config.clone(),
        })
        .collect()
}

/// Adds one run's launches to the evaluation's totals.
pub(super) fn merge_launches(total: &mut Vec<Launch>, run: Vec<Launch>) {
    for launch in run {
        match total.iter_mut().find(|l| l.kernel == launch.kernel) {
            Some(known) => {
                known.calls += launch.calls;
                if launch.autotune_config.is_some() {
                    known.autotune_config = launch.autotune_config;
                }
            }
            None => total.push(launch),
        }
    }
}

/// Attributes profiled GPU time to the candidate's kernels by exact compiled-kernel name.
pub(super) fn build_profile(reply: &ProfileReply) -> Profile {
    let own_names: HashSet<&str> = reply
        .launches
        .iter()
        .filter(|l| l.module == CANDIDATE_MODULE)
        .flat_map(|l| l.compiled_names.iter().map(String::as_str))
        .collect();
    let kernels: Vec<KernelTime> = reply
        .kernels
        .iter()
        .map(|k| KernelTime {
            candidate_triton: own_names.contains(k.name.as_str()),
            name: k.name.clone(),
            calls: k.calls,
            gpu_time_us: k.gpu_time_us,
        })
        .collect();
    let total_gpu_us = kernels.iter().map(|k| k.gpu_time_us).sum();
    let candidate_triton_us = kernels
        .iter()
        .filter(|k| k.candidate_triton)
        .map(|k| k.gpu_time_us)
        .sum();
    Profile {
        kernels,
        candidate_triton_us,
        total_gpu_us,
    }
}
