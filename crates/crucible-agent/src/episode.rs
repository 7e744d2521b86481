//! Episodes: one sample of one task, turn after turn. A turn is recorded whole ([`TurnRecord`]:
//! the prompt it was generated from, the response, the code, the judge's result, the reward and
//! the note for the next turn), so the next prompt is a function of the records alone; that is
//! what makes an interrupted run resumable exactly.
//!
//! History modes decide what earlier turns the next prompt holds: `all`, the last `k`, or the
//! best window (Dr. Kernel's sequential test-time scaling: the `k` consecutive turns with the
//! highest summed reward).

use crucible_result::EvalResult;
use crucible_rl::reward::SpeedupBasis;
use serde::{Deserialize, Serialize};

use crate::client::{Message, Usage};
use crate::prompt;

/// Which earlier turns a prompt shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "mode", content = "k")]
pub enum History {
    All,
    LastK(u32),
    BestWindow(u32),
}

impl History {
    /// Defaults of Dr. Kernel's sequential test-time scaling.
    pub const BEST_WINDOW: u32 = 4;
    pub const BEST_WINDOW_ITERATIONS: u32 = 10;

    /// `all`, `last-k` or `best-window`, with `k` for the last two.
    pub fn parse(name: &str, k: u32) -> Option<History> {
        match name {
            "all" => Some(History::All),
            "last-k" => Some(History::LastK(k.max(1))),
            "best-window" => Some(History::BestWindow(k.max(1))),
            _ => None,
        }
    }

    pub fn name(self) -> String {
        match self {
            History::All => "all".into(),
            History::LastK(k) => format!("last-{k}"),
            History::BestWindow(k) => format!("best-window-{k}"),
        }
    }
}

/// One turn, as appended to the run's records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    pub task: String,
    /// The suite group the task belongs to (`builtin`, `level2`, ...).
    pub level: String,
    pub sample: u32,
    pub turn: u32,
    /// The prompt this turn was generated from.
    pub messages: Vec<Message>,
    pub response: String,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    /// Per-token log-probs of the response, when the server gave them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logprobs: Vec<f32>,
    /// The extracted code; `None` with `no_code` saying why.
    pub code: Option<String>,
    pub no_code: Option<String>,
    pub result: Option<EvalResult>,
    /// Under the run's recipe; `None` for an infra failure or a rollout error (never scored).
    pub reward: Option<f64>,
    /// The note the next turn reads.
    pub feedback: String,
    /// A rollout-side failure (the model server gave up): it ends the episode.
    pub error: Option<String>,
}

impl TurnRecord {
    pub fn is_correct(&self) -> bool {
        self.result.as_ref().is_some_and(|r| r.correct)
    }

    pub fn is_hack(&self) -> bool {
        self.result
            .as_ref()
            .is_some_and(crucible_rl::reward::is_hack)
    }

    /// A correct result that carries a `flag` finding (suspicious, not rejected).
    pub fn is_flagged(&self) -> bool {
        self.result.as_ref().is_some_and(|r| {
            r.findings
                .iter()
                .any(|f| f.severity == crucible_result::Severity::Flag)
        })
    }

    /// The speedup on `basis` (matched falls back to fp32, as the RL core does), only when
    /// correct and positive.
    pub fn speedup(&self, basis: SpeedupBasis) -> Option<f64> {
        let r = self.result.as_ref().filter(|r| r.correct)?;
        basis.speedup(r).filter(|s| s.is_finite() && *s > 0.0)
    }

    pub fn key(&self) -> (String, u32, u32) {
        (self.task.clone(), self.sample, self.turn)
    }
}

/// The earlier turns a prompt shows, in order.
pub fn shown_turns(history: History, turns: &[TurnRecord]) -> &[TurnRecord] {
    match history {
        History::All => turns,
        History::LastK(k) => &turns[turns.len().saturating_sub(k as usize)..],
        History::BestWindow(k) => {
            let (start, len) = best_window(turns, k as usize);
            &turns[start..start + len]
        }
    }
}

