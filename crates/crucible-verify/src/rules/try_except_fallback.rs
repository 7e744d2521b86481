//! `try-except-fallback`

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, Stmt};
use ruff_text_size::Ranged;

use crate::checker::Checker;
use crate::semantic::MAX_DEPTH;

declare_rule! {
    /// ## What it does
    /// Reports `try`/`except` blocks whose body calls anything, and `with
    /// contextlib.suppress(...)` blocks, on the forward path.
    ///
    /// ## Why is this bad?
    /// The classic fallback: try the Triton kernel and, when it fails to compile or crashes,
    /// quietly compute the answer in PyTorch. The candidate then passes correctness without a
    /// working kernel, and the failure that should have been fed back is hidden. Checks belong
    /// before the launch, and errors should propagate.
    ///
    /// ## Example
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def forward(self, x):
    ///         try:
    ///             return relu_triton(x)
    ///         except Exception:
    ///             return torch.relu(x)
    /// ```
    ///
    /// ## Use instead
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def forward(self, x):
    ///         return relu_triton(x)
    /// ```
    pub(crate) const TRY_EXCEPT_FALLBACK = {
        code: "try-except-fallback",
        summary: "A `try`/`except` (or `contextlib.suppress`) wraps calls on the forward path.",
        strict: Reject,
        kernelbench: Reject,
        lenient: Flag,
    };
}

/// Finds any call in a block.
struct HasCall {
    found: bool,
    depth: u32,
}

impl<'a> Visitor<'a> for HasCall {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        if !self.found && self.depth <= MAX_DEPTH {
            self.depth += 1;
            visitor::walk_stmt(self, stmt);
            self.depth -= 1;
        }
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        if self.found || self.depth > MAX_DEPTH {
            return;
        }
        if matches!(expr, Expr::Call(_)) {
            self.found = true;
            return;
        }
        self.depth += 1;
        visitor::walk_expr(self, expr);
        self.depth -= 1;
    }
}

pub(crate) fn check(cx: &mut Checker<'_, '_>) {
    let mut found = Vec::new();
    for &(stmt, func) in &cx.fwd.tries {
        if stmt.handlers.is_empty() {
            continue;
        }
        let mut scan = HasCall {
            found: false,
            depth: 0,
        };
        scan.visit_body(&stmt.body);
        if scan.found {
            let place = cx.fwd.describe(cx.sem, func);
            found.push((
                stmt.range.start(),
                format!(
                    "`try`/`except` around calls in {place}, on the forward path. A fallback \
                     hides kernel failures (and often recomputes in PyTorch). Remove the \
                     `try`/`except`: let errors surface so they can be fixed."
                ),
            ));
        }
    }
    for &(item, func) in &cx.fwd.withs {
        let Expr::Call(call) = &item.context_expr else {
            continue;
        };
        if cx
            .sem
            .qualname(&call.func)
            .is_some_and(|q| q == "contextlib.suppress")
        {
            let place = cx.fwd.describe(cx.sem, func);
            found.push((
                item.range().start(),
                format!(
                    "`contextlib.suppress` in {place} swallows errors on the forward path. Remove \
                     it: let errors surface so they can be fixed."
                ),
            ));
        }
    }
    for (at, message) in found {
        cx.report(at, message);
    }
}
