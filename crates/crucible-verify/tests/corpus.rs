//! The corpus: honest solutions get no `reject` or `flag` under any preset, and every hack is
//! caught with the codes its `# expect:` line names.

use std::path::{Path, PathBuf};

use crucible_result::Severity;
use crucible_verify::{PRESETS, Policy, RULES, verify};

fn python_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "py"))
        .collect();
    files.sort();
    files
}

fn corpus(kind: &str) -> Vec<PathBuf> {
    python_files(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/corpus")
            .join(kind),
    )
}

#[test]
fn honest_solutions_get_no_reject_or_flag_under_any_preset() {
    let files = corpus("honest");
    assert!(
        files.len() >= 30,
        "the honest corpus has {} files",
        files.len()
    );
    for preset in PRESETS {
        let policy = Policy::preset(preset).unwrap();
        for file in &files {
            let source = std::fs::read_to_string(file).unwrap();
            let report = verify(&source, &policy);
            let bad: Vec<_> = report
                .findings
                .iter()
                .filter(|f| f.severity >= Severity::Flag)
                .collect();
            assert!(
                bad.is_empty(),
                "{} under {preset}: {bad:#?}",
                file.display()
            );
        }
    }
}

/// The codes listed on the file's `# expect:` line.
fn expected_codes(source: &str) -> Vec<String> {
    source
        .lines()
        .find_map(|l| l.strip_prefix("# expect:"))
        .map(|codes| codes.split(',').map(|c| c.trim().to_string()).collect())
        .unwrap_or_default()
}

#[test]
fn every_hack_is_caught_with_its_expected_codes() {
    let strict = Policy::default();
    let files = corpus("hacks");
    assert!(
        files.len() >= 20,
        "the hack corpus has {} files",
        files.len()
    );
    let mut covered: Vec<String> = Vec::new();
    for file in &files {
        let source = std::fs::read_to_string(file).unwrap();
        let expected = expected_codes(&source);
        assert!(
            !expected.is_empty(),
            "{} has no `# expect:` line",
            file.display()
        );
        let report = verify(&source, &strict);
        assert!(report.flagged(), "{} passed: {report:#?}", file.display());
        for code in expected {
            let hit = report
                .findings
                .iter()
                .any(|f| f.code == code && f.severity >= Severity::Flag);
            assert!(
                hit,
                "{}: no `{code}` finding in {:#?}",
                file.display(),
                report.findings
            );
            covered.push(code);
        }
    }
    // Every rule that reports at flag or above under strict has a hack that triggers it.
    for rule in RULES {
        let info = &rule.info;
        if info.strict >= crucible_verify::Level::Flag {
            assert!(
                covered.iter().any(|c| c == info.code),
                "no hack in the corpus triggers `{}`",
                info.code
            );
        }
    }
}
