//! Rejection sampling: profiling-based (PRS), mismatch-based (MRS), and the group filter.
//!
//! Random draws are a pure function of `(seed, prompt, sample, turn)`, not of row order, so the
//! same batch gives the same decisions however it was sorted or split.

/// Profiling-based rejection sampling: a correct turn whose kernel spends little GPU time in the
/// candidate's own Triton code ("lazy optimization") is kept with probability
/// `clip((coverage − floor) / width, 0, 1)`. Turns that are not correct are always kept. A correct
/// turn with null coverage (no profile, e.g. a CPU run) is kept: unknown is not evidence of
/// laziness.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prs {
    pub mode: PrsMode,
    pub floor: f64,
    pub width: f64,
}

impl Default for Prs {
    fn default() -> Self {
        Prs {
            mode: PrsMode::PerTurn,
            floor: 0.3,
            width: 0.1,
        }
    }
}

/// Whether PRS draws once per turn, or once per trajectory with the geometric mean of its turns'
/// keep probabilities (a trajectory is kept or dropped whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrsMode {
    PerTurn,
    PerTrajectory,
}

impl Prs {
    /// Keep probability of one turn.
    pub fn keep_probability(&self, correct: bool, coverage: Option<f64>) -> f64 {
        match (correct, coverage) {
            (true, Some(c)) => ((c - self.floor) / self.width).clamp(0.0, 1.0),
            _ => 1.0,
        }
    }
}

/// Mismatch rejection sampling: a trajectory is kept only if the geometric mean of
/// `π_train / π_rollout` over its tokens lies in `[low, high]` and no single token's ratio falls
/// below `token_floor`. It drops samples whose rollout engine and trainer disagree enough to make
/// the importance weights meaningless.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mrs {
    pub low: f64,
    pub high: f64,
    pub token_floor: f64,
}

impl Default for Mrs {
    fn default() -> Self {
        Mrs {
            low: 0.999,
            high: 1.001,
            token_floor: 1e-4,
        }
    }
}

/// Sufficient statistics of per-token `log π_train − log π_rollout` for MRS; they add up across
/// the turns of a trajectory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogRatio {
    pub sum: f64,
    /// Smallest per-token log-ratio; +∞ when there are no tokens.
    pub min: f64,
    pub tokens: u64,
}

impl Default for LogRatio {
    fn default() -> Self {
        LogRatio {
            sum: 0.0,
            min: f64::INFINITY,
            tokens: 0,
        }
    }
}

impl LogRatio {
    /// Statistics of one turn. The slices must have equal length (checked by the caller, which
    /// knows the row to name in the error).
    pub fn from_logprobs(train: &[f32], rollout: &[f32]) -> LogRatio {
        let mut out = LogRatio::default();
        for (t, r) in train.iter().zip(rollout) {
            let d = f64::from(*t) - f64::from(*r);
            out.sum += d;
            out.min = out.min.min(d);
        }
        out.tokens = train.len().min(rollout.len()) as u64;
        out
    }

    pub fn merge(self, other: LogRatio) -> LogRatio {
        LogRatio {
            sum: self.sum + other.sum,
            min: self.min.min(other.min),
            tokens: self.tokens + other.tokens,
        }
    }
}

impl Mrs {
    /// Whether a trajectory with these statistics is kept. No tokens means no mismatch. A NaN
    /// log-prob fails both comparisons and is rejected.
    pub fn accepts(&self, s: &LogRatio) -> bool {
        if s.tokens == 0 {
            return true;
        }
        let geo_mean = (s.sum / s.tokens as f64).exp();
        let in_band = geo_mean >= self.low && geo_mean <= self.high;
        in_band && s.min >= self.token_floor.ln()
    }
}

/// Drops a prompt's whole group when it cannot teach anything: the rewards of its samples' last
/// turns are (nearly) all equal, or every sample was truncated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupFilter {
    /// Population standard deviation below which the group counts as flat.
    pub min_std: f64,
    pub drop_all_truncated: bool,
}

