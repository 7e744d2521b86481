//! Monte-Carlo check on a toy bandit: the policy-gradient estimate built from TRLOO advantages
//! is unbiased, and GRPO's self-included baseline shrinks it by (N−1)/N.
//!
//! Policy: softmax over 3 arms with fixed logits θ; arm k pays 1 with probability p_k. The true
//! gradient is ∂J/∂θ_k = π_k (p_k − J). Each replicate draws a group of N samples of one prompt,
//! gets advantages from `compute`, and forms ĝ = (1/N) Σ_i A_i ∇log π(a_i), with
//! ∇log π(a) = e_a − π. Over M replicates, each component's mean must lie within Z standard
//! errors of its target. The draws are seeded, so the test is deterministic.

// Gradient components are indexed by arm, as in the formulas.
#![allow(clippy::needless_range_loop)]

use crucible_rl::advantage::{Config, Estimator, TurnInput, compute};

const ARMS: usize = 3;
const LOGITS: [f64; ARMS] = [0.5, 0.0, -0.5];
const PAY: [f64; ARMS] = [0.2, 0.5, 0.9];
/// Group size: small, so the (N−1)/N shrinkage (2/3) is large.
const N: u32 = 3;
const REPLICATES: usize = 40_000;
/// Replicates per `compute` call (one prompt each).
const CHUNK: usize = 10_000;
/// Two-sided 4σ bound: about 6e-5 per comparison under the null.
const Z: f64 = 4.0;

/// SplitMix64: a small, well-mixed, seedable generator.
struct Rng(u64);

impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn policy() -> [f64; ARMS] {
    let m = LOGITS.iter().cloned().fold(f64::MIN, f64::max);
    let e = LOGITS.map(|l| (l - m).exp());
    let s: f64 = e.iter().sum();
    e.map(|x| x / s)
}

fn true_gradient() -> [f64; ARMS] {
    let pi = policy();
    let j: f64 = (0..ARMS).map(|k| pi[k] * PAY[k]).sum();
    std::array::from_fn(|k| pi[k] * (PAY[k] - j))
}

fn draw_arm(rng: &mut Rng, pi: &[f64; ARMS]) -> usize {
    let u = rng.next_f64();
    let mut acc = 0.0;
    for (k, p) in pi.iter().enumerate() {
        acc += p;
        if u < acc {
            return k;
        }
    }
    ARMS - 1
}

/// Running mean and standard error of a vector-valued estimate.
#[derive(Default)]
struct Moments {
    n: f64,
    sum: [f64; ARMS],
    sum_sq: [f64; ARMS],
}

impl Moments {
    fn push(&mut self, g: &[f64; ARMS]) {
        self.n += 1.0;
        for k in 0..ARMS {
            self.sum[k] += g[k];
            self.sum_sq[k] += g[k] * g[k];
        }
    }
    fn mean(&self, k: usize) -> f64 {
        self.sum[k] / self.n
    }
    fn stderr(&self, k: usize) -> f64 {
        let m = self.mean(k);
        let var = (self.sum_sq[k] / self.n - m * m) * self.n / (self.n - 1.0);
        (var / self.n).sqrt()
    }
}

/// Runs `turns`-turn episodes (turns independent, reward-to-go returns with γ = 1) and returns
/// the moments of ĝ under each estimator.
fn simulate(turns: u32, estimators: &[Estimator], seed: u64) -> Vec<Moments> {
    let pi = policy();
    let mut rng = Rng(seed);
    let mut moments: Vec<Moments> = estimators.iter().map(|_| Moments::default()).collect();
    for chunk in 0..REPLICATES / CHUNK {
        let mut rows = Vec::with_capacity(CHUNK * (N * turns) as usize);
        let mut arms = Vec::with_capacity(rows.capacity());
        for rep in 0..CHUNK {
            for sample in 0..N {
                for turn in 0..turns {
                    let a = draw_arm(&mut rng, &pi);
                    let paid = rng.next_f64() < PAY[a];
                    arms.push(a);
                    rows.push(TurnInput {
                        prompt: (chunk * CHUNK + rep) as u64,
                        sample,
                        turn,
                        reward: if paid { 1.0 } else { 0.0 },
                        correct: paid,
                        coverage: None,
                        void: false,
                        errored: false,
                        truncated: false,
                        log_ratio: None,
                    });
                }
            }
        }
        for (e, m) in estimators.iter().zip(&mut moments) {
            let mut cfg = Config::new(*e);
            cfg.gamma = 1.0;
            let (out, _) = compute(&rows, &cfg).expect("valid batch");
            let per_group = (N * turns) as usize;
            for rep in 0..CHUNK {
                let mut g = [0.0; ARMS];
                for i in rep * per_group..(rep + 1) * per_group {
                    let adv = out[i].advantage.expect("every turn is kept");
                    for k in 0..ARMS {
                        let score = if arms[i] == k { 1.0 } else { 0.0 } - pi[k];
                        g[k] += adv * score / f64::from(N);
                    }
                }
                m.push(&g);
            }
        }
    }
    moments
}

fn assert_within(m: &Moments, target: [f64; ARMS], what: &str) {
    for k in 0..ARMS {
        let (mean, se) = (m.mean(k), m.stderr(k));
        assert!(
            (mean - target[k]).abs() <= Z * se,
            "{what}, arm {k}: mean {mean:.5} vs target {:.5}, {Z}·SE = {:.5}",
            target[k],
            Z * se
        );
    }
}

#[test]
fn trloo_is_unbiased_and_grpo_shrinks_by_n_minus_one_over_n() {
    let truth = true_gradient();
    let shrink = f64::from(N - 1) / f64::from(N);
    let grpo = Estimator::Grpo {
        normalize_std: false,
    };
    let m = simulate(1, &[Estimator::Trloo, grpo], 0x5eed);
    assert_within(&m[0], truth, "TRLOO vs true gradient");
    assert_within(
        &m[1],
        truth.map(|g| shrink * g),
        "GRPO vs (N−1)/N · true gradient",
    );
    // The shrinkage is detectable, not just tolerated: GRPO misses the true gradient on the
    // component with the largest magnitude by far more than its confidence interval.
    let k = (0..ARMS)
        .max_by(|&a, &b| truth[a].abs().total_cmp(&truth[b].abs()))
        .unwrap_or(0);
    let gap = (m[1].mean(k) - truth[k]).abs();
    assert!(
        gap > Z * m[1].stderr(k),
        "GRPO gap {gap:.5} should exceed {Z}·SE {:.5}",
        Z * m[1].stderr(k)
    );
}

#[test]
fn trloo_is_unbiased_over_two_turns() {
    // Turns are independent draws of the same policy, so ∇E[r_0 + r_1] = 2 · single-turn.
    let truth = true_gradient().map(|g| 2.0 * g);
    let m = simulate(2, &[Estimator::Trloo], 0xfeed);
    assert_within(&m[0], truth, "two-turn TRLOO vs true gradient");
}
