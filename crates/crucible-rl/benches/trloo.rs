//! TRLOO + per-turn PRS over 1M turn rows, against a baseline measured in the same run (one pass
//! summing rewards), so the ratio means something on any machine. Goal: under 1 s on one core.
//!
//! Run: `cargo bench -p crucible-rl --bench trloo`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use crucible_rl::advantage::{Config, Estimator, TurnInput, compute};
use crucible_rl::sampling::{Prs, prompt_key};

const PROMPTS: u32 = 31_250;
const SAMPLES: u32 = 8;
const TURNS: u32 = 4;
const REPEATS: usize = 5;

/// Deterministic pseudo-random numbers in [0, 1) (SplitMix64).
fn unit(state: &mut u64) -> f64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
}

fn rows() -> Vec<TurnInput> {
    let mut s = 42;
    let mut out = Vec::with_capacity((PROMPTS * SAMPLES * TURNS) as usize);
    for p in 0..PROMPTS {
        let prompt = prompt_key(&format!("level2/task-{p}"));
        for sample in 0..SAMPLES {
            for turn in 0..TURNS {
                let correct = unit(&mut s) < 0.5;
                out.push(TurnInput {
                    prompt,
                    sample,
                    turn,
                    reward: if correct {
                        0.5 + 2.0 * unit(&mut s)
                    } else {
                        0.0
                    },
                    correct,
                    coverage: Some(unit(&mut s)),
                    void: false,
                    errored: false,
                    truncated: false,
                    log_ratio: None,
                });
            }
        }
    }
    out
}

/// Median wall time of `REPEATS` runs.
fn time<T>(mut f: impl FnMut() -> T) -> Duration {
    let mut times: Vec<Duration> = (0..REPEATS)
        .map(|_| {
            let t = Instant::now();
            black_box(f());
            t.elapsed()
        })
        .collect();
    times.sort();
    times[REPEATS / 2]
}

fn main() {
    let rows = rows();
    let mut cfg = Config::new(Estimator::Trloo);
    cfg.prs = Some(Prs::default());
    cfg.seed = 7;

    let baseline = time(|| black_box(&rows).iter().map(|r| r.reward).sum::<f64>());
    let grouped = time(|| compute(black_box(&rows), &cfg).map(|(_, s)| s.kept));

    // Same rows in a scrambled order: exercises the sort path.
    let mut shuffled = rows.clone();
    let mut s = 9;
    for i in (1..shuffled.len()).rev() {
        let j = (unit(&mut s) * (i + 1) as f64) as usize;
        shuffled.swap(i, j);
    }
    let scrambled = time(|| compute(black_box(&shuffled), &cfg).map(|(_, s)| s.kept));

    let (_, summary) = compute(&rows, &cfg).expect("valid batch");
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("rows: {} ({summary})", rows.len());
    println!("baseline (sum of rewards):  {:9.2} ms", ms(baseline));
    println!(
        "trloo + prs (grouped rows): {:9.2} ms  = {:.0}x baseline",
        ms(grouped),
        grouped.as_secs_f64() / baseline.as_secs_f64()
    );
    println!(
        "trloo + prs (shuffled rows):{:9.2} ms  = {:.0}x baseline",
        ms(scrambled),
        scrambled.as_secs_f64() / baseline.as_secs_f64()
    );
    println!(
        "goal < 1000 ms on one core: {}",
        if grouped.max(scrambled) < Duration::from_secs(1) {
            "met"
        } else {
            "MISSED"
        }
    );
}
