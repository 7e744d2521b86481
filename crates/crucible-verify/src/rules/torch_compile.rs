//! `torch-compile`

use crate::checker::Checker;

declare_rule! {
    /// ## What it does
    /// Reports PyTorch compilers: `torch.compile` (call or decorator), `torch._dynamo`,
    /// `torch._inductor`, `torch.jit.script`/`trace`, `torch.fx`, `torch.export`,
    /// `torch.cuda.jiterator`, `torch.compiler` (except the `is_compiling` queries).
    ///
    /// ## Why is this bad?
    /// Inductor writes Triton kernels itself. A candidate that compiles the reference gets
    /// generated kernels and a speedup that are not its own work.
    ///
    /// ## Example
    /// ```python
    /// class ModelNew(nn.Module):
    ///     @torch.compile
    ///     def forward(self, x):
    ///         return torch.relu(x)
    /// ```
    ///
    /// ## Use instead
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def forward(self, x):
    ///         return relu_triton(x)
    /// ```
    pub(crate) const TORCH_COMPILE = {
        code: "torch-compile",
        summary: "Uses `torch.compile`, Inductor, Dynamo, TorchScript or FX.",
        strict: Reject,
        kernelbench: Flag,
        lenient: Flag,
    };
}

const COMPILERS: &[&str] = &[
    "torch.compile",
    "torch._dynamo",
    "torch._inductor",
    "torch.jit.script",
    "torch.jit.trace",
    "torch.jit.trace_module",
    "torch.jit.freeze",
    "torch.fx",
    "torch.export",
    "torch.cuda.jiterator",
    "torch.compiler",
];

const ALLOWED: &[&str] = &[
    "torch.compiler.is_compiling",
    "torch.compiler.is_dynamo_compiling",
    "torch.compiler.disable",
];

fn is_compiler(qual: &str) -> bool {
    !ALLOWED.contains(&qual)
        && COMPILERS.iter().any(|c| {
            qual == *c
                || qual
                    .strip_prefix(c)
                    .is_some_and(|rest| rest.starts_with('.'))
        })
}

pub(crate) fn check(cx: &mut Checker<'_, '_>) {
    let mut found = Vec::new();
    let message = |q: &str| {
        format!(
            "`{q}` hands the computation to a PyTorch compiler, which generates its own kernels. \
             Write the Triton kernels yourself and launch them from `forward`."
        )
    };
    for import in &cx.facts.imports {
        if is_compiler(&import.qual) {
            found.push((import.range.start(), message(&import.qual)));
        }
    }
    for r in &cx.facts.refs {
        if is_compiler(&r.qual) {
            found.push((r.range.start(), message(&r.qual)));
        }
    }
    for (at, message) in found {
        cx.report(at, message);
    }
}
