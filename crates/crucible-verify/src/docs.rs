//! The rule reference (`docs/verifier-rules.md`), generated from the rules' doc comments.

use std::fmt::Write as _;

use crate::rules::RULES;

/// The rule reference as Markdown: a table of codes and preset severities, then each rule's
/// documentation. `crucible verify --list-rules` prints it.
pub fn rules_markdown() -> String {
    let mut out = String::new();
    out.push_str("# Verifier rules\n\n");
    out.push_str(
        "<!-- Generated from the rule doc comments in crates/crucible-verify/src/rules/ by \
         `crucible verify --list-rules`; a test fails when this file and the code differ. -->\n\n",
    );
    out.push_str(
        "The static verifier (`crucible-verify`) reads a candidate solution's Python AST and \
         reports findings. Each finding has a stable code, a severity (`reject`, `flag` or \
         `info`), a message written for the model, and a line and column. A policy decides the \
         severities: `strict` (the default for RL), `kernelbench` (close to KernelBench's \
         static checker) or `lenient`, plus per-code overrides in a TOML file:\n\n",
    );
    out.push_str(
        "```toml\npreset = \"strict\"\n\n[severity]\ntorch-compute-in-forward = \"flag\"\n\
         unused-kernel = \"off\"\n```\n\n",
    );
    out.push_str(
        "The *forward path* is every host function that can run when `ModelNew` is called: \
         `ModelNew.forward` (and `__call__`) and, transitively, the helper functions, methods, \
         `self.<submodule>(...)` calls, `autograd.Function.apply` and custom ops it calls. \
         `__init__` is not on it, so building `nn.Linear` or `nn.Conv2d` there to hold weights \
         is fine; calling such a layer in `forward` is not.\n\n",
    );
    out.push_str("| Code | What it reports | strict | kernelbench | lenient |\n");
    out.push_str("| --- | --- | --- | --- | --- |\n");
    for rule in RULES {
        let r = &rule.info;
        let _ = writeln!(
            out,
            "| [`{}`](#{}) | {} | {} | {} | {} |",
            r.code,
            r.code,
            r.summary,
            r.strict.as_str(),
            r.kernelbench.as_str(),
            r.lenient.as_str()
        );
    }
    for rule in RULES {
        let r = &rule.info;
        let _ = write!(out, "\n## `{}`\n\n{}\n", r.code, r.summary);
        let mut in_code = false;
        for line in r.doc.lines() {
            let line = line.strip_prefix(' ').unwrap_or(line);
            out.push('\n');
            if line.starts_with("```") {
                in_code = !in_code;
            } else if !in_code && line.starts_with('#') {
                // Rule sections sit one level below the rule's own heading.
                out.push('#');
            }
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}
