//! `cuda-stream`

use ruff_text_size::Ranged;

use crate::checker::Checker;

declare_rule! {
    /// ## What it does
    /// Reports CUDA stream and graph APIs: `torch.cuda.Stream`, `torch.cuda.stream(...)`,
    /// `torch.cuda.set_stream`, `torch.cuda.ExternalStream`, `torch.Stream`,
    /// `.wait_stream()`, `.record_stream()`, `.wait_event()`, and `torch.cuda.graph`,
    /// `torch.cuda.CUDAGraph`, `torch.cuda.make_graphed_callables`.
    ///
    /// ## Why is this bad?
    /// The judge times the candidate on the current stream. Work launched on a side stream
    /// escapes the timer (and may still be running when outputs are compared), and a replayed
    /// CUDA graph can return results captured from an earlier input.
    ///
    /// ## Example
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def forward(self, x):
    ///         with torch.cuda.stream(torch.cuda.Stream()):
    ///             return relu_triton(x)
    /// ```
    ///
    /// ## Use instead
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def forward(self, x):
    ///         return relu_triton(x)
    /// ```
    pub(crate) const CUDA_STREAM = {
        code: "cuda-stream",
        summary: "Uses CUDA streams or CUDA graphs.",
        strict: Reject,
        kernelbench: Reject,
        lenient: Reject,
    };
}

const STREAM_APIS: &[&str] = &[
    "torch.cuda.Stream",
    "torch.cuda.stream",
    "torch.cuda.StreamContext",
    "torch.cuda.ExternalStream",
    "torch.cuda.set_stream",
    "torch.cuda.streams",
    "torch.Stream",
    "torch.cuda.graph",
    "torch.cuda.graphs",
    "torch.cuda.CUDAGraph",
    "torch.cuda.make_graphed_callables",
];

pub(crate) fn check(cx: &mut Checker<'_, '_>) {
    let mut found = Vec::new();
    for r in &cx.facts.refs {
        let hit = STREAM_APIS.iter().any(|api| {
            r.qual == *api
                || r.qual
                    .strip_prefix(api)
                    .is_some_and(|rest| rest.starts_with('.'))
        });
        if hit {
            found.push((
                r.range.start(),
                format!(
                    "`{}`: streams and CUDA graphs move work out of the timed stream or replay \
                     stale results. Launch your kernels on the current stream.",
                    r.qual
                ),
            ));
        }
    }
    for &(name, call) in &cx.facts.method_calls {
        if matches!(name, "wait_stream" | "record_stream" | "wait_event") {
            found.push((
                call.range().start(),
                format!(
                    "`.{name}()` synchronizes across CUDA streams; launch your kernels on the \
                     current stream instead."
                ),
            ));
        }
    }
    for (at, message) in found {
        cx.report(at, message);
    }
}
