//! `forbidden-import`

use crate::checker::Checker;

declare_rule! {
    /// ## What it does
    /// Reports imports of modules (and functions) a kernel solution has no use for and that
    /// reach outside the kernel: introspection (`inspect`, `gc`), native code (`ctypes`,
    /// `cffi`), concurrency (`threading`, `multiprocessing`, `concurrent`, `asyncio`),
    /// processes and signals (`subprocess`, `signal`, `pty`, `os.system`, `os.fork`, ...),
    /// networking (`socket`, `urllib`, `http`, `requests`), dynamic imports (`importlib`,
    /// `builtins`), serialization (`pickle`, `marshal`, `shelve`), frame access
    /// (`sys._getframe`, `sys.settrace`), and other kernel toolchains
    /// (`torch.utils.cpp_extension`, `cupy`, `numba`, `pycuda`).
    ///
    /// ## Why is this bad?
    /// These are the tools of reward hacks: reading the judge's frames to find the expected
    /// output, running work on another thread so the timer misses it, loading precomputed
    /// results, or compiling CUDA instead of writing Triton.
    ///
    /// ## Example
    /// ```python
    /// import inspect
    ///
    /// def forward(self, x):
    ///     return inspect.currentframe().f_back.f_locals["expected"]
    /// ```
    ///
    /// ## Use instead
    /// Import only what the kernel needs: `torch`, `triton`, `triton.language`, `math`.
    pub(crate) const FORBIDDEN_IMPORT = {
        code: "forbidden-import",
        summary: "Imports a module a kernel has no use for (inspect, gc, ctypes, threading, subprocess, ...).",
        strict: Reject,
        kernelbench: Reject,
        lenient: Reject,
    };
}

/// Forbidden modules (and everything under them), with the reason given to the model.
pub(crate) const FORBIDDEN: &[(&str, &str)] = &[
    ("inspect", "introspects the running program"),
    (
        "gc",
        "reaches other objects of the process through the garbage collector",
    ),
    ("ctypes", "calls native code"),
    ("cffi", "calls native code"),
    (
        "threading",
        "runs work on other threads, outside the timed region",
    ),
    (
        "_thread",
        "runs work on other threads, outside the timed region",
    ),
    ("multiprocessing", "runs work in other processes"),
    ("concurrent", "runs work on other threads or processes"),
    ("asyncio", "runs work outside the timed call"),
    ("subprocess", "starts processes"),
    ("signal", "handles or sends signals"),
    ("pty", "starts processes"),
    ("socket", "opens network connections"),
    ("urllib", "opens network connections"),
    ("http", "opens network connections"),
    ("requests", "opens network connections"),
    ("importlib", "imports modules dynamically"),
    ("builtins", "reaches (and can patch) the builtins"),
    ("pickle", "loads serialized objects"),
    ("marshal", "loads serialized code"),
    ("shelve", "loads serialized objects"),
    ("dill", "loads serialized objects"),
    ("sys._getframe", "reads the caller's frames"),
    ("sys.settrace", "traces the running program"),
    ("sys.setprofile", "traces the running program"),
    ("os.system", "runs shell commands"),
    ("os.popen", "runs shell commands"),
    ("os.fork", "starts processes"),
    ("os.kill", "sends signals"),
    (
        "torch.utils.cpp_extension",
        "compiles C++/CUDA instead of Triton",
    ),
    ("cupy", "runs CUDA code that is not Triton"),
    ("numba", "compiles kernels that are not Triton"),
    ("pycuda", "runs CUDA code that is not Triton"),
];

/// The reason `qual` (a module or a module member) is forbidden, if it is.
pub(crate) fn forbidden(qual: &str) -> Option<&'static str> {
    // Most references are to torch and triton: only one torch module is forbidden.
    if qual.starts_with("triton.")
        || (qual.starts_with("torch.") && !qual.starts_with("torch.utils.cpp_extension"))
    {
        return None;
    }
    for &(module, why) in FORBIDDEN {
        if qual == module
            || qual
                .strip_prefix(module)
                .is_some_and(|rest| rest.starts_with('.'))
        {
            return Some(why);
        }
    }
    let prefixed = ["os.exec", "os.spawn", "os.posix_spawn"];
    prefixed
        .iter()
        .any(|p| qual.starts_with(p))
        .then_some("starts processes")
}

pub(crate) fn check(cx: &mut Checker<'_, '_>) {
    let mut found = Vec::new();
    for import in &cx.facts.imports {
        if let Some(why) = forbidden(&import.qual) {
            found.push((
                import.range.start(),
                format!(
                    "imports `{}`, which {why}. A Triton solution only needs `torch`, `triton` \
                     and `math`; remove this import and whatever uses it.",
                    import.qual
                ),
            ));
        }
    }
    for (at, message) in found {
        cx.report(at, message);
    }
}
