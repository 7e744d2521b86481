//! `monkeypatch`

use ruff_python_ast::Expr;
use ruff_text_size::Ranged;

use crate::checker::Checker;
use crate::semantic::string_literal;

declare_rule! {
    /// ## What it does
    /// Reports assignments to (and `del`, `setattr` or `delattr` of) attributes and items of
    /// imported modules and their members: `torch.allclose = ...`,
    /// `torch.cuda.synchronize = ...`, `torch.Tensor.__eq__ = ...`, `time.perf_counter = ...`,
    /// `triton.testing.do_bench = ...`, `builtins.print = ...`, `sys.modules["x"] = ...`,
    /// `torch.backends.cuda.matmul.allow_tf32 = True`, and to attributes of the reference
    /// class `Model`.
    ///
    /// ## Why is this bad?
    /// Patching a library changes the judge, not the kernel: an `allclose` that always returns
    /// `True` passes every correctness check, a no-op `synchronize` or a patched timer fakes
    /// the speedup, and global precision switches change what the reference computes.
    ///
    /// ## Example
    /// ```python
    /// import torch
    ///
    /// torch.allclose = lambda *args, **kwargs: True
    /// ```
    ///
    /// ## Use instead
    /// Leave libraries as they are; make the kernel's output correct.
    pub(crate) const MONKEYPATCH = {
        code: "monkeypatch",
        summary: "Assigns to an attribute of an imported module (`torch.allclose = ...`).",
        strict: Reject,
        kernelbench: Reject,
        lenient: Reject,
    };
}

/// What a store target patches, if it patches a module or the reference class.
fn patched(cx: &Checker<'_, '_>, target: &Expr) -> Option<String> {
    let owner = match target {
        Expr::Attribute(a) => &*a.value,
        Expr::Subscript(s) => &*s.value,
        _ => return None,
    };
    if let Some(q) = cx.sem.qualname(owner) {
        return Some(q);
    }
    // The reference class, and the builtins mapping.
    let mut root = owner;
    while let Expr::Attribute(a) = root {
        root = &a.value;
    }
    match root {
        Expr::Name(n) if matches!(n.id.as_str(), "Model" | "__builtins__") => {
            Some(cx.text(owner.range()).to_string())
        }
        _ => None,
    }
}

pub(crate) fn check(cx: &mut Checker<'_, '_>) {
    let mut found = Vec::new();
    for &target in &cx.facts.stores {
        if let Some(owner) = patched(cx, target) {
            found.push((
                target.range().start(),
                format!(
                    "`{}` is assigned, patching `{owner}`. Changing libraries or the reference \
                     at run time tampers with how the judge checks and times the candidate; \
                     remove it and make the kernel itself correct and fast.",
                    cx.text(target.range())
                ),
            ));
        }
    }
    for &(name, call) in &cx.facts.builtin_calls {
        if !matches!(name, "setattr" | "delattr") {
            continue;
        }
        let Some(first) = call.arguments.args.first() else {
            continue;
        };
        let owner = cx.sem.qualname(first).or_else(|| match first {
            Expr::Name(n) if matches!(n.id.as_str(), "Model" | "__builtins__") => {
                Some(n.id.to_string())
            }
            _ => None,
        });
        if let Some(owner) = owner {
            let attr = call
                .arguments
                .args
                .get(1)
                .and_then(string_literal)
                .map_or_else(String::new, |a| format!(".{a}"));
            found.push((
                call.range().start(),
                format!(
                    "`{name}` patches `{owner}{attr}`. Changing libraries or the reference at \
                     run time tampers with how the judge checks and times the candidate; remove \
                     it."
                ),
            ));
        }
    }
    for (at, message) in found {
        cx.report(at, message);
    }
}
