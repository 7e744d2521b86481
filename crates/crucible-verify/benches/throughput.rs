//! Candidates per second on one core, over the corpus and the repository's example solutions.
//!
//! `cargo bench -p crucible-verify --bench throughput [-- DIR...]`. The baseline is Ruff's parser alone,
//! measured in the same run, so the ratio shows what the analysis adds on top of parsing.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crucible_verify::{Policy, verify};

// The allocator of the `crucible` binary, so the figure is what the judge gets.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn sources() -> Vec<(PathBuf, String)> {
    // Folders given on the command line replace the defaults (`cargo bench` adds `--bench`).
    let args: Vec<PathBuf> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .map(PathBuf::from)
        .collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dirs = if args.is_empty() {
        vec![
            root.join("tests/corpus/honest"),
            root.join("tests/corpus/hacks"),
            root.join("../../examples/solutions"),
            root.join("../../examples/kernelbench/level1"),
        ]
    } else {
        args
    };
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "py")
                && let Ok(text) = std::fs::read_to_string(&path)
            {
                out.push((path, text));
            }
        }
    }
    out.sort();
    out
}

/// Runs `f` over every source until `budget` has passed; returns (candidates/s, bytes/s).
fn measure(sources: &[&str], budget: Duration, mut f: impl FnMut(&str)) -> (f64, f64) {
    // Warm up caches and the allocator.
    for s in sources {
        f(s);
    }
    let bytes: usize = sources.iter().map(|s| s.len()).sum();
    let start = Instant::now();
    let mut rounds = 0u64;
    while start.elapsed() < budget {
        for s in sources {
            f(s);
        }
        rounds += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let n = rounds as f64 * sources.len() as f64;
    (n / secs, rounds as f64 * bytes as f64 / secs)
}

fn report(label: &str, sources: &[&str], policy: &Policy) {
    if sources.is_empty() {
        return;
    }
    let budget = Duration::from_millis(1500);
    let mean_kb =
        sources.iter().map(|s| s.len()).sum::<usize>() as f64 / sources.len() as f64 / 1024.0;
    let (parse_cps, parse_bps) = measure(sources, budget, |s| {
        let _ = black_box(ruff_python_parser::parse_module(black_box(s)));
    });
    let (verify_cps, verify_bps) = measure(sources, budget, |s| {
        black_box(verify(black_box(s), policy));
    });
    println!(
        "{label}: {} files, mean {mean_kb:.1} KB\n  parse only (baseline): {parse_cps:>9.0} candidates/s  {:>6.1} MB/s  {:>6.1} us/candidate\n  verify (strict):       {verify_cps:>9.0} candidates/s  {:>6.1} MB/s  {:>6.1} us/candidate\n  verify / parse throughput ratio: {:.2} (analysis adds {:.0}% to parsing)",
        sources.len(),
        parse_bps / 1e6,
        1e6 / parse_cps,
        verify_bps / 1e6,
        1e6 / verify_cps,
        verify_cps / parse_cps,
        (parse_cps / verify_cps - 1.0) * 100.0,
    );
}

fn main() {
    let all = sources();
    let policy = Policy::default();
    println!("crucible-verify throughput, one thread");
    let every: Vec<&str> = all.iter().map(|(_, s)| s.as_str()).collect();
    report("all corpus and example files", &every, &policy);
    let typical: Vec<&str> = every
        .iter()
        .copied()
        .filter(|s| (3 * 1024..=8 * 1024).contains(&s.len()))
        .collect();
    report("typical candidates (3-8 KB)", &typical, &policy);
}
