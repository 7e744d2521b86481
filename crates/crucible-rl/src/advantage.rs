//! Returns, masks, rejection sampling and advantages over a batch of turns.
//!
//! A batch is laid out as prompt → samples → turns: one [`TurnInput`] per turn, keyed by
//! `(prompt, sample, turn)`, turns of a sample numbered 0, 1, 2, ... Rows may come in any order.
//!
//! [`compute`] runs, per prompt:
//! 1. **masks** (the turn is out of the loss and out of every baseline): every turn of an errored
//!    episode ([`Reason::EpisodeError`]: an `infra_error` verdict or a rollout error anywhere in
//!    it, since later turns were conditioned on feedback that was never about the candidate), and
//!    a void turn (no kernel, no judge result) after an earlier correct turn
//!    ([`Reason::VoidAfterSuccess`]: the episode was already solved).
//! 2. **returns** `G_t = r_t + γ·G_{t+1}` over the sample's turns; a masked turn adds 0.
//! 3. **rejection** (the turn is out of the loss; see [`Config::rejected_in_baseline`] for the
//!    baselines): group filter, then MRS, then PRS. The first reason sticks.
//! 4. **advantages** with the chosen [`Estimator`].

use crate::error::{Error, Result};
use crate::sampling::{self, GroupFilter, LogRatio, Mrs, Prs, PrsMode, Stream};

/// Added to the standard deviation before dividing, so a flat group gives 0, not NaN.
pub const STD_EPS: f64 = 1e-6;

/// One turn of one sample of one prompt: what the estimators read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TurnInput {
    /// Stable key of the prompt id ([`sampling::prompt_key`]); also seeds the random draws.
    pub prompt: u64,
    pub sample: u32,
    pub turn: u32,
    /// Read only for turns that are not masked; NaN means missing (an error if it is read).
    pub reward: f64,
    /// The judge called this turn's kernel correct (and not a hack).
    pub correct: bool,
    /// Triton coverage, for PRS.
    pub coverage: Option<f64>,
    /// The turn produced no kernel, so there is no judge result.
    pub void: bool,
    /// The judge failed (`infra_error`) or the rollout failed on this turn.
    pub errored: bool,
    /// The response hit the length limit.
    pub truncated: bool,
    /// Per-token train/rollout log-ratio statistics; required when MRS is on.
    pub log_ratio: Option<LogRatio>,
}

/// How advantages are formed from returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Estimator {
    /// Groups are (prompt, turn index); `A = G − mean(group)`, divided by the group's population
    /// std (+ε) when `normalize_std`. The mean includes the sample itself, which shrinks the
    /// policy gradient by `(N−1)/N`.
    Grpo { normalize_std: bool },
    /// Trajectory-level leave-one-out: each sample's value is its return from turn 0, the
    /// baseline is the mean over the prompt's other samples, and the advantage is shared by all
    /// the sample's turns. `A = G` for a lone sample.
    Rloo,
    /// Turn-level leave-one-out (Dr. Kernel): groups are (prompt, turn index),
    /// `A = G − mean of the others in the group`, and `A = G` for a group of one.
    Trloo,
    /// Kevin-style: discounted returns (γ = 0.4 by default) pooled over every turn of every
    /// sample of the prompt, then `A = (G − mean) / (std + ε)`.
    Kevin,
}

impl Estimator {
    pub const NAMES: [&'static str; 4] = ["grpo", "rloo", "trloo", "kevin"];

    /// The estimator called `name`; GRPO normalizes by std unless told otherwise.
    pub fn from_name(name: &str) -> Option<Estimator> {
        Some(match name {
            "grpo" => Estimator::Grpo {
                normalize_std: true,
            },
            "rloo" => Estimator::Rloo,
            "trloo" => Estimator::Trloo,
            "kevin" => Estimator::Kevin,
            _ => return None,
        })
    }

    /// 0.4 for Kevin (its published choice), 1 otherwise.
    pub fn default_gamma(self) -> f64 {
        match self {
            Estimator::Kevin => 0.4,
            _ => 1.0,
        }
    }
}

/// Everything [`compute`] needs besides the rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub estimator: Estimator,
    /// Discount γ in [0, 1].
    pub gamma: f64,
    /// When true (the default), a turn rejected by sampling still counts in its group's baseline
    /// and gets an advantage, but has weight 0: rejection then changes which samples train, not
    /// what the others are compared with. When false, rejected turns leave the baselines too and
    /// get no advantage.
    pub rejected_in_baseline: bool,
    pub group_filter: Option<GroupFilter>,
    pub mrs: Option<Mrs>,
    pub prs: Option<Prs>,
    /// Seed of the PRS draws.
    pub seed: u64,
}

impl Config {
    /// No rejection sampling, the estimator's default γ, rejected turns kept in baselines.
    pub fn new(estimator: Estimator) -> Config {
        Config {
            estimator,
            gamma: estimator.default_gamma(),
            rejected_in_baseline: true,
            group_filter: None,
            mrs: None,
            prs: None,
            seed: 0,
        }
    }

