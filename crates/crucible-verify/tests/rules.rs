//! One positive and one negative example per rule.

use crucible_result::Severity;
use crucible_verify::{Policy, RULES, verify};

const HEADER: &str =
    "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\n";

const KERNEL: &str = "\
@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=offs < n)


";

/// Launches `relu_kernel` on `x` into `y`.
const LAUNCH: &str = "\
y = torch.empty_like(x)
relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
";

fn indent(body: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    body.lines()
        .map(|l| {
            if l.is_empty() {
                String::new()
            } else {
                format!("{pad}{l}\n")
            }
        })
        .collect()
}

/// A full candidate: imports, `relu_kernel`, `prelude` at module level, and `ModelNew` whose
/// `forward(self, x)` runs `body`.
fn candidate(prelude: &str, body: &str) -> String {
    format!(
        "{HEADER}{KERNEL}{prelude}\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n{}",
        indent(body, 8)
    )
}

fn honest(body_after_launch: &str) -> String {
    candidate("", &format!("{LAUNCH}{body_after_launch}"))
}

/// The codes reported under `strict`, with their severities.
fn findings(source: &str) -> Vec<(String, Severity)> {
    verify(source, &Policy::default())
        .findings
        .into_iter()
        .map(|f| (f.code, f.severity))
        .collect()
}

#[track_caller]
fn fires(source: &str, code: &str) {
    assert!(
        RULES.iter().any(|r| r.info.code == code),
        "`{code}` is not a rule"
    );
    let found = findings(source);
    assert!(
        found.iter().any(|(c, _)| c == code),
        "`{code}` not reported for:\n{source}\n{found:?}"
    );
}

#[track_caller]
fn silent(source: &str, code: &str) {
    let found = findings(source);
    assert!(
        !found.iter().any(|(c, _)| c == code),
        "`{code}` reported for:\n{source}\n{found:?}"
    );
}

#[test]
fn baseline_honest_candidate_is_clean() {
    let src = honest("return y\n");
    assert!(findings(&src).is_empty(), "{:?}", findings(&src));
}

#[test]
fn syntax_error() {
    let report = verify(
        "import torch\n\nclass ModelNew(nn.Module)\n    pass\n",
        &Policy::default(),
    );
    assert_eq!(report.findings.len(), 1);
    let f = &report.findings[0];
    assert_eq!(f.code, "syntax-error");
    assert_eq!(f.severity, Severity::Reject);
    assert_eq!((f.line, f.column), (Some(3), Some(26)));
    assert!(report.rejected());
    silent(&honest("return y\n"), "syntax-error");
    // Even the most lenient policy file cannot turn it off.
    let lenient = Policy::preset("lenient").unwrap();
    assert!(verify("def (", &lenient).rejected());
}

#[test]
fn missing_model_new() {
    fires(
        &format!("{HEADER}{KERNEL}class Solution(nn.Module):\n    pass\n"),
        "missing-model-new",
    );
    fires(
        &format!("{HEADER}{KERNEL}from solution import ModelNew\n"),
        "missing-model-new",
    );
    silent(&honest("return y\n"), "missing-model-new");
}

#[test]
fn missing_forward() {
    let src = format!(
        "{HEADER}{KERNEL}class ModelNew(nn.Module):\n    def run(self, x):\n{}",
        indent(LAUNCH, 8)
    );
    fires(&src, "missing-forward");
    // `forward` inherited from a helper base class of the same file counts.
    let inherited = format!(
        "{HEADER}{KERNEL}class Base(nn.Module):\n    def forward(self, x):\n{}        return y\n\n\nclass ModelNew(Base):\n    pass\n",
        indent(LAUNCH, 8)
    );
    silent(&inherited, "missing-forward");
    silent(&honest("return y\n"), "missing-forward");
}

#[test]
fn model_new_inherits_model() {
    let model =
        "class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n\n\n";
    fires(
        &format!("{HEADER}{model}class ModelNew(Model):\n    pass\n"),
        "model-new-inherits-model",
    );
    fires(
        &format!("{HEADER}{model}ModelNew = Model\n"),
        "model-new-inherits-model",
    );
    let honest_with_reference = format!("{HEADER}{model}{}", &honest("return y\n")[HEADER.len()..]);
    silent(&honest_with_reference, "model-new-inherits-model");
}

#[test]
fn no_triton_kernel() {
    fires(
        &format!(
            "{HEADER}class ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
        ),
        "no-triton-kernel",
    );
    silent(&honest("return y\n"), "no-triton-kernel");
}

