//! `precision-downcast`

use ruff_python_ast::Expr;
use ruff_text_size::Ranged;

use crate::checker::Checker;
use crate::semantic::string_literal;

declare_rule! {
    /// ## What it does
    /// Reports host code that lowers floating-point precision: `.half()`, `.bfloat16()`,
    /// `.to(torch.float16)` / `.to(dtype=torch.bfloat16)` / float8 dtypes, `.type(torch.half)`,
    /// `torch.autocast` / `torch.cuda.amp.autocast`, `torch.set_default_dtype(torch.float16)`
    /// and `torch.set_float32_matmul_precision(...)` below `"highest"`. Casts inside `@triton.jit`
    /// kernels are not reported (storing an accumulator in the output's dtype is normal), and
    /// neither are allocations with an explicit dtype.
    ///
    /// ## Why is this bad?
    /// Computing an fp32 task in fp16 or bf16 is faster because it does less precise work, and
    /// it may still pass a loose tolerance. The speedup is then not a better kernel. If the
    /// task's inputs are already half precision, keep the input's dtype with `.to(x.dtype)`.
    ///
    /// ## Example
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def forward(self, a, b):
    ///         return matmul_triton(a.half(), b.half()).float()
    /// ```
    ///
    /// ## Use instead
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def forward(self, a, b):
    ///         return matmul_triton(a, b)
    /// ```
    pub(crate) const PRECISION_DOWNCAST = {
        code: "precision-downcast",
        summary: "Host code casts to fp16/bf16/fp8 or enables autocast.",
        strict: Reject,
        kernelbench: Flag,
        lenient: Flag,
    };
}

const LOW_DTYPES: &[&str] = &[
    "torch.float16",
    "torch.half",
    "torch.bfloat16",
    "torch.float8_e4m3fn",
    "torch.float8_e5m2",
    "torch.float8_e4m3fnuz",
    "torch.float8_e5m2fnuz",
    "torch.HalfTensor",
    "torch.BFloat16Tensor",
    "torch.cuda.HalfTensor",
    "torch.cuda.BFloat16Tensor",
];

fn is_low_dtype(cx: &Checker<'_, '_>, e: &Expr) -> bool {
    match e {
        Expr::StringLiteral(_) => string_literal(e).is_some_and(|s| {
            matches!(s, "float16" | "half" | "bfloat16") || LOW_DTYPES.contains(&s)
        }),
        _ => cx
            .sem
            .qualname(e)
            .is_some_and(|q| LOW_DTYPES.contains(&q.as_str())),
    }
}

pub(crate) fn check(cx: &mut Checker<'_, '_>) {
    let mut found = Vec::new();
    for &(name, call) in &cx.facts.method_calls {
        let args = &call.arguments;
        let low = match name {
            "half" | "bfloat16" => args.args.is_empty() && args.keywords.is_empty(),
            "to" | "type" => {
                args.args.iter().any(|a| is_low_dtype(cx, a))
                    || args.keywords.iter().any(|k| {
                        k.arg.as_ref().is_some_and(|a| a.id.as_str() == "dtype")
                            && is_low_dtype(cx, &k.value)
                    })
            }
            _ => false,
        };
        // `torch.set_default_dtype` and friends are module functions, judged below.
        if low
            && let Expr::Attribute(a) = &*call.func
            && cx.sem.qualname(&a.value).is_none()
        {
            found.push((
                call.range().start(),
                format!(
                    "`{}` lowers the precision of the computation. Keep the task's dtype (use \
                     `.to(x.dtype)` if you need a cast) and make the kernel fast at full \
                     precision.",
                    cx.text(call.range())
                ),
            ));
        }
    }
    for r in &cx.facts.refs {
        let low = match r.qual.as_str() {
            "torch.autocast"
            | "torch.cuda.amp.autocast"
            | "torch.amp.autocast"
            | "torch.cpu.amp.autocast" => true,
            "torch.set_default_dtype" => r
                .call
                .and_then(|c| c.arguments.args.first())
                .is_some_and(|a| is_low_dtype(cx, a)),
            "torch.set_float32_matmul_precision" => {
                r.call
                    .and_then(|c| c.arguments.args.first())
                    .and_then(string_literal)
                    != Some("highest")
            }
            _ => false,
        };
        if low {
            found.push((
                r.range.start(),
                format!(
                    "`{}` lowers the precision PyTorch computes in. Keep full precision and make \
                     the kernel fast instead.",
                    r.qual
                ),
            ));
        }
    }
    for (at, message) in found {
        cx.report(at, message);
    }
}