    pub fn validate(&self) -> Result<()> {
        fn bad(name: &'static str, v: f64, why: &'static str) -> Result<()> {
            Err(Error::InvalidParam {
                name,
                value: v.to_string(),
                why,
            })
        }
        if !(0.0..=1.0).contains(&self.gamma) {
            return bad("gamma", self.gamma, "must lie in [0, 1]");
        }
        if let Some(p) = &self.prs {
            if !p.floor.is_finite() {
                return bad("prs floor", p.floor, "must be finite");
            }
            if !(p.width.is_finite() && p.width > 0.0) {
                return bad("prs width", p.width, "must be positive");
            }
        }
        if let Some(m) = &self.mrs {
            if !(m.low.is_finite() && m.high.is_finite() && m.low <= m.high) {
                return bad("mrs band", m.low, "low and high must be finite, low ≤ high");
            }
            if !(m.token_floor.is_finite() && m.token_floor > 0.0) {
                return bad("mrs token floor", m.token_floor, "must be positive");
            }
        }
        if let Some(g) = &self.group_filter
            && (g.min_std.is_nan() || g.min_std < 0.0)
        {
            return bad("group filter min std", g.min_std, "must be ≥ 0");
        }
        Ok(())
    }
}

/// Why a turn has weight 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Masked: a void turn after an earlier correct turn.
    VoidAfterSuccess,
    /// Masked: some turn of the episode errored.
    EpisodeError,
    /// Rejected by the group filter: the last-turn rewards are flat.
    GroupFlat,
    /// Rejected by the group filter: every sample was truncated.
    GroupTruncated,
    /// Rejected by mismatch rejection sampling.
    Mrs,
    /// Rejected by profiling-based rejection sampling.
    Prs,
}

impl Reason {
    pub const ALL: [Reason; 6] = [
        Reason::VoidAfterSuccess,
        Reason::EpisodeError,
        Reason::GroupFlat,
        Reason::GroupTruncated,
        Reason::Mrs,
        Reason::Prs,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::VoidAfterSuccess => "void_after_success",
            Reason::EpisodeError => "episode_error",
            Reason::GroupFlat => "group_flat",
            Reason::GroupTruncated => "group_truncated",
            Reason::Mrs => "mrs",
            Reason::Prs => "prs",
        }
    }

    pub fn parse(s: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// Masked (out of the baselines too), as opposed to rejected by sampling.
    pub fn is_mask(self) -> bool {
        matches!(self, Reason::VoidAfterSuccess | Reason::EpisodeError)
    }
}

/// What [`compute`] says about one turn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TurnOutput {
    /// `G_t`; `None` for masked turns.
    pub ret: Option<f64>,
    /// `None` for turns outside every baseline (masked, or rejected when rejected turns leave
    /// the baselines).
    pub advantage: Option<f64>,
    /// Loss weight: 1 for kept turns, 0 for masked or rejected ones.
    pub weight: f64,
    pub reason: Option<Reason>,
}

/// Counts over one batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub rows: usize,
    pub kept: usize,
    pub masked: usize,
    pub rejected: usize,
    /// Indexed like [`Reason::ALL`].
    pub by_reason: [usize; 6],
}

impl Summary {
    pub fn count(&self, r: Reason) -> usize {
        self.by_reason[r as usize]
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rows {}, kept {}, masked {}, rejected {}",
            self.rows, self.kept, self.masked, self.rejected
        )?;
        let parts: Vec<String> = Reason::ALL
            .iter()
            .filter(|r| self.count(**r) > 0)
            .map(|r| format!("{} {}", r.as_str(), self.count(*r)))
            .collect();
        if !parts.is_empty() {
            write!(f, " ({})", parts.join(", "))?;
        }
        Ok(())
    }
}

/// Where [`compute_columns`] reads turns from: a slice of [`TurnInput`]s, or columns that build
/// each turn when it is read, so that a columnar caller never copies a batch into rows.
pub trait TurnSource: Sync {
    /// Rows in the batch.
    fn rows(&self) -> usize;
    /// Row `i` (`i < rows()`).
    fn turn(&self, i: usize) -> TurnInput;
    /// Row `i`'s `(prompt, sample, turn)`: what grouping reads, every row, several times.
    #[inline]
    fn key(&self, i: usize) -> (u64, u32, u32) {
        let t = self.turn(i);
        (t.prompt, t.sample, t.turn)
    }
    /// Row `i`'s reward.
    #[inline]
    fn reward(&self, i: usize) -> f64 {
        self.turn(i).reward
    }
}

impl TurnSource for [TurnInput] {
    #[inline]
    fn rows(&self) -> usize {
        self.len()
    }
    #[inline]
    fn turn(&self, i: usize) -> TurnInput {
        self[i]
    }
}

/// [`compute`]'s results as columns, in input order: what a columnar caller (NumPy, Arrow)
/// takes without a pass over [`TurnOutput`]s.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Columns {
    /// `G_t`; NaN for masked turns.
    pub ret: Vec<f64>,
    /// NaN for turns outside every baseline.
    pub advantage: Vec<f64>,
    /// Loss weight: 1 for kept turns, 0 for masked or rejected ones.
    pub weight: Vec<f64>,
    pub reason: Vec<Option<Reason>>,
}

/// Computes returns, masks, rejections and advantages; outputs are in input order.
pub fn compute(rows: &[TurnInput], cfg: &Config) -> Result<(Vec<TurnOutput>, Summary)> {
    let (c, summary) = compute_columns(rows, cfg)?;
    let out = (0..c.ret.len())
        .map(|i| TurnOutput {
            ret: Some(c.ret[i]).filter(|g| !g.is_nan()),
            advantage: Some(c.advantage[i]).filter(|v| !v.is_nan()),
            weight: c.weight[i],
            reason: c.reason[i],
        })
        .collect();
    Ok((out, summary))
}

