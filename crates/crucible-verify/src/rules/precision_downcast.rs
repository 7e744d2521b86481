//! `precision-downcast`

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{self as ast, Expr, Stmt};
use ruff_text_size::{Ranged, TextRange};

use crate::checker::Checker;
use crate::semantic::{MAX_DEPTH, last_segment, string_literal};

declare_rule! {
    /// ## What it does
    /// Reports host code that lowers floating-point precision: `.half()`, `.bfloat16()`,
    /// `.to(torch.float16)` / `.to(dtype=torch.bfloat16)` / float8 dtypes, `.type(torch.half)`,
    /// `torch.autocast` / `torch.cuda.amp.autocast`, `torch.set_default_dtype(torch.float16)`
    /// and `torch.set_float32_matmul_precision(...)` below `"highest"`.
    ///
    /// Inside `@triton.jit` kernels it reports a cast to fp16, bf16 or an fp8 type
    /// (`x.to(tl.float16)`, `x.to(dtype=tl.bfloat16)`, `tl.cast(x, tl.float16)`, also through a
    /// module-level alias such as `DT = tl.float16`) whose value feeds `tl.dot` or a reduction
    /// (`tl.sum`, `tl.max`, `tl.min`, `tl.reduce`, `tl.cumsum`, `x.sum(...)`, ...), directly or
    /// through local variables. Other casts in kernels are not reported: storing the fp32
    /// accumulator in the output's dtype (`tl.store(c_ptrs, acc.to(tl.float16))`) is normal,
    /// and so is a cast to a dtype read from the data (`a.to(b.dtype)`,
    /// `acc.to(c_ptr.dtype.element_ty)`). `tl.dot`'s `input_precision` / `allow_tf32` are not
    /// casts, and allocations with an explicit dtype are not reported either.
    ///
    /// The verifier does not know the task's dtypes, so a cast of data that already is fp16
    /// is reported too; cast to the operand's own dtype instead (`p.to(v.dtype)`).
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
    ///
    ///
    /// @triton.jit
    /// def matmul_kernel(a_ptr, b_ptr, c_ptr, ...):
    ///     ...
    ///     a = tl.load(a_ptrs)
    ///     b = tl.load(b_ptrs)
    ///     acc += tl.dot(a.to(tl.float16), b.to(tl.float16))
    /// ```
    ///
    /// ## Use instead
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def forward(self, a, b):
    ///         return matmul_triton(a, b)
    ///
    ///
    /// @triton.jit
    /// def matmul_kernel(a_ptr, b_ptr, c_ptr, ...):
    ///     ...
    ///     acc += tl.dot(a, b)
    /// ```
    pub(crate) const PRECISION_DOWNCAST = {
        code: "precision-downcast",
        summary: "Host code casts to fp16/bf16/fp8 or enables autocast; a kernel casts to fp16/bf16/fp8 before `tl.dot` or a reduction.",
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
    for k in cx.sem.kernels().collect::<Vec<_>>() {
        let def = cx.sem.funcs[k].def;
        let mut scan = KernelScan {
            cx,
            tainted: Vec::new(),
            low_dtype_names: Vec::new(),
            feeds: Vec::new(),
            depth: 0,
            loops: 0,
        };
        scan.stmts(&def.body);
        for (cast, consumer) in scan.feeds {
            found.push((
                cast.start(),
                format!(
                    "`{}` in the kernel `{}` lowers the precision of values that feed \
                     `{consumer}`: the kernel then computes in less precision than the task. \
                     Keep the loaded dtype, or cast to the other operand's own dtype \
                     (`.to(b.dtype)`), and accumulate in fp32.",
                    cx.text(cast),
                    def.name.id
                ),
            ));
        }
    }
    for (at, message) in found {
        cx.report(at, message);
    }
}

/// Triton's low-precision float types.
const TL_LOW_DTYPES: &[&str] = &[
    "triton.language.bfloat16",
    "triton.language.float16",
    "triton.language.float8e4b15",
    "triton.language.float8e4b8",
    "triton.language.float8e4nv",
    "triton.language.float8e5",
    "triton.language.float8e5b16",
];

/// `triton.language` functions (and tensor methods) that multiply or reduce: precision lost
/// in their inputs is lost in the result.
const CONSUMERS: &[&str] = &[
    "argmax",
    "argmin",
    "associative_scan",
    "cumprod",
    "cumsum",
    "dot",
    "dot_scaled",
    "max",
    "min",
    "reduce",
    "softmax",
    "sum",
    "xor_sum",
];

/// Walks one kernel body in statement order, tracking which locals hold values cast to a low
/// precision (with the cast they come from) and recording each cast that reaches a consumer.
struct KernelScan<'c, 's, 'a> {
    cx: &'c Checker<'s, 'a>,
    /// Local names bound to a value derived from a low-precision cast, and that cast.
    tainted: Vec<(&'a str, TextRange)>,
    /// Local names bound to a low dtype (`dt = tl.float16`).
    low_dtype_names: Vec<&'a str>,
    /// `(cast, consumer)`, one per cast.
    feeds: Vec<(TextRange, String)>,
    depth: u32,
    /// Loops around the statement being walked.
    loops: u32,
}

/// Loops nested deeper than this are walked once.
const MAX_REPEATED_LOOPS: u32 = 4;

impl<'a> KernelScan<'_, '_, 'a> {
    fn is_low_dtype(&self, e: &Expr) -> bool {
        match e {
            Expr::Name(n) if self.low_dtype_names.contains(&n.id.as_str()) => true,
            // `DT: tl.constexpr = tl.constexpr(tl.float16)`
            Expr::Call(call)
                if self
                    .cx
                    .sem
                    .qualname(&call.func)
                    .is_some_and(|q| q == "triton.language.constexpr") =>
            {
                call.arguments
                    .args
                    .first()
                    .is_some_and(|a| self.is_low_dtype(a))
            }
            _ => self.cx.sem.qualname(e).is_some_and(|q| {
                TL_LOW_DTYPES.contains(&q.as_str()) || LOW_DTYPES.contains(&q.as_str())
            }),
        }
    }

    /// The dtype argument of a cast call: positional `index`, or `dtype=`.
    fn dtype_arg(call: &ast::ExprCall, index: usize) -> Option<&Expr> {
        call.arguments.args.get(index).or_else(|| {
            call.arguments
                .keywords
                .iter()
                .find(|k| k.arg.as_ref().is_some_and(|a| a.id.as_str() == "dtype"))
                .map(|k| &k.value)
        })
    }

    /// `triton.language.<name>` for a call of a member of `triton.language`.
    fn tl_function(&self, call: &ast::ExprCall) -> Option<String> {
        let q = self.cx.sem.qualname(&call.func)?;
        let rest = q.strip_prefix("triton.language.")?;
        Some(last_segment(rest).to_string())
    }

    fn taint_of_name(&self, name: &str) -> Option<TextRange> {
        self.tainted
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, r)| *r)
    }

    fn record(&mut self, cast: TextRange, consumer: String) {
        if !self.feeds.iter().any(|(c, _)| *c == cast) {
            self.feeds.push((cast, consumer));
        }
    }

    // ------------------------------------------------------------ statements

    fn stmts(&mut self, body: &'a [Stmt]) {
        for stmt in body {
            self.stmt(stmt);
        }
    }

    fn stmt(&mut self, stmt: &'a Stmt) {
        if self.depth > MAX_DEPTH {
            return;
        }
        self.depth += 1;
        match stmt {
            Stmt::Assign(a) => {
                let taint = self.expr(&a.value);
                let low_dtype = self.is_low_dtype(&a.value);
                for target in &a.targets {
                    self.bind(target, taint, low_dtype);
                }
            }
            Stmt::AnnAssign(a) => {
                if let Some(value) = &a.value {
                    let taint = self.expr(value);
                    let low_dtype = self.is_low_dtype(value);
                    self.bind(&a.target, taint, low_dtype);
                }
            }
            Stmt::AugAssign(a) => {
                let taint = self.expr(&a.value);
                if let Expr::Name(n) = &*a.target {
                    // `acc += x16`: the accumulator keeps what it had and gains the cast.
                    let id = n.id.as_str();
                    if let (None, Some(cast)) = (self.taint_of_name(id), taint) {
                        self.tainted.push((id, cast));
                    }
                } else {
                    self.expr(&a.target);
                }
            }
            Stmt::If(s) => {
                self.expr(&s.test);
                let before = self.tainted.clone();
                let mut after: Vec<(&'a str, TextRange)> = Vec::new();
                let mut branches: Vec<&'a [Stmt]> = vec![&s.body];
                let mut has_else = false;
                for clause in &s.elif_else_clauses {
                    if let Some(test) = &clause.test {
                        self.expr(test);
                    } else {
                        has_else = true;
                    }
                    branches.push(&clause.body);
                }
                for body in branches {
                    self.tainted = before.clone();
                    self.stmts(body);
                    after.extend(self.tainted.iter().copied());
                }
                if !has_else {
                    after.extend(before.iter().copied());
                }
                // A name tainted on any branch may be tainted after the `if`.
                self.tainted = after;
            }
            Stmt::For(s) => {
                self.expr(&s.iter);
                self.loop_body(&s.body);
                self.stmts(&s.orelse);
            }
            Stmt::While(s) => {
                self.expr(&s.test);
                self.loop_body(&s.body);
                self.stmts(&s.orelse);
            }
            Stmt::With(s) => {
                for item in &s.items {
                    self.expr(&item.context_expr);
                }
                self.stmts(&s.body);
            }
            Stmt::Expr(e) => {
                self.expr(&e.value);
            }
            Stmt::Return(r) => {
                if let Some(v) = &r.value {
                    self.expr(v);
                }
            }
            other => {
                let mut children = Children {
                    scan: self,
                    taint: None,
                };
                visitor::walk_stmt(&mut children, other);
            }
        }
        self.depth -= 1;
    }

    /// A loop body, walked twice so that a value cast late in one iteration is seen feeding
    /// the next one (once only inside deeply nested loops, which would take exponential time).
    fn loop_body(&mut self, body: &'a [Stmt]) {
        self.loops += 1;
        self.stmts(body);
        if self.loops <= MAX_REPEATED_LOOPS {
            self.stmts(body);
        }
        self.loops -= 1;
    }

    fn bind(&mut self, target: &'a Expr, taint: Option<TextRange>, low_dtype: bool) {
        match target {
            Expr::Name(n) => {
                let id = n.id.as_str();
                match taint {
                    Some(cast) => self.tainted.push((id, cast)),
                    None => self.tainted.retain(|(name, _)| *name != id),
                }
                if low_dtype {
                    self.low_dtype_names.push(id);
                } else {
                    self.low_dtype_names.retain(|name| *name != id);
                }
            }
            Expr::Tuple(t) => {
                for e in &t.elts {
                    self.bind(e, taint, false);
                }
            }
            Expr::List(l) => {
                for e in &l.elts {
                    self.bind(e, taint, false);
                }
            }
            _ => {
                self.expr(target);
            }
        }
    }

    // ------------------------------------------------------------ expressions

    /// Visits `e`, recording casts that reach a consumer; returns the cast its value derives
    /// from, if any.
    fn expr(&mut self, e: &'a Expr) -> Option<TextRange> {
        if self.depth > MAX_DEPTH {
            return None;
        }
        self.depth += 1;
        let taint = self.expr_inner(e);
        self.depth -= 1;
        taint
    }

    fn expr_inner(&mut self, e: &'a Expr) -> Option<TextRange> {
        match e {
            Expr::Name(n) => self.taint_of_name(n.id.as_str()),
            Expr::Call(call) => self.call(call),
            other => {
                let mut children = Children {
                    scan: self,
                    taint: None,
                };
                visitor::walk_expr(&mut children, other);
                children.taint
            }
        }
    }

    fn call(&mut self, call: &'a ast::ExprCall) -> Option<TextRange> {
        let tl = self.tl_function(call);
        // A method of a value (`a.to(...)`, `x.sum(...)`), not of a module (`tl.sum`).
        let method = match &*call.func {
            Expr::Attribute(a) if self.cx.sem.qualname(&a.value).is_none() => Some(a),
            _ => None,
        };
        let receiver = match method {
            Some(a) => self.expr(&a.value),
            None => {
                if tl.is_none() {
                    self.expr(&call.func);
                }
                None
            }
        };
        let mut args_taint = None;
        let mut first_arg_taint = None;
        for (i, arg) in call.arguments.args.iter().enumerate() {
            let t = self.expr(arg);
            if i == 0 {
                first_arg_taint = t;
            }
            args_taint = args_taint.or(t);
        }
        for kw in &call.arguments.keywords {
            let t = self.expr(&kw.value);
            // `acc=`: the accumulator operand of `tl.dot`.
            if kw.arg.as_ref().is_some_and(|a| a.id.as_str() == "acc") {
                args_taint = args_taint.or(t);
            }
        }
        let method_name = method.map(|a| a.attr.id.as_str());
        // A cast to a low dtype starts a taint.
        let is_cast = match (method_name, tl.as_deref()) {
            (Some("to" | "cast"), _) => {
                Self::dtype_arg(call, 0).is_some_and(|d| self.is_low_dtype(d))
            }
            (None, Some("cast")) => Self::dtype_arg(call, 1).is_some_and(|d| self.is_low_dtype(d)),
            _ => false,
        };
        if is_cast {
            return Some(call.range());
        }
        // A consumer reports the casts among its operands.
        let consumer = match (method_name, tl.as_deref()) {
            (Some(m), _) if CONSUMERS.contains(&m) => {
                receiver.map(|cast| (cast, format!(".{m}()")))
            }
            (None, Some(f)) if CONSUMERS.contains(&f) => {
                let operands = if f == "dot" || f == "dot_scaled" {
                    args_taint
                } else {
                    first_arg_taint
                };
                operands.map(|cast| (cast, format!("tl.{f}")))
            }
            _ => None,
        };
        if let Some((cast, consumer)) = consumer {
            self.record(cast, consumer);
            // Reported once, at the cast; what the consumer returns is not followed further.
            return None;
        }
        match tl.as_deref() {
            // Fresh values.
            Some("load" | "zeros" | "full" | "arange" | "program_id" | "num_programs") => None,
            _ => receiver.or(args_taint),
        }
    }
}

/// Visits the direct children of an expression or statement through [`KernelScan::expr`].
struct Children<'w, 'c, 's, 'a> {
    scan: &'w mut KernelScan<'c, 's, 'a>,
    taint: Option<TextRange>,
}

impl<'a> Visitor<'a> for Children<'_, '_, '_, 'a> {
    fn visit_expr(&mut self, expr: &'a Expr) {
        let t = self.scan.expr(expr);
        self.taint = self.taint.or(t);
    }

    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        self.scan.stmt(stmt);
    }
}
