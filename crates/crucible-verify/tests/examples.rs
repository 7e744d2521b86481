//! Every honest example solution of the repository passes the verifier under `strict`.

use std::path::Path;

use crucible_result::Severity;
use crucible_verify::{Policy, verify};

#[test]
fn example_solutions_get_no_reject_or_flag() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let policy = Policy::default();
    let mut checked = 0;
    let mut failures = Vec::new();
    for dir in ["solutions", "kernelbench/level1"] {
        let dir = examples.join(dir);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<_> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "py"))
            .collect();
        files.sort();
        for file in files {
            let source = std::fs::read_to_string(&file).unwrap();
            let report = verify(&source, &policy);
            checked += 1;
            for f in report
                .findings
                .iter()
                .filter(|f| f.severity >= Severity::Flag)
            {
                failures.push(format!(
                    "{}:{}:{}: {} {}",
                    file.display(),
                    f.line.unwrap_or(0),
                    f.column.unwrap_or(0),
                    f.code,
                    f.message
                ));
            }
        }
    }
    eprintln!("checked {checked} example solution(s)");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