/// [`compute`], reading any [`TurnSource`] and answering columns (NaN for none).
pub fn compute_columns<S: TurnSource + ?Sized>(
    rows: &S,
    cfg: &Config,
) -> Result<(Columns, Summary)> {
    cfg.validate()?;
    // Row positions are kept as u32 to halve the sort keys.
    if u32::try_from(rows.rows()).is_err() {
        return Err(Error::InvalidParam {
            name: "batch size",
            value: rows.rows().to_string(),
            why: "a batch holds at most 2^32 − 1 rows; split it by prompt",
        });
    }
    // Grouped input is processed in place; anything else is sorted into a copy, so that every
    // pass below reads memory in order. `order[pos]` is then the input row at `pos`.
    if is_grouped(rows) {
        return process_all(rows, None, cfg);
    }
    let order = sort_order(rows);
    let sorted: Vec<TurnInput> = order.iter().map(|&i| rows.turn(i as usize)).collect();
    let (c, summary) = process_all(sorted.as_slice(), Some(&order), cfg)?;
    Ok((c.unsorted(&order), summary))
}

/// Every prompt's block of `rows` (in processing order: each prompt's rows contiguous), then the
/// summary; `order[pos]`, when the input was sorted, is the input row at `pos`.
fn process_all<S: TurnSource + ?Sized>(
    rows: &S,
    order: Option<&[u32]>,
    cfg: &Config,
) -> Result<(Columns, Summary)> {
    let n = rows.rows();
    let mut c = Columns {
        ret: vec![f64::NAN; n],
        advantage: vec![f64::NAN; n],
        weight: Vec::new(),
        reason: vec![None; n],
    };
    let mut s = Scratch::default();

    let mut a = 0;
    while a < n {
        let prompt = rows.key(a).0;
        let mut b = a + 1;
        while b < n && rows.key(b).0 == prompt {
            b += 1;
        }
        let block = Block {
            rows,
            start: a,
            len: b - a,
            order: order.map(|o| &o[a..b]),
        };
        block.process(
            cfg,
            &mut s,
            &mut c.ret[a..b],
            &mut c.reason[a..b],
            &mut c.advantage[a..b],
        )?;
        a = b;
    }

    let mut summary = Summary {
        rows: n,
        ..Summary::default()
    };
    for r in &c.reason {
        match r {
            None => summary.kept += 1,
            Some(x) if x.is_mask() => summary.masked += 1,
            Some(_) => summary.rejected += 1,
        }
        if let Some(x) = r {
            summary.by_reason[*x as usize] += 1;
        }
    }
    c.weight = c
        .reason
        .iter()
        .map(|r| if r.is_none() { 1.0 } else { 0.0 })
        .collect();
    Ok((c, summary))
}

impl Columns {
    /// The columns in input order, from processing order (`order[pos]` is the input row).
    fn unsorted(self, order: &[u32]) -> Columns {
        fn scatter<T: Copy + Default>(v: Vec<T>, order: &[u32]) -> Vec<T> {
            let mut out = vec![T::default(); v.len()];
            for (pos, &row) in order.iter().enumerate() {
                out[row as usize] = v[pos];
            }
            out
        }
        Columns {
            ret: scatter(self.ret, order),
            advantage: scatter(self.advantage, order),
            weight: scatter(self.weight, order),
            reason: scatter(self.reason, order),
        }
    }
}

/// Row indices sorted by `(prompt, sample, turn)`. Sorts compact keys rather than indices into
/// `rows`, which would chase a cache miss per comparison.
fn sort_order<S: TurnSource + ?Sized>(rows: &S) -> Vec<u32> {
    let mut keys: Vec<(u64, u64, u32)> = (0..rows.rows())
        .map(|i| {
            let (prompt, sample, turn) = rows.key(i);
            (
                prompt,
                (u64::from(sample) << 32) | u64::from(turn),
                i as u32,
            )
        })
        .collect();
    keys.sort_unstable();
    keys.into_iter().map(|k| k.2).collect()
}

/// Prompts contiguous and never revisited, samples ascending within a prompt, turns 0, 1, ...
fn is_grouped<S: TurnSource + ?Sized>(rows: &S) -> bool {
    let mut seen: std::collections::HashSet<u64, KeyHashState> =
        std::collections::HashSet::default();
    let mut prev: Option<(u64, u32, u32)> = None;
    for i in 0..rows.rows() {
        let (prompt, sample, turn) = rows.key(i);
        let ok = match prev {
            Some((p_prompt, p_sample, p_turn)) if p_prompt == prompt => {
                (p_sample == sample && turn == p_turn + 1) || (p_sample < sample && turn == 0)
            }
            _ => turn == 0 && seen.insert(prompt),
        };
        if !ok {
            return false;
        }
        prev = Some((prompt, sample, turn));
    }
    true
}

/// Hashes prompt keys with one multiply and rotate (Fx-style): the set of prompts seen is
/// consulted once per prompt, and SipHash was a visible share of a million-row batch. Keys may be
/// small integers (NumPy callers pass their own), so the high bits get mixed too.
#[derive(Default)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }
    fn write_u64(&mut self, k: u64) {
        self.0 = (self.0.rotate_left(5) ^ k).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type KeyHashState = std::hash::BuildHasherDefault<KeyHasher>;

/// Buffers reused across prompts.
#[derive(Default)]
struct Scratch {
    /// `(start, end)` positions of each sample's turns within the block.
    trajs: Vec<(usize, usize)>,
    sum: Vec<f64>,
    count: Vec<u32>,
    sq: Vec<f64>,
    values: Vec<f64>,
}

/// One prompt's rows, contiguous: `len` rows of the batch from `start`.
struct Block<'a, S: ?Sized> {
    rows: &'a S,
    start: usize,
    len: usize,
    /// Input row of each position, when the input had to be sorted.
    order: Option<&'a [u32]>,
}

