//! `shape-keyed-cache`

use crate::checker::Checker;
use crate::torch_api::IDENTITY;

declare_rule! {
    /// ## What it does
    /// Reports state that outlives a call and is keyed by a tensor's shape: a module-level or
    /// attribute dict indexed with `x.shape` / `x.size()` / `x.numel()`, or a `self.<slot>`
    /// written on the forward path and compared with a shape (`if x.shape != self._shape:`).
    ///
    /// ## Why is this bad?
    /// Shape-keyed state is sometimes honest (a cached launch configuration), but it is also how
    /// outputs and output buffers are reused across calls: the judge then compares a buffer
    /// that the next call overwrites, or a result computed for a different input of the same
    /// shape. It is a `flag`, for a human or a runtime check to confirm.
    ///
    /// ## Example
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def forward(self, x):
    ///         if self._shape != x.shape:
    ///             self._shape = x.shape
    ///             self._out = relu_triton(x)
    ///         return self._out
    /// ```
    ///
    /// ## Use instead
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def forward(self, x):
    ///         return relu_triton(x)
    /// ```
    pub(crate) const SHAPE_KEYED_CACHE = {
        code: "shape-keyed-cache",
        summary: "Keeps state across calls keyed by a tensor's shape.",
        strict: Flag,
        kernelbench: Off,
        lenient: Off,
    };
}

pub(crate) fn check(cx: &mut Checker<'_, '_>) {
    let mut found = Vec::new();
    for cache in &cx.fwd.caches {
        if cache.taint & IDENTITY != 0 {
            continue;
        }
        let place = cx.fwd.describe(cx.sem, cache.func);
        found.push((
            cache.range.start(),
            format!(
                "{} is keyed by a tensor's shape in {place}, state kept across calls. If it \
                 holds outputs or buffers that are returned, compute a fresh output on every \
                 call instead.",
                cache.container
            ),
        ));
    }
    for (at, message) in found {
        cx.report(at, message);
    }
}
