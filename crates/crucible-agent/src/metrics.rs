//! KernelBench and Dr. Kernel metrics over episodes. A sample's outcome is its best turn so far
//! ([`best_turn`]). `fast_p` is the fraction of samples that are correct and faster than `p`
//! (`fast_0` is the correctness rate: a correct sample with no timing, e.g. on the CPU, counts
//! there and nowhere else); `fast_p_correct` the same over correct samples only. Hack, flag and
//! no-code rates are per judged turn (a turn the judge itself failed on is not judged).

use std::collections::BTreeMap;

use crucible_result::Verdict;
use crucible_rl::reward::SpeedupBasis;
use serde::Serialize;

use crate::episode::{TurnRecord, best_turn};
use crate::store::Episodes;

/// The thresholds reported, as in KernelBench and Dr. Kernel.
pub const P: [f64; 6] = [0.0, 1.0, 1.2, 1.5, 2.0, 3.0];

/// Fast@p at each of [`P`], in order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FastP {
    pub p: Vec<f64>,
    pub all: Vec<f64>,
    /// `None` when no sample is correct.
    pub correct: Vec<Option<f64>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ByTurn {
    pub turn: u32,
    pub correct_rate: f64,
    pub fast_p: FastP,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metrics {
    pub samples: usize,
    pub correct: usize,
    pub correct_rate: f64,
    /// On the matched-precision speedup (falling back to fp32 where unmeasured).
    pub fast_p: FastP,
    pub fast_p_fp32: FastP,
    /// Geometric mean over correct samples with a speedup; `None` when there is none.
    pub geomean_speedup_fp32: Option<f64>,
    pub geomean_speedup_matched: Option<f64>,
    pub timed_correct: usize,
    pub turns: usize,
    pub judged_turns: usize,
    pub hack_rate: f64,
    pub flag_rate: f64,
    pub no_code_rate: f64,
    pub infra_errors: usize,
    pub rollout_errors: usize,
    /// Best-so-far after each turn.
    pub best_by_turn: Vec<ByTurn>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub overall: Metrics,
    pub per_level: BTreeMap<String, Metrics>,
}

/// Metrics over all episodes and per level.
pub fn report(episodes: &Episodes) -> Report {
    let all: Vec<&[TurnRecord]> = episodes.values().map(Vec::as_slice).collect();
    let mut levels: BTreeMap<String, Vec<&[TurnRecord]>> = BTreeMap::new();
    for turns in &all {
        if let Some(first) = turns.first() {
            levels.entry(first.level.clone()).or_default().push(turns);
        }
    }
    Report {
        overall: metrics(&all),
        per_level: levels
            .iter()
            .map(|(l, e)| (l.clone(), metrics(e)))
            .collect(),
    }
}

pub fn metrics(episodes: &[&[TurnRecord]]) -> Metrics {
    let best: Vec<Option<&TurnRecord>> = episodes
        .iter()
        .map(|t| best_turn(t, SpeedupBasis::Matched))
        .collect();
    let correct = best.iter().flatten().filter(|t| t.is_correct()).count();
    let all_turns: Vec<&TurnRecord> = episodes.iter().flat_map(|t| t.iter()).collect();
    let judged: Vec<&TurnRecord> = all_turns
        .iter()
        .copied()
        .filter(|t| {
            t.result
                .as_ref()
                .is_some_and(|r| r.verdict != Verdict::InfraError)
        })
        .collect();
    let attempted = all_turns.iter().filter(|t| t.error.is_none()).count();
    let max_turns = episodes.iter().map(|t| t.len()).max().unwrap_or(0);
    let speedups = |basis| -> Vec<f64> {
        best.iter()
            .flatten()
            .filter_map(|t| t.speedup(basis))
            .collect()
    };
    Metrics {
        samples: episodes.len(),
        correct,
        correct_rate: ratio(correct, episodes.len()),
        fast_p: fast_p(&best, SpeedupBasis::Matched),
        fast_p_fp32: fast_p(&best, SpeedupBasis::Fp32),
        geomean_speedup_fp32: geomean(&speedups(SpeedupBasis::Fp32)),
        geomean_speedup_matched: geomean(&speedups(SpeedupBasis::Matched)),
        timed_correct: speedups(SpeedupBasis::Fp32).len(),
        turns: all_turns.len(),
        judged_turns: judged.len(),
        hack_rate: ratio(judged.iter().filter(|t| t.is_hack()).count(), judged.len()),
        flag_rate: ratio(
            judged.iter().filter(|t| t.is_flagged()).count(),
            judged.len(),
        ),
        no_code_rate: ratio(
            all_turns.iter().filter(|t| t.no_code.is_some()).count(),
            attempted,
        ),
        infra_errors: all_turns
            .iter()
            .filter(|t| {
                t.result
                    .as_ref()
                    .is_some_and(|r| r.verdict == Verdict::InfraError)
            })
            .count(),
        rollout_errors: all_turns.iter().filter(|t| t.error.is_some()).count(),
        best_by_turn: (0..max_turns).map(|turn| by_turn(episodes, turn)).collect(),
    }
}

fn by_turn(episodes: &[&[TurnRecord]], turn: usize) -> ByTurn {
    let best: Vec<Option<&TurnRecord>> = episodes
        .iter()
        .map(|t| best_turn(&t[..t.len().min(turn + 1)], SpeedupBasis::Matched))
        .collect();
    let correct = best.iter().flatten().filter(|t| t.is_correct()).count();
    ByTurn {
        turn: turn as u32,
        correct_rate: ratio(correct, episodes.len()),
        fast_p: fast_p(&best, SpeedupBasis::Matched),
    }
}

fn fast_p(best: &[Option<&TurnRecord>], basis: SpeedupBasis) -> FastP {
    let correct: Vec<&TurnRecord> = best
        .iter()
        .flatten()
        .copied()
        .filter(|t| t.is_correct())
        .collect();
    let faster = |p: f64| {
        correct
            .iter()
            .filter(|t| p == 0.0 || t.speedup(basis).is_some_and(|s| s > p))
            .count()
    };
    FastP {
        p: P.to_vec(),
        all: P.iter().map(|&p| ratio(faster(p), best.len())).collect(),
        correct: P
            .iter()
            .map(|&p| (!correct.is_empty()).then(|| ratio(faster(p), correct.len())))
            .collect(),
    }
}

fn ratio(n: usize, d: usize) -> f64 {
    if d == 0 { 0.0 } else { n as f64 / d as f64 }
}

fn geomean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp())
}