impl<S: TurnSource + ?Sized> Block<'_, S> {
    fn row(&self, pos: usize) -> TurnInput {
        self.rows.turn(self.start + pos)
    }

    fn key(&self, pos: usize) -> (u64, u32, u32) {
        self.rows.key(self.start + pos)
    }

    /// The input row index of position `pos`, for error messages.
    fn input_row(&self, pos: usize) -> usize {
        self.order.map_or(self.start + pos, |o| o[pos] as usize)
    }

    fn process(
        &self,
        cfg: &Config,
        s: &mut Scratch,
        ret: &mut [f64],
        reason: &mut [Option<Reason>],
        adv: &mut [f64],
    ) -> Result<()> {
        self.split_samples(&mut s.trajs)?;
        let mut max_turns = 0;
        for &(a, b) in &s.trajs {
            max_turns = max_turns.max(b - a);
            self.mask_and_return(cfg.gamma, a, b, ret, reason)?;
        }
        if let Some(g) = &cfg.group_filter {
            self.group_filter(g, &s.trajs, reason);
        }
        if let Some(m) = &cfg.mrs {
            self.mrs(m, &s.trajs, reason)?;
        }
        if let Some(p) = &cfg.prs {
            self.prs(p, cfg.seed, &s.trajs, reason);
        }
        let member = |r: Option<Reason>| match r {
            None => true,
            Some(x) => !x.is_mask() && cfg.rejected_in_baseline,
        };
        match cfg.estimator {
            Estimator::Trloo | Estimator::Grpo { .. } => {
                self.per_turn(cfg.estimator, max_turns, s, ret, reason, adv, member)
            }
            Estimator::Rloo => self.rloo(s, ret, reason, adv, member),
            Estimator::Kevin => kevin(ret, reason, adv, member),
        }
        Ok(())
    }

    /// Splits the block into samples and checks that turns run 0, 1, 2, ...
    fn split_samples(&self, trajs: &mut Vec<(usize, usize)>) -> Result<()> {
        trajs.clear();
        let n = self.len;
        let mut a = 0;
        while a < n {
            let sample = self.key(a).1;
            let mut b = a;
            while b < n && self.key(b).1 == sample {
                let (prompt, _, turn) = self.key(b);
                let want = (b - a) as u32;
                if turn != want {
                    let row = self.input_row(b);
                    let prompt = format!("{prompt:016x}");
                    // Sorted turns: a repeat shows up as a turn below the expected index.
                    return Err(if turn < want {
                        Error::DuplicateTurn {
                            row,
                            prompt,
                            sample,
                            turn,
                        }
                    } else {
                        Error::TurnGap {
                            row,
                            prompt,
                            sample,
                            turn,
                            missing: want,
                        }
                    });
                }
                b += 1;
            }
            trajs.push((a, b));
            a = b;
        }
        Ok(())
    }

    fn mask_and_return(
        &self,
        gamma: f64,
        a: usize,
        b: usize,
        ret: &mut [f64],
        reason: &mut [Option<Reason>],
    ) -> Result<()> {
        if (a..b).any(|p| self.row(p).errored) {
            reason[a..b].fill(Some(Reason::EpisodeError));
            return Ok(());
        }
        let mut solved = false;
        for (p, slot) in reason.iter_mut().enumerate().take(b).skip(a) {
            let r = self.row(p);
            if r.void && solved {
                *slot = Some(Reason::VoidAfterSuccess);
            } else if r.reward.is_nan() {
                return Err(Error::MissingReward {
                    row: self.input_row(p),
                });
            } else if r.reward.is_infinite() {
                return Err(Error::BadReward {
                    row: self.input_row(p),
                    value: r.reward,
                });
            }
            solved |= r.correct && !r.void;
        }
        let mut g = 0.0;
        for p in (a..b).rev() {
            if reason[p].is_some() {
                g *= gamma;
            } else {
                g = self.rows.reward(self.start + p) + gamma * g;
                ret[p] = g;
            }
        }
        Ok(())
    }

    /// The last unmasked turn of a sample, if the sample is not masked whole.
    fn last_live(&self, a: usize, b: usize, reason: &[Option<Reason>]) -> Option<usize> {
        (a..b).rev().find(|&p| reason[p].is_none())
    }

    fn reject(reason: &mut [Option<Reason>], a: usize, b: usize, why: Reason) {
        for slot in &mut reason[a..b] {
            if slot.is_none() {
                *slot = Some(why);
            }
        }
    }

    fn group_filter(
        &self,
        g: &GroupFilter,
        trajs: &[(usize, usize)],
        reason: &mut [Option<Reason>],
    ) {
        let mut n = 0usize;
        let mut all_truncated = true;
        let (mut sum, mut sum_sq) = (0.0, 0.0);
        let mut first = None;
        for &(a, b) in trajs {
            let Some(last) = self.last_live(a, b, reason) else {
                continue;
            };
            n += 1;
            all_truncated &= (a..b).any(|p| self.row(p).truncated);
            // Shifted by the first value so the variance does not cancel catastrophically.
            let x = self.row(last).reward - *first.get_or_insert(self.row(last).reward);
            sum += x;
            sum_sq += x * x;
        }
        if n == 0 {
            return;
        }
        let mean = sum / n as f64;
        let std = (sum_sq / n as f64 - mean * mean).max(0.0).sqrt();
        let why = if g.drop_all_truncated && all_truncated {
            Reason::GroupTruncated
        } else if std < g.min_std {
            Reason::GroupFlat
        } else {
            return;
        };
        Self::reject(reason, 0, reason.len(), why);
    }

    fn mrs(&self, m: &Mrs, trajs: &[(usize, usize)], reason: &mut [Option<Reason>]) -> Result<()> {
        for &(a, b) in trajs {
            let mut stats = LogRatio::default();
            let mut live = false;
            for (p, why) in reason.iter().enumerate().take(b).skip(a) {
                if why.is_some_and(Reason::is_mask) {
                    continue;
                }
                live = true;
                let r = self.row(p);
                let lr = r.log_ratio.ok_or(Error::MissingTrainLogprobs {
                    row: self.input_row(p),
                })?;
                stats = stats.merge(lr);
            }
            if live && !m.accepts(&stats) {
                Self::reject(reason, a, b, Reason::Mrs);
            }
        }
        Ok(())
    }

    fn prs(&self, prs: &Prs, seed: u64, trajs: &[(usize, usize)], reason: &mut [Option<Reason>]) {
        let keep_p = |r: &TurnInput| prs.keep_probability(r.correct && !r.void, r.coverage);
        for &(a, b) in trajs {
            match prs.mode {
                PrsMode::PerTurn => {
                    for (p, why) in reason.iter_mut().enumerate().take(b).skip(a) {
                        let r = self.row(p);
                        if why.is_some() {
                            continue;
                        }
                        let keep = keep_p(&r);
                        if keep < 1.0
                            && sampling::uniform(seed, Stream::PrsTurn, r.prompt, r.sample, r.turn)
                                >= keep
                        {
                            *why = Some(Reason::Prs);
                        }
                    }
                }
                PrsMode::PerTrajectory => {
                    // Geometric mean of the live turns' keep probabilities.
                    let (mut log_sum, mut k) = (0.0, 0usize);
                    for (p, why) in reason.iter().enumerate().take(b).skip(a) {
                        if why.is_none() {
                            log_sum += keep_p(&self.row(p)).ln();
                            k += 1;
                        }
                    }
                    if k == 0 {
                        continue;
                    }
                    let keep = (log_sum / k as f64).exp();
                    let r = self.row(a);
                    if keep < 1.0
                        && sampling::uniform(seed, Stream::PrsTrajectory, r.prompt, r.sample, 0)
                            >= keep
                    {
                        Self::reject(reason, a, b, Reason::Prs);
                    }
                }
            }
        }
    }

    /// GRPO and TRLOO: groups are the block's turns with the same index.
    #[allow(clippy::too_many_arguments)]
    fn per_turn(
        &self,
        est: Estimator,
        max_turns: usize,
        s: &mut Scratch,
        ret: &[f64],
        reason: &[Option<Reason>],
        adv: &mut [f64],
        member: impl Fn(Option<Reason>) -> bool,
    ) {
        s.sum.clear();
        s.sum.resize(max_turns, 0.0);
        s.count.clear();
        s.count.resize(max_turns, 0);
        for &(a, b) in &s.trajs {
            for p in a..b {
                if member(reason[p]) {
                    s.sum[p - a] += ret[p];
                    s.count[p - a] += 1;
                }
            }
        }
        let normalize = matches!(
            est,
            Estimator::Grpo {
                normalize_std: true
            }
        );
        if normalize {
            s.sq.clear();
            s.sq.resize(max_turns, 0.0);
            for &(a, b) in &s.trajs {
                for p in a..b {
                    if member(reason[p]) {
                        let t = p - a;
                        let d = ret[p] - s.sum[t] / f64::from(s.count[t]);
                        s.sq[t] += d * d;
                    }
                }
            }
        }
        for &(a, b) in &s.trajs {
            for p in a..b {
                if !member(reason[p]) {
                    continue;
                }
                let t = p - a;
                let (g, sum, c) = (ret[p], s.sum[t], f64::from(s.count[t]));
                adv[p] = match est {
                    Estimator::Trloo if s.count[t] == 1 => g,
                    Estimator::Trloo => g - (sum - g) / (c - 1.0),
                    _ if normalize => (g - sum / c) / ((s.sq[t] / c).sqrt() + STD_EPS),
                    _ => g - sum / c,
                };
            }
        }
    }

    /// Trajectory-level leave-one-out on each sample's return from turn 0.
    fn rloo(
        &self,
        s: &mut Scratch,
        ret: &[f64],
        reason: &[Option<Reason>],
        adv: &mut [f64],
        member: impl Fn(Option<Reason>) -> bool,
    ) {
        // A sample is in the baseline if any of its turns is.
        s.values.clear();
        for &(a, b) in &s.trajs {
            let in_baseline = (a..b).any(|p| member(reason[p]));
            s.values.push(if in_baseline { ret[a] } else { f64::NAN });
        }
        let live = s.values.iter().filter(|v| !v.is_nan());
        let (sum, c) = live.fold((0.0, 0usize), |(s, c), v| (s + v, c + 1));
        for (&(a, b), &v) in s.trajs.iter().zip(&s.values) {
            if v.is_nan() {
                continue;
            }
            let a_traj = if c == 1 {
                v
            } else {
                v - (sum - v) / (c - 1) as f64
            };
            for p in a..b {
                if member(reason[p]) {
                    adv[p] = a_traj;
                }
            }
        }
    }
}

