//! `docs/verifier-rules.md` is generated from the rules; this test keeps the two equal.

use std::path::Path;

use crucible_verify::{RULES, rules_markdown};

#[test]
fn rule_reference_matches_the_code() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/verifier-rules.md");
    let generated = rules_markdown();
    if std::env::var_os("CRUCIBLE_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "docs/verifier-rules.md is out of date; regenerate it with \
         `crucible verify --list-rules > docs/verifier-rules.md` (or run this test with \
         CRUCIBLE_UPDATE_DOCS=1)"
    );
}

#[test]
fn every_rule_documents_itself_in_ruffs_shape() {
    let mut codes = Vec::new();
    for rule in RULES {
        let r = &rule.info;
        for section in [
            "## What it does",
            "## Why is this bad?",
            "## Example",
            "## Use instead",
        ] {
            assert!(r.doc.contains(section), "`{}` lacks `{section}`", r.code);
        }
        assert!(
            r.code.chars().all(|c| c.is_ascii_lowercase() || c == '-'),
            "`{}` is not kebab-case",
            r.code
        );
        assert!(!codes.contains(&r.code), "`{}` is declared twice", r.code);
        codes.push(r.code);
    }
}
