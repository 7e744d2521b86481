//! `torch-compute-in-forward`

use ruff_text_size::Ranged;

use crate::checker::Checker;
use crate::forward::Callee;
use crate::semantic::Kind;
use crate::torch_api::{ALLOWED_METHODS, AMBIGUOUS_METHODS, COMPUTE_METHODS, listed};

declare_rule! {
    /// ## What it does
    /// Reports PyTorch doing computation on the forward path: calls of `torch.*` compute
    /// functions (`torch.matmul`, `torch.softmax`, `torch.sum`, `torch.conv2d`, ...), of
    /// `torch.nn.functional` (`F.relu`, `F.linear`, ...), `torch.linalg`, `torch.fft`,
    /// `torch.special` and `torch.ops.aten`; running a `torch.nn` layer (`self.conv(x)`,
    /// `nn.ReLU()(x)`); compute methods on tensors (`x.sum()`, `x.relu()`, `x.matmul(w)`,
    /// `x.exp()`, ...); the `@` operator; and arithmetic, comparison and in-place operators on
    /// values known to be tensors (`out + self.bias`, `y *= 2`).
    ///
    /// Allowed: allocation (`torch.empty`, `empty_like`, `zeros`, `ones`, `full`, `arange`,
    /// `randn`), views and layout (`view`, `reshape`, `permute`, `transpose`, `contiguous`,
    /// `flatten`, `squeeze`, `expand`, `narrow`, `split`), copies and data movement (`clone`,
    /// `copy_`, `to`, `cat`, `stack`, `F.pad`), shape queries (`size`, `stride`, `numel`,
    /// `dim`), parameters and layer attributes (`self.linear.weight`), and anything in
    /// `__init__`: building `nn.Linear` or `nn.Conv2d` there to hold weights with the same
    /// initialization as the reference is fine.
    ///
    /// ## Why is this bad?
    /// The candidate is judged as Triton code. Work done by PyTorch on the forward path is
    /// work the kernels did not do: a forward that calls `torch.matmul` passes correctness by
    /// running cuBLAS, and its speedup measures PyTorch, not the candidate.
    ///
    /// ## Example
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def __init__(self, in_features, out_features):
    ///         super().__init__()
    ///         self.linear = nn.Linear(in_features, out_features)
    ///
    ///     def forward(self, x):
    ///         y = self.linear(x)
    ///         return relu_triton(y)
    /// ```
    ///
    /// ## Use instead
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def __init__(self, in_features, out_features):
    ///         super().__init__()
    ///         self.linear = nn.Linear(in_features, out_features)
    ///
    ///     def forward(self, x):
    ///         # One Triton kernel computes x @ W.T + b and the ReLU.
    ///         return linear_relu_triton(x, self.linear.weight, self.linear.bias)
    /// ```
    pub(crate) const TORCH_COMPUTE_IN_FORWARD = {
        code: "torch-compute-in-forward",
        summary: "PyTorch computes on the forward path (torch/F calls, layers, tensor methods, `@`, tensor arithmetic).",
        strict: Reject,
        kernelbench: Reject,
        lenient: Flag,
    };
}

/// `torch.*` functions (after the `torch.` prefix) that allocate, view, move or describe.
const ALLOWED_FUNCTIONS: &[&str] = &[
    "arange",
    "as_strided",
    "as_tensor",
    "asarray",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "autocast",
    "broadcast_shapes",
    "broadcast_tensors",
    "broadcast_to",
    "can_cast",
    "cat",
    "chunk",
    "clone",
    "compile",
    "concat",
    "concatenate",
    "dstack",
    "empty",
    "empty_cache",
    "empty_like",
    "empty_strided",
    "enable_grad",
    "flatten",
    "flip",
    "from_dlpack",
    "from_numpy",
    "frombuffer",
    "full",
    "full_like",
    "get_default_dtype",
    "get_device",
    "get_float32_matmul_precision",
    "get_num_threads",
    "hstack",
    "inference_mode",
    "is_complex",
    "is_floating_point",
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "is_storage",
    "is_tensor",
    "linspace",
    "load",
    "manual_seed",
    "moveaxis",
    "movedim",
    "narrow",
    "no_grad",
    "numel",
    "ones",
    "ones_like",
    "permute",
    "promote_types",
    "rand",
    "rand_like",
    "randint",
    "randint_like",
    "randn",
    "randn_like",
    "randperm",
    "reshape",
    "result_type",
    "roll",
    "save",
    "seed",
    "select",
    "set_default_device",
    "set_default_dtype",
    "set_float32_matmul_precision",
    "set_grad_enabled",
    "set_num_threads",
    "set_printoptions",
    "split",
    "squeeze",
    "stack",
    "swapaxes",
    "swapdims",
    "t",
    "tensor",
    "tensor_split",
    "tile",
    "transpose",
    "typename",
    "unbind",
    "unflatten",
    "unsqueeze",
    "use_deterministic_algorithms",
    "view_as_complex",
    "view_as_real",
    "vstack",
    "zeros",
    "zeros_like",
];

