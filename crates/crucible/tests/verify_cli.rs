//! `crucible verify` through the real binary: exit codes, JSON, and clear errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn verify(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_crucible"))
        .current_dir(repo())
        .arg("verify")
        .args(args)
        .output()
        .expect("run crucible")
}

const HACK: &str = "crates/crucible-verify/tests/corpus/hacks/01_torch_matmul_in_forward.py";

#[test]
fn honest_file_passes_and_exits_zero() {
    let out = verify(&["examples/solutions/09_matmul.py"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn hack_is_rejected_with_a_position_and_exits_one() {
    let out = verify(&[HACK]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(":20:16: reject torch-compute-in-forward"),
        "{stdout}"
    );
}

#[test]
fn json_lists_findings_per_file() {
    let out = verify(&["--json", "examples/solutions/01_relu.py", HACK]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report[0]["rejected"], false);
    assert_eq!(report[1]["rejected"], true);
    let codes: Vec<&str> = report[1]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["code"].as_str())
        .collect();
    assert!(codes.contains(&"torch-compute-in-forward"), "{codes:?}");
}

#[test]
fn lenient_policy_only_flags_torch_compute() {
    let out = verify(&["--json", "--policy", "lenient", HACK]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let torch = report[0]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["code"] == "torch-compute-in-forward")
        .cloned()
        .expect("finding");
    assert_eq!(torch["severity"], "flag");
}

#[test]
fn unknown_policy_and_missing_file_are_clear_errors() {
    let out = verify(&["--policy", "paranoid", HACK]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("paranoid"));
    let out = verify(&["no/such/candidate.py"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no/such/candidate.py"));
}