#[test]
fn no_kernel_launch() {
    fires(&candidate("", "return x.clone()\n"), "no-kernel-launch");
    // Launched from a helper function, a helper method or a submodule: all on the path.
    let helper = candidate(
        &format!("def launch(x):\n{}    return y\n", indent(LAUNCH, 4)),
        "return launch(x)\n",
    );
    silent(&helper, "no-kernel-launch");
    let sub = format!(
        "{HEADER}{KERNEL}class Block(nn.Module):\n    def forward(self, x):\n{}        return y\n\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.block = Block()\n\n    def forward(self, x):\n        return self.block(x)\n",
        indent(LAUNCH, 8)
    );
    silent(&sub, "no-kernel-launch");
}

/// Module-level code for the submodule tests: for each shape that can hold work, a version that
/// launches `relu_kernel` and one that does not.
const HOLDERS: &str = "\
def relu_launch(x):
    y = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y


def no_launch(x):
    return x.clone()


class ReluModule(nn.Module):
    def forward(self, x):
        return relu_launch(x)


class NoKernelModule(nn.Module):
    def forward(self, x):
        return x.clone()


class ReluCallable:
    def __call__(self, x):
        return relu_launch(x)


class NoKernelCallable:
    def __call__(self, x):
        return x.clone()


class Outer(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)


class OuterRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = ReluModule()

    def forward(self, x):
        return self.inner(x)