/// Kevin-style: every member turn of the prompt in one pool, mean/std normalized.
fn kevin(
    ret: &[f64],
    reason: &[Option<Reason>],
    adv: &mut [f64],
    member: impl Fn(Option<Reason>) -> bool,
) {
    let members = || (0..ret.len()).filter(|&p| member(reason[p]));
    let c = members().count();
    if c == 0 {
        return;
    }
    let mean = members().map(|p| ret[p]).sum::<f64>() / c as f64;
    let var = members().map(|p| (ret[p] - mean).powi(2)).sum::<f64>() / c as f64;
    let scale = var.sqrt() + STD_EPS;
    for p in members() {
        adv[p] = (ret[p] - mean) / scale;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(prompt: u64, sample: u32, turn: u32, reward: f64) -> TurnInput {
        TurnInput {
            prompt,
            sample,
            turn,
            reward,
            correct: reward > 0.0,
            coverage: None,
            void: false,
            errored: false,
            truncated: false,
            log_ratio: None,
        }
    }

    fn run(rows: &[TurnInput], cfg: &Config) -> Vec<TurnOutput> {
        compute(rows, cfg).unwrap().0
    }

    fn advs(out: &[TurnOutput]) -> Vec<Option<f64>> {
        out.iter().map(|o| o.advantage).collect()
    }

    fn assert_close(got: &[Option<f64>], want: &[Option<f64>]) {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            match (g, w) {
                (Some(g), Some(w)) => assert!((g - w).abs() < 1e-9, "row {i}: {g} vs {w}"),
                _ => assert_eq!(g, w, "row {i}"),
            }
        }
    }

    /// Prompt 1: three single-turn samples with rewards 1, 2, 6.
    fn single_turn() -> Vec<TurnInput> {
        vec![turn(1, 0, 0, 1.0), turn(1, 1, 0, 2.0), turn(1, 2, 0, 6.0)]
    }

    #[test]
    fn trloo_single_turn_hand_computed() {
        // A_i = r_i − mean(others): 1 − 4, 2 − 3.5, 6 − 1.5.
        let out = run(&single_turn(), &Config::new(Estimator::Trloo));
        assert_close(&advs(&out), &[Some(-3.0), Some(-1.5), Some(4.5)]);
        assert!(out.iter().all(|o| o.weight == 1.0));
    }

    #[test]
    fn grpo_hand_computed() {
        // mean 3; deviations −2, −1, 3; population std sqrt(14/3).
        let plain = Config::new(Estimator::Grpo {
            normalize_std: false,
        });
        assert_close(
            &advs(&run(&single_turn(), &plain)),
            &[Some(-2.0), Some(-1.0), Some(3.0)],
        );
        let sd = (14.0f64 / 3.0).sqrt() + STD_EPS;
        let out = run(
            &single_turn(),
            &Config::new(Estimator::Grpo {
                normalize_std: true,
            }),
        );
        assert_close(
            &advs(&out),
            &[Some(-2.0 / sd), Some(-1.0 / sd), Some(3.0 / sd)],
        );
        // GRPO (self-included) = (N−1)/N · TRLOO.
        let trloo = run(&single_turn(), &Config::new(Estimator::Trloo));
        for (g, t) in run(&single_turn(), &plain).iter().zip(&trloo) {
            assert!((g.advantage.unwrap() - 2.0 / 3.0 * t.advantage.unwrap()).abs() < 1e-12);
        }
    }

    #[test]
    fn trloo_multi_turn_returns_and_groups() {
        // Sample 0: rewards 1, 2 → G = 3, 2. Sample 1: rewards 0, 4 → G = 4, 4.
        // Sample 2: one turn, reward 5 → G = 5.
        // Turn 0 group {3, 4, 5}: A = 3 − 4.5, 4 − 4, 5 − 3.5. Turn 1 group {2, 4}: A = −2, 2.
        let rows = vec![
            turn(9, 0, 0, 1.0),
            turn(9, 0, 1, 2.0),
            turn(9, 1, 0, 0.0),
            turn(9, 1, 1, 4.0),
            turn(9, 2, 0, 5.0),
        ];
        let out = run(&rows, &Config::new(Estimator::Trloo));
        let rets: Vec<_> = out.iter().map(|o| o.ret.unwrap()).collect();
        assert_eq!(rets, vec![3.0, 2.0, 4.0, 4.0, 5.0]);
        assert_close(
            &advs(&out),
            &[Some(-1.5), Some(-2.0), Some(0.0), Some(2.0), Some(1.5)],
        );
        // A lone member keeps its return: one sample with turns 0, 1.
        let lone = run(&rows[..2], &Config::new(Estimator::Trloo));
        assert_close(&advs(&lone), &[Some(3.0), Some(2.0)]);
    }

    #[test]
    fn gamma_discounts_returns() {
        // Kevin γ = 0.4: rewards 1, 0, 1 → G_2 = 1, G_1 = 0.4, G_0 = 1 + 0.16.
        let rows = vec![turn(3, 0, 0, 1.0), turn(3, 0, 1, 0.0), turn(3, 0, 2, 1.0)];
        let out = run(&rows, &Config::new(Estimator::Kevin));
        let rets: Vec<_> = out.iter().map(|o| o.ret.unwrap()).collect();
        assert_close(
            &rets.iter().map(|r| Some(*r)).collect::<Vec<_>>(),
            &[Some(1.16), Some(0.4), Some(1.0)],
        );
        // Pooled over all three turns: mean 0.852, population std.
        let mean = (1.16 + 0.4 + 1.0) / 3.0;
        let var =
            ((1.16f64 - mean).powi(2) + (0.4f64 - mean).powi(2) + (1.0f64 - mean).powi(2)) / 3.0;
        let sd = var.sqrt() + STD_EPS;
        assert_close(
            &advs(&out),
            &[
                Some((1.16 - mean) / sd),
                Some((0.4 - mean) / sd),
                Some((1.0 - mean) / sd),
            ],
        );
    }

    #[test]
    fn rloo_is_trajectory_level() {
        // Values G_0: sample 0 = 1 + 2 = 3, sample 1 = 5. A = 3 − 5, 5 − 3 on every turn.
        let rows = vec![turn(4, 0, 0, 1.0), turn(4, 0, 1, 2.0), turn(4, 1, 0, 5.0)];
        let out = run(&rows, &Config::new(Estimator::Rloo));
        assert_close(&advs(&out), &[Some(-2.0), Some(-2.0), Some(2.0)]);
    }

    #[test]
    fn masks_void_after_success_and_errored_episodes() {
        let mut rows = vec![
            // Sample 0: correct, then void (masked), then void (masked).
            turn(5, 0, 0, 1.0),
            turn(5, 0, 1, 0.0),
            turn(5, 0, 2, 0.0),
            // Sample 1: void first (no earlier success: kept, reward 0), then correct.
            turn(5, 1, 0, 0.0),
            turn(5, 1, 1, 1.0),
            // Sample 2: errored on turn 1 → masked whole.
            turn(5, 2, 0, 7.0),
            turn(5, 2, 1, 7.0),
        ];
        rows[1].void = true;
        rows[2].void = true;
        rows[3].void = true;
        rows[6].errored = true;
        let (out, summary) = compute(&rows, &Config::new(Estimator::Trloo)).unwrap();
        let reasons: Vec<_> = out.iter().map(|o| o.reason).collect();
        use Reason::*;
        assert_eq!(
            reasons,
            vec![
                None,
                Some(VoidAfterSuccess),
                Some(VoidAfterSuccess),
                None,
                None,
                Some(EpisodeError),
                Some(EpisodeError),
            ]
        );
        // Turn 0 group {G=1, G=1} (sample 1: 0 + 1); turn 1 group {1} alone.
        assert_close(
            &advs(&out),
            &[Some(0.0), None, None, Some(0.0), Some(1.0), None, None],
        );
        assert_eq!(out[5].ret, None);
        assert_eq!((summary.kept, summary.masked, summary.rejected), (3, 4, 0));
        assert_eq!(summary.count(EpisodeError), 2);
    }

    #[test]
    fn rejected_turns_stay_in_baselines_by_option() {
        // Sample 2 is correct with coverage 0 → PRS keep probability 0 → always rejected.
        let mut rows = single_turn();
        rows[2].coverage = Some(0.0);
        let mut cfg = Config::new(Estimator::Trloo);
        cfg.prs = Some(Prs::default());
        let out = run(&rows, &cfg);
        assert_eq!(out[2].reason, Some(Reason::Prs));
        assert_eq!(out[2].weight, 0.0);
        // Kept in the baseline: same advantages as without PRS.
        assert_close(&advs(&out), &[Some(-3.0), Some(-1.5), Some(4.5)]);
        cfg.rejected_in_baseline = false;
        let out = run(&rows, &cfg);
        assert_close(&advs(&out), &[Some(-1.0), Some(1.0), None]);
    }

    #[test]
    fn prs_is_seeded_and_matches_its_probability() {
        // 20 000 correct samples at coverage 0.35 → p_keep = 0.5.
        let rows: Vec<_> = (0..20_000)
            .map(|i| TurnInput {
                coverage: Some(0.35),
                ..turn(11, i, 0, 1.0)
            })
            .collect();
        let mut cfg = Config::new(Estimator::Trloo);
        cfg.prs = Some(Prs::default());
        cfg.seed = 42;
        let (a, sa) = compute(&rows, &cfg).unwrap();
        let (b, _) = compute(&rows, &cfg).unwrap();
        assert_eq!(a, b);
        // Binomial(20000, 0.5): sd ≈ 71; 5 sd bound.
        let kept = sa.kept as f64;
        assert!((kept - 10_000.0).abs() < 5.0 * 71.0, "{kept}");
        // Order does not change decisions.
        let mut rev = rows.clone();
        rev.reverse();
        let (c, _) = compute(&rev, &cfg).unwrap();
        for (i, o) in c.iter().enumerate() {
            assert_eq!(o.reason, a[rows.len() - 1 - i].reason);
        }
    }

    #[test]
    fn prs_per_trajectory_uses_geometric_mean() {
        // Two turns with p = 1 and p = 0 → geometric mean 0 → trajectory rejected whole.
        let mut rows = vec![turn(12, 0, 0, 0.0), turn(12, 0, 1, 1.0)];
        rows[1].coverage = Some(0.1);
        let mut cfg = Config::new(Estimator::Trloo);
        cfg.prs = Some(Prs {
            mode: PrsMode::PerTrajectory,
            ..Prs::default()
        });
        let out = run(&rows, &cfg);
        assert!(out.iter().all(|o| o.reason == Some(Reason::Prs)));
        // Per turn, only the lazy turn goes.
        cfg.prs = Some(Prs::default());
        let out = run(&rows, &cfg);
        assert_eq!(out[0].reason, None);
        assert_eq!(out[1].reason, Some(Reason::Prs));
    }

    #[test]
    fn mrs_rejects_whole_trajectories_and_needs_logprobs() {
        let mut rows = single_turn();
        for r in &mut rows {
            r.log_ratio = Some(LogRatio::from_logprobs(&[-1.0], &[-1.0]));
        }
        rows[1].log_ratio = Some(LogRatio::from_logprobs(&[-1.0], &[-1.01]));
        let mut cfg = Config::new(Estimator::Trloo);
        cfg.mrs = Some(Mrs::default());
        let out = run(&rows, &cfg);
        assert_eq!(
            out.iter().map(|o| o.reason).collect::<Vec<_>>(),
            vec![None, Some(Reason::Mrs), None]
        );
        rows[0].log_ratio = None;
        assert!(matches!(
            compute(&rows, &cfg),
            Err(Error::MissingTrainLogprobs { row: 0 })
        ));
    }

    #[test]
    fn group_filter_drops_flat_and_truncated_groups() {
        let mut cfg = Config::new(Estimator::Trloo);
        cfg.group_filter = Some(GroupFilter::default());
        // Flat: last-turn rewards 1, 1 (first turns differ, which does not matter).
        let flat = vec![
            turn(1, 0, 0, 0.0),
            turn(1, 0, 1, 1.0),
            turn(1, 1, 0, 1.0),
            turn(2, 0, 0, 1.0),
            turn(2, 1, 0, 0.5),
        ];
        let (out, s) = compute(&flat, &cfg).unwrap();
        assert!(out[..3].iter().all(|o| o.reason == Some(Reason::GroupFlat)));
        assert!(out[3..].iter().all(|o| o.reason.is_none()));
        assert_eq!(s.count(Reason::GroupFlat), 3);
        // All truncated.
        let mut trunc = flat[3..].to_vec();
        trunc.iter_mut().for_each(|r| r.truncated = true);
        let out = run(&trunc, &cfg);
        assert!(out.iter().all(|o| o.reason == Some(Reason::GroupTruncated)));
    }

    #[test]
    fn any_row_order_gives_the_same_answer() {
        let rows = vec![
            turn(9, 0, 0, 1.0),
            turn(9, 0, 1, 2.0),
            turn(8, 0, 0, 3.0),
            turn(9, 1, 0, 0.0),
            turn(9, 1, 1, 4.0),
            turn(8, 1, 0, 1.0),
        ];
        let cfg = Config::new(Estimator::Trloo);
        let out = run(&rows, &cfg);
        let mut perm: Vec<usize> = (0..rows.len()).collect();
        perm.reverse();
        perm.swap(0, 3);
        let shuffled: Vec<_> = perm.iter().map(|&i| rows[i]).collect();
        let out2 = run(&shuffled, &cfg);
        for (k, &i) in perm.iter().enumerate() {
            assert_eq!(out2[k], out[i]);
        }
    }

    /// A columnar source (rows built on read) answers as the same rows in a slice, on grouped
    /// and on shuffled input, and names the same bad layout.
    #[test]
    fn a_columnar_source_answers_like_rows() {
        struct Cols(Vec<u64>, Vec<u32>, Vec<u32>, Vec<f64>);
        impl TurnSource for Cols {
            fn rows(&self) -> usize {
                self.0.len()
            }
            fn turn(&self, i: usize) -> TurnInput {
                turn(self.0[i], self.1[i], self.2[i], self.3[i])
            }
            fn key(&self, i: usize) -> (u64, u32, u32) {
                (self.0[i], self.1[i], self.2[i])
            }
        }
        let cols = |rows: &[TurnInput]| {
            Cols(
                rows.iter().map(|r| r.prompt).collect(),
                rows.iter().map(|r| r.sample).collect(),
                rows.iter().map(|r| r.turn).collect(),
                rows.iter().map(|r| r.reward).collect(),
            )
        };
        let grouped = vec![
            turn(9, 0, 0, 1.0),
            turn(9, 0, 1, 2.0),
            turn(9, 1, 0, 0.0),
            turn(8, 0, 0, 3.0),
            turn(8, 1, 0, 0.5),
        ];
        let shuffled = vec![grouped[3], grouped[1], grouped[4], grouped[0], grouped[2]];
        for est in [Estimator::Trloo, Estimator::Rloo, Estimator::Kevin] {
            let cfg = Config::new(est);
            for rows in [&grouped, &shuffled] {
                let want = compute_columns(rows.as_slice(), &cfg).unwrap();
                let got = compute_columns(&cols(rows), &cfg).unwrap();
                assert_eq!(got.1, want.1);
                assert_eq!(got.0.reason, want.0.reason);
                assert_eq!(got.0.weight, want.0.weight);
                for (a, b) in got.0.advantage.iter().zip(&want.0.advantage) {
                    assert!(a == b || (a.is_nan() && b.is_nan()), "{a} vs {b}");
                }
            }
        }
        let dup = cols(&[turn(1, 0, 0, 1.0), turn(1, 0, 0, 1.0)]);
        assert!(matches!(
            compute_columns(&dup, &Config::new(Estimator::Trloo)),
            Err(Error::DuplicateTurn { .. })
        ));
    }

    #[test]
    fn bad_layouts_are_named() {
        let cfg = Config::new(Estimator::Trloo);
        let dup = vec![turn(1, 0, 0, 1.0), turn(1, 0, 0, 1.0)];
        assert!(matches!(
            compute(&dup, &cfg),
            Err(Error::DuplicateTurn { .. })
        ));
        let gap = vec![turn(1, 0, 0, 1.0), turn(1, 0, 2, 1.0)];
        assert!(matches!(
            compute(&gap, &cfg),
            Err(Error::TurnGap {
                row: 1,
                missing: 1,
                ..
            })
        ));
        let nan = vec![turn(1, 0, 0, f64::NAN)];
        assert!(matches!(
            compute(&nan, &cfg),
            Err(Error::MissingReward { row: 0 })
        ));
        let inf = vec![turn(1, 0, 0, f64::INFINITY)];
        assert!(matches!(
            compute(&inf, &cfg),
            Err(Error::BadReward { row: 0, .. })
        ));
        let mut bad_gamma = cfg.clone();
        bad_gamma.gamma = 1.5;
        assert!(compute(&dup, &bad_gamma).is_err());
        assert!(compute(&[], &cfg).unwrap().0.is_empty());
    }
}
