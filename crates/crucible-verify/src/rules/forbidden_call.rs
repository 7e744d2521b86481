//! `forbidden-call`

use ruff_python_ast::Expr;
use ruff_text_size::Ranged;

use crate::checker::Checker;
use crate::rules::forbidden_import::forbidden;

declare_rule! {
    /// ## What it does
    /// Reports calls and references that execute code dynamically or reach outside the
    /// kernel: `exec`, `eval`, `compile`, `__import__`, `globals()`, `vars()`, `breakpoint()`,
    /// `input()`; `getattr` on a module (which hides what is called); members of forbidden
    /// modules (`os.system`, `os.exec*`, `os.fork`, `sys._getframe`, `sys.settrace`,
    /// `sys.modules`, `ctypes.*`, `torch.utils.cpp_extension.load_inline`, ...); frame and
    /// code attributes (`f_back`, `f_locals`, `f_globals`, `__globals__`, `__code__`,
    /// `__closure__`, `__builtins__`, `__subclasses__`); and anything that ends or signals the
    /// process: `sys.exit`, `os._exit`, `os.abort`, `os.kill`, `os.killpg`,
    /// `signal.raise_signal`, `signal.pthread_kill`, and the `exit()` / `quit()` builtins.
    ///
    /// ## Why is this bad?
    /// Dynamic code hides what runs from every other check, and frame access reads the judge's
    /// state (for instance the expected outputs) from the calling frames. A solution that ends
    /// its own process returns no output: the judge records the run as `crashed`, and this
    /// finding says why before anything runs.
    ///
    /// ## Example
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def forward(self, x):
    ///         return getattr(torch, "mat" + "mul")(x, x)
    /// ```
    ///
    /// ## Use instead
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def forward(self, x):
    ///         return matmul_triton(x, x)
    /// ```
    pub(crate) const FORBIDDEN_CALL = {
        code: "forbidden-call",
        summary: "Calls `exec`/`eval`/`getattr(module, ...)`, process or frame APIs, or ends the process (`sys.exit`, `os._exit`, `os.kill`, ...).",
        strict: Reject,
        kernelbench: Flag,
        lenient: Reject,
    };
}

/// Members that end or signal the running process.
const PROCESS_EXITS: &[&str] = &[
    "os._exit",
    "os.abort",
    "os.kill",
    "os.killpg",
    "signal.pthread_kill",
    "signal.raise_signal",
    "sys.exit",
];

const FRAME_ATTRS: &[&str] = &[
    "f_back",
    "f_locals",
    "f_globals",
    "f_builtins",
    "f_code",
    "gi_frame",
    "cr_frame",
    "tb_frame",
    "__globals__",
    "__code__",
    "__closure__",
    "__builtins__",
    "__subclasses__",
];

pub(crate) fn check(cx: &mut Checker<'_, '_>) {
    let mut found = Vec::new();
    for &(name, call) in &cx.facts.builtin_calls {
        let why = match name {
            "exec" | "eval" | "compile" => "executes code built at run time",
            "__import__" => "imports a module dynamically",
            "globals" | "vars" | "locals" => "reaches variables by name at run time",
            "breakpoint" | "input" => "waits for interactive input",
            "exit" | "quit" => {
                found.push((
                    call.range().start(),
                    format!(
                        "`{name}()` ends the candidate process, so the judge gets no output and \
                         records a crash. Return the output tensor from `forward` instead."
                    ),
                ));
                continue;
            }
            "getattr" => {
                let Some(first) = call.arguments.args.first() else {
                    continue;
                };
                if cx.sem.qualname(first).is_none() {
                    continue;
                }
                "looks a module member up by name, hiding what is called"
            }
            _ => continue,
        };
        found.push((
            call.range().start(),
            format!(
                "`{name}(...)` {why}. Call the functions you need directly; a kernel solution \
                 needs no dynamic code."
            ),
        ));
    }
    for r in &cx.facts.refs {
        if PROCESS_EXITS.contains(&r.qual.as_str()) {
            found.push((
                r.range.start(),
                format!(
                    "`{}` ends or signals the candidate process, so the judge gets no output and \
                     records a crash. Return the output tensor from `forward` instead.",
                    r.qual
                ),
            ));
            continue;
        }
        let why = if r.qual == "sys.modules" || r.qual.starts_with("sys.modules.") {
            Some("reaches (and can replace) loaded modules")
        } else {
            forbidden(&r.qual)
        };
        if let Some(why) = why {
            found.push((
                r.range.start(),
                format!(
                    "`{}` {why}. Remove it: a kernel solution has no use for it.",
                    r.qual
                ),
            ));
        }
    }
    for &(attr, range) in &cx.facts.attrs {
        if FRAME_ATTRS.contains(&attr) {
            found.push((
                range.start(),
                format!(
                    "`.{attr}` reaches frames, code objects or builtins of the running program. \
                     Remove it: the kernel must compute its outputs from its inputs."
                ),
            ));
        }
    }
    for &(name, call) in &cx.facts.method_calls {
        if name == "currentframe"
            && let Expr::Attribute(a) = &*call.func
            && cx.sem.qualname(&a.value).is_none()
        {
            found.push((
                call.range().start(),
                "`currentframe()` reads the running program's frames. Remove it.".to_string(),
            ));
        }
    }
    for (at, message) in found {
        cx.report(at, message);
    }
}
