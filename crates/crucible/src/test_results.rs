//! Result documents for the subcommands' unit tests.

use crucible_result::{EvalResult, Verdict};

/// A result document with this verdict, these stages (name, seconds, status) and a wall time of
/// 10 s, on `cuda:0`; everything else empty.
pub fn result_with_stages(verdict: Verdict, stages: &[(&str, f64, &str)]) -> EvalResult {
    let stages = stages
        .iter()
        .map(|(name, s, status)| {
            format!(r#"{{"name":"{name}","status":"{status}","duration_s":{s}}}"#)
        })
        .collect::<Vec<_>>()
        .join(",");
    let (verdict, correct) = (verdict.as_str(), verdict == Verdict::Correct);
    let document = format!(
        r#"{{"schema":"crucible.result/1","verdict":"{verdict}","correct":{correct},
        "speedup":null,"timing":null,"coverage":null,"findings":[],"stages":[{stages}],
        "seeds":{{"base":1,"init":2,"trials":[3],"timing":4}},
        "tolerance":{{"profile":"kb-v0","atol":0.01,"rtol":0.01}},"size_profile":"full",
        "trials":[],"launches":[],
        "task":{{"name":"t","path":"t.py","sha256":"0"}},
        "candidate":{{"name":"c","path":"c.py","sha256":"0"}},
        "env":{{"device":"cuda:0","device_name":null,"torch":null,"triton":null,
        "cuda":null,"driver":null,"python":null,"crucible":"0","triton_interpret":false}},
        "wall_s":10.0}}"#
    );
    serde_json::from_str(&document).expect("result")
}