class OuterNoKernel(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = NoKernelModule()

    def forward(self, x):
        return self.inner(x)
";

/// A candidate with [`HOLDERS`] whose `ModelNew.__init__(self, op=None)` runs `init` and whose
/// `forward` runs `forward`.
fn holder_model(init: &str, forward: &str) -> String {
    format!(
        "import functools\n{HEADER}{KERNEL}{HOLDERS}\n\nclass ModelNew(nn.Module):\n    def __init__(self, op=None):\n        super().__init__()\n{}\n    def forward(self, x):\n{}",
        indent(init, 8),
        indent(forward, 8)
    )
}

/// `(what, __init__ body, forward body)`; `{M}` is a module class, `{F}` a function, `{C}` a
/// plain class with `__call__`, `{O}` a module holding an `{M}`.
const HOLDER_SHAPES: &[(&str, &str, &str)] = &[
    (
        "nn.Sequential",
        "self.net = nn.Sequential({M}(), {M}())\n",
        "return self.net(x)\n",
    ),
    (
        "nn.Sequential(*comprehension)",
        "self.net = nn.Sequential(*[{M}() for _ in range(3)])\n",
        "return self.net(x)\n",
    ),
    (
        "nn.Sequential(*local list built in a loop)",
        "layers = []\nfor _ in range(3):\n    layers.append({M}())\nlayers += [{M}()]\nself.net = nn.Sequential(*layers)\n",
        "return self.net(x)\n",
    ),
    (
        "nn.ModuleList iterated",
        "self.layers = nn.ModuleList([{M}() for _ in range(3)])\n",
        "for layer in self.layers:\n    x = layer(x)\nreturn x\n",
    ),
    (
        "nn.ModuleList appended to, indexed",
        "self.layers = nn.ModuleList()\nfor _ in range(3):\n    self.layers.append({M}())\n",
        "for i in range(len(self.layers)):\n    x = self.layers[i](x)\nreturn x\n",
    ),
    (
        "nn.ModuleDict by key",
        "self.heads = nn.ModuleDict({'a': {M}(), 'b': {M}()})\n",
        "return self.heads['a'](x)\n",
    ),
    (
        "nn.ModuleDict items",
        "self.heads = nn.ModuleDict()\nself.heads['a'] = {M}()\n",
        "for name, head in self.heads.items():\n    x = head(x)\nreturn x\n",
    ),
    (
        "attribute module",
        "self.block = {M}()\n",
        "return self.block(x)\n",
    ),
    (
        "module inside a module",
        "self.block = {O}()\n",
        "return self.block(x)\n",
    ),
    ("stored function", "self.op = {F}\n", "return self.op(x)\n"),
    (
        "stored functools.partial",
        "self.op = functools.partial({F})\n",
        "return self.op(x)\n",
    ),
    (
        "stored callable object",
        "self.op = {C}()\n",
        "return self.op(x)\n",
    ),
    ("helper function", "pass\n", "return {F}(x)\n"),
    (
        "tuple of modules",
        "self.pair = ({M}(), {M}())\n",
        "for m in self.pair:\n    x = m(x)\nreturn x\n",
    ),
];

fn holder_shape(init: &str, forward: &str, launching: bool) -> String {
    let fill = |s: &str| {
        let (m, f, c, o) = if launching {
            ("ReluModule", "relu_launch", "ReluCallable", "OuterRelu")
        } else {
            (
                "NoKernelModule",
                "no_launch",
                "NoKernelCallable",
                "OuterNoKernel",
            )
        };
        s.replace("{M}", m)
            .replace("{F}", f)
            .replace("{C}", c)
            .replace("{O}", o)
    };
    holder_model(&fill(init), &fill(forward))
}

#[test]
fn no_kernel_launch_follows_submodules_containers_and_stored_callables() {
    for &(what, init, forward) in HOLDER_SHAPES {
        let launching = holder_shape(init, forward, true);
        let found = findings(&launching);
        assert!(
            found.is_empty(),
            "{what}: the launching version is not clean: {found:?}\n{launching}"
        );
        // Every path is resolved and none launches: rejected, under every preset.
        let idle = holder_shape(init, forward, false);
        for preset in crucible_verify::PRESETS {
            let report = verify(&idle, &Policy::preset(preset).unwrap());
            assert!(
                report
                    .findings
                    .iter()
                    .any(|f| f.code == "no-kernel-launch" && f.severity >= Severity::Flag),
                "{what}: no `no-kernel-launch` under {preset}: {:?}\n{idle}",
                report.findings
            );
        }
    }
}

#[test]
fn no_kernel_launch_leaves_unresolved_calls_to_the_runtime_check() {
    for (init, forward) in [
        // A callable given to the constructor.
        ("self.op = op\n", "return self.op(x)\n"),
        // An attribute nothing in the file assigns.
        ("pass\n", "return self.impl(x)\n"),
        // Looked up by name.
        ("pass\n", "return getattr(self, 'layer_' + str(0))(x)\n"),
        // Built by a function whose result is not followed.
        (
            "self.layers = nn.ModuleList(op.build())\n",
            "for layer in self.layers:\n    x = layer(x)\nreturn x\n",
        ),
        // A container of which one element is unknown.
        (
            "self.net = nn.Sequential(NoKernelModule(), op)\n",
            "return self.net(x)\n",
        ),
        // A function from a dict.
        (
            "self.table = {'relu': relu_launch}\n",
            "return self.table['relu'](x)\n",
        ),
        // A method of an unknown value.
        ("pass\n", "return op.run(x)\n"),
        // A module given to a module's constructor.
        (
            "self.block = Outer(NoKernelModule())\n",
            "return self.block(x)\n",
        ),
        // A callable passed through a parameter of a helper.
        ("pass\n", "return (lambda f: f(x))(op)\n"),
    ] {
        let src = holder_model(init, forward);
        silent(&src, "no-kernel-launch");
    }
    // A kernel picked from a tuple of kernels is launched.
    let table = holder_model(
        "self.kernels = (relu_kernel, relu_kernel)\n",
        "y = torch.empty_like(x)\nself.kernels[0][(1,)](x, y, x.numel(), BLOCK=1024)\nreturn y\n",
    );
    assert!(findings(&table).is_empty(), "{:?}", findings(&table));
    // Unresolved, but no host code refers to any kernel: nothing can launch one.
    let src = format!(
        "{HEADER}{KERNEL}class ModelNew(nn.Module):\n    def __init__(self, op=None):\n        super().__init__()\n        self.op = op\n\n    def forward(self, x):\n        return self.op(x)\n"
    );
    fires(&src, "no-kernel-launch");
}

#[test]
fn torch_compute_in_submodules_is_on_the_forward_path() {
    let torch_gelu = "class TorchGelu(nn.Module):\n    def forward(self, x):\n        return torch.nn.functional.gelu(x)\n";
    for (init, forward) in [
        (
            "self.net = nn.Sequential(ReluModule(), TorchGelu())\n",
            "return self.net(x)\n",
        ),
        (
            "self.net = nn.Sequential(ReluModule(), nn.GELU())\n",
            "return self.net(x)\n",
        ),
        (
            "layers = [ReluModule()]\nlayers.append(TorchGelu())\nself.layers = nn.ModuleList(layers)\n",
            "for layer in self.layers:\n    x = layer(x)\nreturn x\n",
        ),
        (
            "self.heads = nn.ModuleDict({'a': ReluModule(), 'b': nn.Linear(8, 8)})\n",
            "return self.heads['b'](x)\n",
        ),
        (
            "if op:\n    self.act = ReluModule()\nelse:\n    self.act = TorchGelu()\n",
            "return self.act(x)\n",
        ),
        (
            "self.block = OuterRelu()\nself.post = TorchGelu()\n",
            "return self.post(self.block(x))\n",
        ),
    ] {
        let src = holder_model(init, forward)
            .replace("class Outer(", &format!("{torch_gelu}\n\nclass Outer("));
        fires(&src, "torch-compute-in-forward");
        silent(&src, "no-kernel-launch");
    }
    // A subclass of a PyTorch layer that keeps its `forward` runs PyTorch.
    let sub = holder_model(
        "self.fc = MyLinear(8, 8)\n",
        "return relu_launch(self.fc(x))\n",
    )
    .replace(
        "class Outer(",
        "class MyLinear(nn.Linear):\n    pass\n\n\nclass Outer(",
    );
    fires(&sub, "torch-compute-in-forward");
}

#[test]
fn unused_kernel() {
    let extra = "@triton.jit\ndef old_kernel(x_ptr, n, BLOCK: tl.constexpr):\n    tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)\n";
    let src = candidate(extra, &format!("{LAUNCH}return y\n"));
    let found = findings(&src);
    assert!(
        found.contains(&("unused-kernel".to_string(), Severity::Info)),
        "{found:?}"
    );
    // A device function called by a launched kernel is used.
    let device = "@triton.jit\ndef helper(x):\n    return x\n\n\n@triton.jit\ndef k2(x_ptr, n, BLOCK: tl.constexpr):\n    tl.store(x_ptr + tl.arange(0, BLOCK), helper(0.0))\n";
    let launch_k2 = "k2[(1,)](x, x.numel(), BLOCK=1024)\n";
    silent(
        &candidate(device, &format!("{LAUNCH}{launch_k2}return y\n")),
        "unused-kernel",
    );
    // Beside a call the verifier cannot resolve, a kernel that host code refers to may be the
    // one it launches; a kernel nothing refers to is still dead.
    let referenced =
        format!("{extra}\n\ndef clear(x):\n    old_kernel[(1,)](x, x.numel(), BLOCK=1024)\n");
    let unresolved = format!("{LAUNCH}self.post(y)\nreturn y\n");
    silent(&candidate(&referenced, &unresolved), "unused-kernel");
    fires(&candidate(extra, &unresolved), "unused-kernel");
    // Without the unresolved call, the helper that refers to it is not on the path.
    fires(
        &candidate(&referenced, &format!("{LAUNCH}return y\n")),
        "unused-kernel",
    );
}

#[test]
fn kernel_without_store() {
    let noop = "@triton.jit\ndef noop(x_ptr, n, BLOCK: tl.constexpr):\n    x = tl.load(x_ptr + tl.arange(0, BLOCK))\n";
    fires(
        &candidate(
            noop,
            "noop[(1,)](x, x.numel(), BLOCK=1024)\nreturn x.clone()\n",
        ),
        "kernel-without-store",
    );
    let atomic = "@triton.jit\ndef count(x_ptr, c_ptr, BLOCK: tl.constexpr):\n    tl.atomic_add(c_ptr, tl.sum(tl.load(x_ptr + tl.arange(0, BLOCK)), axis=0))\n";
    silent(
        &candidate(
            atomic,
            &format!(
                "{LAUNCH}c = torch.zeros(1, device=x.device)\ncount[(1,)](x, c, BLOCK=1024)\nreturn y\n"
            ),
        ),
        "kernel-without-store",
    );
}

#[test]
fn torch_compute_in_forward() {
    for body in [
        "return torch.matmul(y, y)\n",
        "return torch.nn.functional.gelu(y)\n",
        "return y.sum(dim=-1)\n",
        "return y @ y\n",
        "return y * 2\n",
        "y += 1\nreturn y\n",
        "return -y\n",
        "return y[y > 0]\n",
        "return torch.ops.aten.mm(y, y)\n",
    ] {
        fires(&honest(body), "torch-compute-in-forward");
    }
    // Running a layer built in `__init__` is compute; holding it for its weights is not.
    let layer = |forward: &str| {
        format!(
            "{HEADER}{KERNEL}class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.linear = nn.Linear(8, 8)\n\n    def forward(self, x):\n{}",
            indent(forward, 8)
        )
    };
    fires(
        &layer("return self.linear(x)\n"),
        "torch-compute-in-forward",
    );
    silent(
        &layer(&format!(
            "w = self.linear.weight.t().contiguous()\nb = self.linear.bias\n{LAUNCH}return y.view(-1, 8)\n"
        )),
        "torch-compute-in-forward",
    );
    // Evasions: an attribute bound to a torch function, unbound layer methods, `operator`,
    // dunder methods, and running the reference `Model`.
    let bound = |init: &str, forward: &str| {
        format!(
            "import operator\n{HEADER}{KERNEL}class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n{}\n    def forward(self, x):\n{}",
            indent(init, 8),
            indent(forward, 8)
        )
    };
    for (init, forward) in [
        ("self.act = torch.relu\n", "return self.act(x)\n"),
        (
            "self.linear = nn.Linear(8, 8)\n",
            "return nn.Linear.forward(self.linear, x)\n",
        ),
        ("self.ref = Model()\n", "return self.ref(x)\n"),
        ("pass\n", "return operator.matmul(x, x)\n"),
        ("pass\n", "x = x.contiguous()\nreturn x.__matmul__(x)\n"),
    ] {
        fires(&bound(init, forward), "torch-compute-in-forward");
    }
    // Compute hidden in a helper that forward calls is on the path.
    fires(
        &candidate(
            "def helper(t):\n    return t.softmax(-1)\n",
            "return helper(x)\n",
        ),
        "torch-compute-in-forward",
    );
    // Allocation, views, shape queries and scalar arithmetic are fine.
    silent(
        &honest(
            "n = x.shape[0] * x.shape[1]\nz = torch.zeros((n,), device=x.device)\nreturn y.reshape(x.size(0), -1).permute(1, 0).contiguous()\n",
        ),
        "torch-compute-in-forward",
    );
}

#[test]
fn try_except_fallback() {
    fires(
        &candidate(
            "",
            &format!(
                "try:\n{}    return y\nexcept Exception:\n    return torch.relu(x)\n",
                indent(LAUNCH, 4)
            ),
        ),
        "try-except-fallback",
    );
    fires(
        &format!(
            "import contextlib\n{}",
            honest("with contextlib.suppress(RuntimeError):\n    y = y.view(-1)\nreturn y\n")
        ),
        "try-except-fallback",
    );
    // A try/except in `__init__` or at module level is not on the forward path.
    silent(
        &format!(
            "try:\n    import numpy\nexcept ImportError:\n    numpy = None\n{}",
            honest("return y\n")
        ),
        "try-except-fallback",
    );
    silent(
        &honest("try:\n    pass\nfinally:\n    pass\nreturn y\n"),
        "try-except-fallback",
    );
}

#[test]
fn monkeypatch() {
    fires(
        &candidate(
            "torch.allclose = lambda *a, **k: True\n",
            &format!("{LAUNCH}return y\n"),
        ),
        "monkeypatch",
    );
    fires(
        &candidate(
            "import time\ntime.perf_counter = lambda: 0.0\n",
            &format!("{LAUNCH}return y\n"),
        ),
        "monkeypatch",
    );
    fires(
        &candidate(
            "setattr(torch.Tensor, '__eq__', lambda a, b: True)\n",
            &format!("{LAUNCH}return y\n"),
        ),
        "monkeypatch",
    );
    fires(
        &candidate(
            "torch.backends.cuda.matmul.allow_tf32 = True\n",
            &format!("{LAUNCH}return y\n"),
        ),
        "monkeypatch",
    );
    // Assigning attributes of your own objects is fine.
    silent(
        &honest("self.last_numel = x.numel()\nreturn y\n"),
        "monkeypatch",
    );
}

#[test]
fn forbidden_import() {
    for module in [
        "import inspect",
        "import gc",
        "import ctypes",
        "from threading import Thread",
        "import subprocess",
        "from os import system",
        "import torch.utils.cpp_extension",
    ] {
        fires(
            &format!("{module}\n{}", honest("return y\n")),
            "forbidden-import",
        );
    }
    silent(
        &format!("import math\nimport os\n{}", honest("return y\n")),
        "forbidden-import",
    );
}

#[test]
fn forbidden_call() {
    fires(&honest("return eval('y')\n"), "forbidden-call");
    fires(
        &format!("import sys\n{}", honest("f = sys._getframe(1)\nreturn y\n")),
        "forbidden-call",
    );
    fires(
        &honest("op = getattr(torch, 'relu')\nreturn y\n"),
        "forbidden-call",
    );
    fires(
        &format!(
            "import os\n{}",
            honest("os.system('nvidia-smi')\nreturn y\n")
        ),
        "forbidden-call",
    );
    fires(
        &honest("g = self.forward.__globals__\nreturn y\n"),
        "forbidden-call",
    );
    // Ending or signalling the process, however it is imported.
    for (prelude, body) in [
        ("import sys\n", "sys.exit(0)\n"),
        ("import os\n", "os._exit(0)\n"),
        ("import os\n", "os.abort()\n"),
        ("import os\n", "os.kill(os.getpid(), 9)\n"),
        ("import os\n", "os.killpg(0, 9)\n"),
        ("from sys import exit as leave\n", "leave(1)\n"),
        ("from os import _exit\n", "_exit(1)\n"),
        ("import signal\n", "signal.raise_signal(signal.SIGKILL)\n"),
        ("", "exit()\n"),
        ("", "quit(0)\n"),
    ] {
        let src = format!("{prelude}{}", honest(&format!("{body}return y\n")));
        let report = verify(&src, &Policy::default());
        let line = src.lines().position(|l| l.contains(body.trim())).unwrap() + 1;
        assert!(
            report.findings.iter().any(|f| f.code == "forbidden-call"
                && f.line == Some(line as u32)
                && f.message.contains("crash")),
            "{body}: {:#?}",
            report.findings
        );
    }
    // A method of your own called `exit` is not the builtin.
    silent(
        &candidate(
            "def exit(code):\n    return code\n",
            &format!("{LAUNCH}exit(0)\nreturn y\n"),
        ),
        "forbidden-call",
    );
    // `getattr` on your own objects is fine.
    silent(
        &honest("eps = getattr(self, 'eps', 1e-5)\nreturn y\n"),
        "forbidden-call",
    );
}

#[test]
fn file_io() {
    fires(
        &honest("data = open('/tmp/out.bin', 'rb').read()\nreturn y\n"),
        "file-io",
    );
    fires(
        &honest("return torch.load('/tmp/expected.pt')\n"),
        "file-io",
    );
    fires(
        &format!(
            "from pathlib import Path\n{}",
            honest("Path('/tmp/x').write_text('hi')\nreturn y\n")
        ),
        "file-io",
    );
    silent(&honest("return y\n"), "file-io");
}

#[test]
fn cuda_stream() {
    fires(
        &honest("s = torch.cuda.Stream()\nreturn y\n"),
        "cuda-stream",
    );
    fires(
        &candidate(
            "",
            &format!(
                "with torch.cuda.stream(torch.cuda.Stream()):\n{}return y\n",
                indent(LAUNCH, 4)
            ),
        ),
        "cuda-stream",
    );
    fires(
        &honest("g = torch.cuda.CUDAGraph()\nreturn y\n"),
        "cuda-stream",
    );
    // Synchronizing the current stream is not a side stream.
    silent(
        &honest("torch.cuda.synchronize()\nreturn y\n"),
        "cuda-stream",
    );
}

#[test]
fn torch_compile() {
    fires(
        &honest("f = torch.compile(lambda t: t)\nreturn f(y)\n"),
        "torch-compile",
    );
    fires(
        &format!("import torch._inductor.config\n{}", honest("return y\n")),
        "torch-compile",
    );
    silent(
        &honest("if torch.compiler.is_compiling():\n    pass\nreturn y\n"),
        "torch-compile",
    );
}

#[test]
fn precision_downcast() {
    fires(&honest("return y.half()\n"), "precision-downcast");
    fires(
        &honest("return y.to(torch.bfloat16)\n"),
        "precision-downcast",
    );
    fires(
        &honest("return y.to(dtype=torch.float16)\n"),
        "precision-downcast",
    );
    fires(
        &honest("torch.set_float32_matmul_precision('medium')\nreturn y\n"),
        "precision-downcast",
    );
    // Keeping the input's dtype, upcasting, and casts inside kernels are fine.
    silent(
        &honest("return y.to(x.dtype).float()\n"),
        "precision-downcast",
    );
    let kernel_cast = "@triton.jit\ndef k(x_ptr, BLOCK: tl.constexpr):\n    v = tl.load(x_ptr + tl.arange(0, BLOCK))\n    tl.store(x_ptr + tl.arange(0, BLOCK), v.to(tl.float16))\n";
    silent(
        &candidate(
            kernel_cast,
            &format!("{LAUNCH}k[(1,)](y, BLOCK=16)\nreturn y\n"),
        ),
        "precision-downcast",
    );
}

/// A candidate whose kernel `k` loads tiles `a` and `b`, runs `body`, and stores `acc`.
fn kernel_with(body: &str) -> String {
    let kernel = format!(
        "DT16 = tl.float16\n\n\n@triton.jit\ndef k(a_ptr, b_ptr, c_ptr, DT: tl.constexpr, BLOCK: tl.constexpr):\n    offs = tl.arange(0, BLOCK)\n    a = tl.load(a_ptr + offs[:, None] * BLOCK + offs[None, :])\n    b = tl.load(b_ptr + offs[:, None] * BLOCK + offs[None, :])\n    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)\n{}    tl.store(c_ptr + offs[:, None] * BLOCK + offs[None, :], acc)\n",
        indent(body, 4)
    );
    candidate(
        &kernel,
        &format!("{LAUNCH}k[(1,)](x, x, y, DT=tl.float32, BLOCK=16)\nreturn y\n"),
    )
}

#[test]
fn precision_downcast_in_kernels_feeding_dot_or_reductions() {
    for body in [
        // The shape that passed as correct with a 5.2x "speedup" on an fp32 matmul.
        "acc += tl.dot(a.to(tl.float16), b.to(tl.float16))\n",
        "a16 = a.to(tl.float16)\nb16 = b.to(tl.float16)\nacc = tl.dot(a16, b16, acc)\n",
        "acc = tl.dot(tl.cast(a, tl.bfloat16), b, acc=acc)\n",
        "acc = tl.dot(a.to(dtype=tl.float8e4nv), b)\n",
        "acc = tl.dot(a.to(DT16), b.to(DT16), acc)\n",
        "dt = tl.bfloat16\nacc = tl.dot(a.to(dt), b, acc)\n",
        // Through elementwise work and an upcast: the precision is already gone.
        "h = tl.cast(a, dtype=tl.float16)\ng = tl.exp(h.to(tl.float32) * 2.0)\nacc += tl.sum(g, axis=1)[:, None]\n",
        "acc += tl.max(a.to(tl.bfloat16), axis=0)[None, :]\n",
        "acc += a.to(tl.float16).sum(axis=0)[None, :]\n",
        "acc += tl.cumsum(a.to(tl.float16), axis=1)\n",
        // Cast late in one iteration, consumed in the next.
        "p = a\nfor i in range(4):\n    acc = tl.dot(p, b, acc)\n    p = a.to(tl.float16)\n",
        // Cast in one branch only.
        "if BLOCK > 16:\n    a = a.to(tl.float16)\nacc = tl.dot(a, b, acc)\n",
    ] {
        fires(&kernel_with(body), "precision-downcast");
    }
    let found = findings(&kernel_with("acc += tl.dot(a.to(tl.float16), b)\n"));
    assert!(
        found.contains(&("precision-downcast".to_string(), Severity::Reject)),
        "{found:?}"
    );
    for body in [
        // TF32 is how Triton runs an fp32 `tl.dot`; neither keyword is a cast.
        "acc = tl.dot(a, b, acc, input_precision=\"tf32\")\n",
        "acc = tl.dot(a, b, acc, allow_tf32=True)\n",
        "acc = tl.dot(a, b.to(a.dtype), acc)\n",
        "acc = tl.dot(a.to(tl.float32), b.to(c_ptr.dtype.element_ty), acc)\n",
        // A dtype the verifier cannot resolve.
        "acc = tl.dot(a.to(DT), b.to(DT), acc)\n",
        // Casting a result for the store, not an operand.
        "acc = tl.dot(a, b, acc)\ntl.store(c_ptr, acc.to(tl.float16))\n",
        "s = tl.sum(a, axis=1)\ntl.store(c_ptr + offs, (s / BLOCK).to(tl.bfloat16))\n",
        // The cast value is replaced before the reduction.
        "a = a.to(tl.float16)\ntl.store(c_ptr, a)\na = tl.load(b_ptr + offs[:, None] * BLOCK + offs[None, :])\nacc += tl.sum(a, axis=0)[None, :]\n",
        // An integer cast for addressing.
        "i = offs.to(tl.int64)\nacc += tl.sum(tl.load(a_ptr + i[:, None] * BLOCK + offs[None, :]), axis=0)[None, :]\n",
    ] {
        silent(&kernel_with(body), "precision-downcast");
    }
}

#[test]
fn identity_keyed_cache() {
    let cached = format!(
        "key = x.data_ptr()\nif key in _cache:\n    return _cache[key]\n{LAUNCH}_cache[key] = y\nreturn y\n"
    );
    fires(&candidate("_cache = {}\n", &cached), "identity-keyed-cache");
    fires(
        &candidate(
            "_seen = {}\n",
            &format!("{LAUNCH}_seen[id(x)] = y\nreturn y\n"),
        ),
        "identity-keyed-cache",
    );
    // A dict that lives only for one call is not a cache.
    silent(
        &candidate(
            "",
            &format!("local = {{}}\nlocal[x.data_ptr()] = 1\n{LAUNCH}return y\n"),
        ),
        "identity-keyed-cache",
    );
}

#[test]
fn shape_keyed_cache() {
    let src = format!(
        "{HEADER}{KERNEL}class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.bufs = {{}}\n\n    def forward(self, x):\n        if x.shape not in self.bufs:\n            self.bufs[x.shape] = torch.empty_like(x)\n        y = self.bufs[x.shape]\n        relu_kernel[(1,)](x, y, x.numel(), BLOCK=1024)\n        return y\n"
    );
    let found = findings(&src);
    assert!(
        found.contains(&("shape-keyed-cache".to_string(), Severity::Flag)),
        "{found:?}"
    );
    // Comparing a shape with a configuration attribute that forward never writes is a check.
    let check = format!(
        "{HEADER}{KERNEL}class ModelNew(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n        self.n = n\n\n    def forward(self, x):\n        assert x.shape[-1] == self.n\n{}        return y\n",
        indent(LAUNCH, 8)
    );
    silent(&check, "shape-keyed-cache");
}

#[test]
fn tensor_subclass() {
    fires(
        &candidate(
            "class Lazy(torch.Tensor):\n    pass\n",
            &format!("{LAUNCH}return y\n"),
        ),
        "tensor-subclass",
    );
    fires(
        &candidate(
            "class Mode:\n    def __torch_function__(self, func, types, args=(), kwargs=None):\n        return True\n",
            &format!("{LAUNCH}return y\n"),
        ),
        "tensor-subclass",
    );
    silent(&honest("return y\n"), "tensor-subclass");
}

#[test]
fn unexpected_import() {
    let found = findings(&format!(
        "from reference import Model\n{}",
        honest("return y\n")
    ));
    assert!(
        found.contains(&("unexpected-import".to_string(), Severity::Flag)),
        "{found:?}"
    );
    silent(
        &format!(
            "import math\nfrom typing import Optional\nimport numpy as np\n{}",
            honest("return y\n")
        ),
        "unexpected-import",
    );
}

#[test]
fn policies_change_severities_and_can_turn_rules_off() {
    let src = honest("return y * 2\n");
    let strict = verify(&src, &Policy::default());
    assert!(strict.rejected());
    let lenient = verify(&src, &Policy::preset("lenient").unwrap());
    assert!(!lenient.rejected() && lenient.flagged());
    let off = Policy::from_toml("[severity]\ntorch-compute-in-forward = \"off\"\n").unwrap();
    assert!(verify(&src, &off).findings.is_empty());
}

#[test]
fn findings_have_positions_and_messages_for_the_model() {
    let src = honest("return torch.matmul(y, y)\n");
    let report = verify(&src, &Policy::default());
    let f = report
        .findings
        .iter()
        .find(|f| f.code == "torch-compute-in-forward")
        .unwrap();
    let line = src
        .lines()
        .position(|l| l.contains("torch.matmul"))
        .unwrap()
        + 1;
    assert_eq!(f.line, Some(line as u32));
    assert_eq!(f.column, Some(16));
    assert!(
        f.message.contains("`torch.matmul(...)`") && f.message.contains("`ModelNew.forward`"),
        "{}",
        f.message
    );
}

#[test]
fn pathological_inputs_do_not_crash() {
    let policy = Policy::default();
    assert!(verify("", &policy).rejected());
    let deep_expr = format!("x = {}1\n", "1 + ".repeat(20_000));
    verify(&deep_expr, &policy);
    let deep_unary = format!("x = {}1\n", "-".repeat(5_000));
    verify(&deep_unary, &policy);
    let nested_parens = format!("x = {}1{}\n", "(".repeat(5_000), ")".repeat(5_000));
    verify(&nested_parens, &policy);
    let nested_calls = format!(
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return {}x{}\n",
        "f(".repeat(3_000),
        ")".repeat(3_000)
    );
    verify(&nested_calls, &policy);
    verify(
        "class ModelNew:\n    def forward(self, x):\n        return 'é' + x\n",
        &policy,
    );
    // Deeply nested containers and very wide ones stored on `self`.
    let nested_lists = format!(
        "class ModelNew(nn.Module):\n    def __init__(self):\n        self.x = {}B(){}\n        self.y = nn.Sequential({})\n\n    def forward(self, x):\n        return self.y(self.x[0](x))\n\n\nclass B(nn.Module):\n    pass\n",
        "[".repeat(3_000),
        "]".repeat(3_000),
        "B(), ".repeat(3_000)
    );
    verify(&nested_lists, &policy);
    // Deep expressions and deeply nested loops inside a kernel body.
    let mut loops = String::from("@triton.jit\ndef k(x_ptr):\n");
    for depth in 0..90 {
        loops.push_str(&format!(
            "{}for i{depth} in range(2):\n",
            " ".repeat(4 * (depth + 1))
        ));
    }
    loops.push_str(&format!(
        "{}s = tl.sum(x.to(tl.float16) + {}1)\n",
        " ".repeat(4 * 91),
        "1 + ".repeat(5_000)
    ));
    verify(&format!("{HEADER}{loops}"), &policy);
}
