//! `unexpected-import`

use crate::checker::Checker;
use crate::rules::forbidden_import::forbidden;

declare_rule! {
    /// ## What it does
    /// Reports imports outside what a Triton solution uses: `torch`, `triton`, `math`,
    /// `numpy`, `typing`, `typing_extensions`, `functools`, `itertools`, `operator`,
    /// `collections`, `dataclasses`, `enum`, `abc`, `numbers`, `warnings`, `logging`,
    /// `contextlib`, `copy`, `re`, `time`, `os`, `sys`, `random` and `__future__`. Relative imports are reported too. Imports that
    /// `forbidden-import` reports are not repeated here.
    ///
    /// ## Why is this bad?
    /// A candidate is one self-contained file. Importing anything else is either unnecessary
    /// or a way to reach code the verifier cannot see, such as the task's own module with the
    /// reference `Model`.
    ///
    /// ## Example
    /// ```python
    /// from reference import Model
    /// ```
    ///
    /// ## Use instead
    /// ```python
    /// import torch
    /// import torch.nn as nn
    /// import triton
    /// import triton.language as tl
    /// ```
    pub(crate) const UNEXPECTED_IMPORT = {
        code: "unexpected-import",
        summary: "Imports a module outside the usual Triton-solution set.",
        strict: Flag,
        kernelbench: Off,
        lenient: Off,
    };
}

const EXPECTED: &[&str] = &[
    "torch",
    "triton",
    "math",
    "numpy",
    "typing",
    "typing_extensions",
    "functools",
    "itertools",
    "operator",
    "collections",
    "dataclasses",
    "enum",
    "abc",
    "numbers",
    "warnings",
    "logging",
    "contextlib",
    "copy",
    "re",
    "time",
    "os",
    "sys",
    "random",
    "__future__",
];

pub(crate) fn check(cx: &mut Checker<'_, '_>) {
    let mut found = Vec::new();
    for import in &cx.facts.imports {
        let top = import.qual.split('.').next().unwrap_or(&import.qual);
        if EXPECTED.contains(&top) || forbidden(&import.qual).is_some() {
            continue;
        }
        found.push((
            import.range.start(),
            format!(
                "imports `{}`, which a Triton solution does not need. Keep the file \
                 self-contained: import only `torch`, `triton`, `math` and the standard helpers.",
                import.qual
            ),
        ));
    }
    for (at, message) in found {
        cx.report(at, message);
    }
}