/// The `k` consecutive turns with the highest summed reward (an unscored turn counts 0), as
/// (start, length); with fewer than `k` turns, all of them. Ties go to the latest window: it
/// carries the most recent feedback.
pub fn best_window(turns: &[TurnRecord], k: usize) -> (usize, usize) {
    if turns.len() <= k {
        return (0, turns.len());
    }
    let rewards: Vec<f64> = turns.iter().map(|t| t.reward.unwrap_or(0.0)).collect();
    let mut best = (f64::NEG_INFINITY, 0);
    for start in 0..=turns.len() - k {
        let sum: f64 = rewards[start..start + k].iter().sum();
        if sum >= best.0 {
            best = (sum, start);
        }
    }
    (best.1, k)
}

/// The prompt of the next turn: the first turn's messages, then each shown turn's response and
/// the note on it.
pub fn next_messages(
    task: &str,
    source: &str,
    history: History,
    turns: &[TurnRecord],
) -> Vec<Message> {
    let mut messages = prompt::first_messages(task, source);
    for t in shown_turns(history, turns) {
        messages.push(Message::assistant(t.response.clone()));
        messages.push(Message::user(t.feedback.clone()));
    }
    messages
}

/// The best turn of an episode: correct before incorrect, then the higher speedup on `basis`,
/// then the higher reward, then the earlier turn.
pub fn best_turn(turns: &[TurnRecord], basis: SpeedupBasis) -> Option<&TurnRecord> {
    let mut best: Option<&TurnRecord> = None;
    for t in turns {
        let better = match best {
            None => true,
            Some(b) => rank(t, basis) > rank(b, basis),
        };
        if better {
            best = Some(t);
        }
    }
    best
}

fn rank(t: &TurnRecord, basis: SpeedupBasis) -> (bool, f64, f64) {
    (
        t.is_correct(),
        t.speedup(basis).unwrap_or(0.0),
        t.reward.unwrap_or(f64::NEG_INFINITY),
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn turn(turn: u32, reward: Option<f64>) -> TurnRecord {
        TurnRecord {
            task: "t".into(),
            level: "builtin".into(),
            sample: 0,
            turn,
            messages: vec![],
            response: format!("response {turn}"),
            finish_reason: Some("stop".into()),
            usage: None,
            logprobs: vec![],
            code: None,
            no_code: Some("none".into()),
            result: None,
            reward,
            feedback: format!("feedback {turn}"),
            error: None,
        }
    }

    #[test]
    fn best_window_takes_the_highest_sum_and_the_latest_tie() {
        let rewards = [0.0, 1.0, 2.0, 0.0, 0.5, 1.0, 1.5];
        let turns: Vec<_> = rewards
            .iter()
            .enumerate()
            .map(|(i, r)| turn(i as u32, Some(*r)))
            .collect();
        // Sums of 3: [3.0, 3.0, 2.5, 1.5, 3.0]: the latest of the ties, start 4.
        assert_eq!(best_window(&turns, 3), (4, 3));
        // Sums of 2: [1, 3, 2, .5, 1.5, 2.5]: start 1.
        assert_eq!(best_window(&turns, 2), (1, 2));
        assert_eq!(best_window(&turns[..2], 3), (0, 2));
        // An unscored (infra) turn counts 0: rewards 0 1 2 0 .5 0 0, sums [3, 3, 2.5, .5, .5].
        let mut turns = turns;
        turns[5].reward = None;
        turns[6].reward = None;
        assert_eq!(best_window(&turns, 3), (1, 3));
    }

    #[test]
    fn prompts_follow_the_history_mode() {
        let turns: Vec<_> = (0..4).map(|i| turn(i, Some(f64::from(i % 2)))).collect();
        let shown = |h| {
            next_messages("t", "src", h, &turns)
                .iter()
                .skip(2)
                .map(|m| m.content.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(shown(History::All).len(), 8);
        assert_eq!(
            shown(History::LastK(1)),
            vec!["response 3".to_string(), "feedback 3".to_string()]
        );
        // Rewards 0 1 0 1: windows of 2 all sum to 1; the latest wins.
        assert_eq!(shown(History::BestWindow(2))[0], "response 2");
        assert_eq!(
            History::parse("best-window", 4),
            Some(History::BestWindow(4))
        );
        assert_eq!(History::parse("nope", 4), None);
    }
}
