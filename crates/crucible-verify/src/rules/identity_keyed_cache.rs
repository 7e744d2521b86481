//! `identity-keyed-cache`

use ruff_python_ast::Expr;

use crate::checker::Checker;
use crate::torch_api::IDENTITY;

declare_rule! {
    /// ## What it does
    /// Reports state that outlives a call and is keyed by a tensor's identity: a module-level
    /// dict, a dict attribute, a mutable default argument, or a `self.<slot>` / global written
    /// on the forward path, read or compared with a key built from `x.data_ptr()`, `id(x)`,
    /// `hash(x)`, `x.untyped_storage()` or the tensor itself; and `functools.lru_cache` /
    /// `functools.cache` on a forward-path function that takes tensors or launches kernels.
    ///
    /// ## Why is this bad?
    /// The judge calls the model repeatedly with the same input tensors while timing. A cache
    /// keyed by the input's address returns the first result again without computing, so the
    /// measured time is a dictionary lookup, and a reused address can even return another
    /// input's result.
    ///
    /// ## Example
    /// ```python
    /// _cache = {}
    ///
    /// class ModelNew(nn.Module):
    ///     def forward(self, x):
    ///         key = x.data_ptr()
    ///         if key not in _cache:
    ///             _cache[key] = relu_triton(x)
    ///         return _cache[key]
    /// ```
    ///
    /// ## Use instead
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def forward(self, x):
    ///         return relu_triton(x)
    /// ```
    pub(crate) const IDENTITY_KEYED_CACHE = {
        code: "identity-keyed-cache",
        summary: "Caches across calls keyed by `data_ptr()`, `id()` or the tensor itself.",
        strict: Reject,
        kernelbench: Flag,
        lenient: Reject,
    };
}

pub(crate) fn check(cx: &mut Checker<'_, '_>) {
    let mut found = Vec::new();
    for cache in &cx.fwd.caches {
        if cache.taint & IDENTITY == 0 {
            continue;
        }
        let place = cx.fwd.describe(cx.sem, cache.func);
        found.push((
            cache.range.start(),
            format!(
                "{} is looked up with a key derived from a tensor's identity (`data_ptr()`, \
                 `id()`, or the tensor) in {place}. Results cached across calls are replayed \
                 instead of computed; compute the output on every call.",
                cache.container
            ),
        ));
    }
    for &f in &cx.fwd.funcs {
        let def = cx.sem.funcs[f].def;
        let Some(decorator) = def.decorator_list.iter().find(|d| {
            let e = match &d.expression {
                Expr::Call(c) => &*c.func,
                e => e,
            };
            cx.sem
                .qualname(e)
                .is_some_and(|q| matches!(q.as_str(), "functools.lru_cache" | "functools.cache"))
        }) else {
            continue;
        };
        let takes_tensors = def.parameters.iter().any(|p| {
            p.annotation()
                .and_then(|a| cx.sem.qualname(a))
                .is_some_and(|q| q == "torch.Tensor")
        });
        if takes_tensors || cx.fwd.root == Some(f) || cx.fwd.launch_funcs.contains(&f) {
            found.push((
                decorator.range.start(),
                format!(
                    "`{}` is memoized, so repeated calls with the same tensors return a stored \
                     result instead of running the kernels. Remove the cache.",
                    cx.sem.func_label(f)
                ),
            ));
        }
    }
    for (at, message) in found {
        cx.report(at, message);
    }
}