impl Default for GroupFilter {
    fn default() -> Self {
        GroupFilter {
            min_std: 1e-3,
            drop_all_truncated: true,
        }
    }
}

/// Stable 64-bit key of a prompt id (FNV-1a, then a SplitMix64 finalizer for spread). Stable
/// across runs and platforms, unlike `std`'s randomly seeded hasher.
pub fn prompt_key(id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix(h)
}

/// SplitMix64 finalizer: a bijective avalanche of 64 bits.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Which decision a draw is for, so that per-turn and per-trajectory draws are independent.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stream {
    PrsTurn = 1,
    PrsTrajectory = 2,
}

/// A uniform number in [0, 1) determined by its arguments alone.
pub(crate) fn uniform(seed: u64, stream: Stream, prompt: u64, sample: u32, turn: u32) -> f64 {
    let h =
        mix(seed
            ^ mix(stream as u64 ^ mix(prompt ^ mix((u64::from(sample) << 32) | u64::from(turn)))));
    (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prs_keep_probability_hand_computed() {
        let p = Prs::default();
        assert_eq!(p.keep_probability(true, Some(0.3)), 0.0);
        assert_eq!(p.keep_probability(true, Some(0.2)), 0.0);
        assert!((p.keep_probability(true, Some(0.35)) - 0.5).abs() < 1e-12);
        assert_eq!(p.keep_probability(true, Some(0.4)), 1.0);
        assert_eq!(p.keep_probability(true, Some(0.9)), 1.0);
        assert_eq!(p.keep_probability(true, None), 1.0);
        assert_eq!(p.keep_probability(false, Some(0.0)), 1.0);
    }

    #[test]
    fn mrs_band_and_token_veto() {
        let m = Mrs::default();
        // Geometric mean exp(0.0005) ≈ 1.0005: inside the band.
        let ok = LogRatio::from_logprobs(&[-1.0, -2.0], &[-1.0005, -2.0005]);
        assert!(m.accepts(&ok));
        // exp(0.002) ≈ 1.002: outside.
        let drift = LogRatio::from_logprobs(&[-1.0, -2.0], &[-1.002, -2.002]);
        assert!(!m.accepts(&drift));
        // Mean log-ratio 0 but one token at ratio e^-10 < 1e-4: vetoed.
        let veto = LogRatio::from_logprobs(&[-11.0, 9.0], &[-1.0, -1.0]);
        assert_eq!(veto.sum, 0.0);
        assert!(!m.accepts(&veto));
        assert!(m.accepts(&LogRatio::default()));
        let nan = LogRatio::from_logprobs(&[f32::NAN], &[-1.0]);
        assert!(!m.accepts(&nan));
        // Statistics add across turns: the trajectory mean is what counts.
        let a = LogRatio::from_logprobs(&[-1.0], &[-1.0015]);
        let b = LogRatio::from_logprobs(&[-1.0], &[-0.9995]);
        assert!(!m.accepts(&a));
        assert!(m.accepts(&a.merge(b)));
    }

    #[test]
    fn draws_are_deterministic_and_roughly_uniform() {
        let k = prompt_key("task-1");
        assert_eq!(
            uniform(7, Stream::PrsTurn, k, 1, 2),
            uniform(7, Stream::PrsTurn, k, 1, 2)
        );
        assert_ne!(
            uniform(7, Stream::PrsTurn, k, 1, 2),
            uniform(8, Stream::PrsTurn, k, 1, 2)
        );
        let n = 100_000;
        let mean = (0..n)
            .map(|i| uniform(1, Stream::PrsTurn, k, i, 0))
            .sum::<f64>()
            / n as f64;
        // Standard error of the mean of U(0,1) is sqrt(1/12/n) ≈ 0.0009.
        assert!((mean - 0.5).abs() < 0.005, "{mean}");
        assert_ne!(prompt_key("a"), prompt_key("b"));
    }
}
