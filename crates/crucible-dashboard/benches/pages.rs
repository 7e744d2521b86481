//! How long the dashboard's pages take with 10,000 finished evaluations in the store (real
//! result documents, a real SQLite file, a real socket). Goal: a page of 10,000 evaluations in
//! under a second. Run: `cargo bench -p crucible-dashboard --bench pages`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Instant;

use crucible_queue::Store;

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("q.db").display());
    let store = Arc::new(Store::open(&url).expect("store"));
    let started = Instant::now();
    let ids = common::populate(&store, 3334);
    println!(
        "stored {} finished evaluations in {:.1} s",
        ids.len(),
        started.elapsed().as_secs_f64()
    );
    let one = ids[0].1.clone();
    let (addr, _rt) = common::serve(store, None);
    println!(
        "{:<34} {:>9} {:>9} {:>10}",
        "page", "best ms", "median ms", "bytes"
    );
    for path in [
        "/evaluations?limit=10000".to_string(),
        "/".into(),
        "/tasks".into(),
        "/tasks/01_relu".into(),
        "/integrity".into(),
        format!("/evaluations/{one}"),
    ] {
        let mut times = Vec::new();
        let mut bytes = 0;
        for _ in 0..5 {
            let t = Instant::now();
            let (status, body) = common::get(addr, &path, &[]);
            times.push(t.elapsed().as_secs_f64() * 1e3);
            assert_eq!(status, 200, "{path}");
            bytes = body.len();
        }
        times.sort_by(f64::total_cmp);
        println!("{path:<34} {:>9.1} {:>9.1} {bytes:>10}", times[0], times[2]);
    }
}