/// `torch.` sub-namespaces that hold no tensor compute (other rules look at some of them).
const NON_COMPUTE_NAMESPACES: &[&str] = &[
    "_C",
    "_dynamo",
    "_inductor",
    "_library",
    "_logging",
    "_utils",
    "amp",
    "autograd",
    "backends",
    "compiler",
    "cpu",
    "cuda",
    "distributed",
    "export",
    "fx",
    "hub",
    "jit",
    "library",
    "mps",
    "multiprocessing",
    "overrides",
    "profiler",
    "random",
    "testing",
    "types",
    "utils",
    "version",
    "xpu",
];

/// `operator` functions that apply arithmetic (to tensors, on the forward path).
const OPERATOR_FUNCTIONS: &[&str] = &[
    "abs", "add", "floordiv", "iadd", "imatmul", "imul", "isub", "itruediv", "matmul", "mod",
    "mul", "neg", "pow", "sub", "truediv",
];

/// Whether calling the `torch` function `qual` computes; `None` when it is not a torch name.
fn torch_function_computes(qual: &str) -> Option<bool> {
    if let Some(op) = qual.strip_prefix("operator.") {
        return Some(listed(OPERATOR_FUNCTIONS, op));
    }
    let rest = qual.strip_prefix("torch.")?;
    if let Some(f) = rest.strip_prefix("nn.functional.") {
        return Some(f != "pad");
    }
    if let Some(m) = rest.strip_prefix("Tensor.") {
        return Some(listed(COMPUTE_METHODS, m));
    }
    if rest.starts_with("_C._nn.") || rest.starts_with("_C._VariableFunctions.") {
        return Some(true);
    }
    let top = rest.split('.').next().unwrap_or(rest);
    if let Some(member) = rest.strip_prefix("nn.") {
        // Constructing layers and parameters is allowed; running them (`self.conv(x)`) is
        // reported as a layer, and so is the unbound `nn.Linear.forward(layer, x)`.
        let method = member.rsplit('.').next().unwrap_or(member);
        return Some(
            member.contains('.') && matches!(method, "forward" | "__call__" | "_conv_forward"),
        );
    }
    if listed(NON_COMPUTE_NAMESPACES, top) || listed(ALLOWED_FUNCTIONS, rest) {
        return Some(false);
    }
    // `torch.Size`, `torch.Tensor`, `torch.FloatTensor`, `torch.Generator`: types, not compute.
    Some(!top.starts_with(|c: char| c.is_ascii_uppercase()))
}

pub(crate) fn check(cx: &mut Checker<'_, '_>) {
    let mut found: Vec<(ruff_text_size::TextSize, String)> = Vec::new();
    for site in &cx.fwd.calls {
        let what = match &site.callee {
            Callee::Qual(q) => {
                if torch_function_computes(q) != Some(true) {
                    continue;
                }
                format!("`{}(...)`", cx.text(site.call.func.range()))
            }
            Callee::Method { name, recv } => {
                let tensor_like = match recv {
                    Kind::Tensor => true,
                    Kind::Unknown => !AMBIGUOUS_METHODS.contains(name),
                    _ => false,
                };
                if !tensor_like || !listed(COMPUTE_METHODS, name) || listed(ALLOWED_METHODS, name) {
                    continue;
                }
                format!("the tensor method `.{name}()`")
            }
            Callee::Layer(desc) => format!("calling the PyTorch layer {desc}"),
        };
        let place = cx.fwd.describe(cx.sem, site.func);
        found.push((
            site.call.range().start(),
            format!(
                "{what} computes in PyTorch in {place}, on the forward path. Do this work in \
                 your Triton kernel; PyTorch may only allocate outputs, make views, and read \
                 shapes and parameters here."
            ),
        ));
    }
    for op in &cx.fwd.ops {
        let place = cx.fwd.describe(cx.sem, op.func);
        found.push((
            op.range.start(),
            format!(
                "{} computes in PyTorch in {place}, on the forward path. Fuse this into your \
                 Triton kernel instead.",
                op.what
            ),
        ));
    }
    for (at, message) in found {
        cx.report(at, message);
    }
}

#[cfg(test)]
mod tests {
    use super::torch_function_computes;

    #[test]
    fn torch_functions_are_classified() {
        for compute in [
            "torch.matmul",
            "torch.nn.functional.relu",
            "torch.linalg.norm",
            "torch.ops.aten.mm",
            "torch.sum",
            "torch.Tensor.add",
            "torch._C._nn.linear",
            "torch.nn.Linear.forward",
            "operator.matmul",
        ] {
            assert_eq!(torch_function_computes(compute), Some(true), "{compute}");
        }
        for allowed in [
            "torch.empty_like",
            "torch.nn.functional.pad",
            "torch.cuda.synchronize",
            "torch.nn.Linear",
            "torch.Size",
            "torch.cat",
            "torch.Tensor.view",
        ] {
            assert_eq!(torch_function_computes(allowed), Some(false), "{allowed}");
        }
        assert_eq!(torch_function_computes("math.sqrt"), None);
    }

    #[test]
    fn tables_are_sorted() {
        for table in [
            super::ALLOWED_FUNCTIONS,
            super::NON_COMPUTE_NAMESPACES,
            super::OPERATOR_FUNCTIONS,
        ] {
            assert!(table.windows(2).all(|w| w[0] < w[1]), "{table:?}");
        }
    }
}
