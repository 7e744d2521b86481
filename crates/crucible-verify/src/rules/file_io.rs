//! `file-io`

use ruff_text_size::Ranged;

use crate::checker::Checker;

declare_rule! {
    /// ## What it does
    /// Reports file-system access: `open(...)`, `io.open`, `os.open`, `os.remove`,
    /// `os.listdir`, `os.walk`, `os.path.exists`, `pathlib`, `shutil`, `tempfile`, `glob`,
    /// `torch.save`/`torch.load`, `numpy.load`/`save`/`fromfile`, and `.read_text()`,
    /// `.write_text()`, `.read_bytes()`, `.write_bytes()`, `.tofile()`.
    ///
    /// ## Why is this bad?
    /// A kernel computes from its inputs. Reading files is how a candidate loads precomputed
    /// outputs or the reference's data, and writing them leaves state for later runs.
    ///
    /// ## Example
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def forward(self, x):
    ///         return torch.load("/tmp/expected.pt")
    /// ```
    ///
    /// ## Use instead
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def forward(self, x):
    ///         return relu_triton(x)
    /// ```
    pub(crate) const FILE_IO = {
        code: "file-io",
        summary: "Reads or writes files (`open`, `torch.load`, `pathlib`, ...).",
        strict: Reject,
        kernelbench: Flag,
        lenient: Reject,
    };
}

/// Qualified names (and name prefixes ending in `.`) that touch the file system.
const FILE_APIS: &[&str] = &[
    "io.open",
    "io.FileIO",
    "os.open",
    "os.fdopen",
    "os.remove",
    "os.unlink",
    "os.rename",
    "os.replace",
    "os.listdir",
    "os.scandir",
    "os.walk",
    "os.makedirs",
    "os.mkdir",
    "os.rmdir",
    "os.read",
    "os.write",
    "os.path.exists",
    "os.path.isfile",
    "os.path.isdir",
    "os.path.getsize",
    "torch.save",
    "torch.load",
    "numpy.load",
    "numpy.save",
    "numpy.savez",
    "numpy.savez_compressed",
    "numpy.fromfile",
    "numpy.loadtxt",
    "numpy.savetxt",
    "numpy.genfromtxt",
    "numpy.memmap",
    "pathlib.",
    "shutil.",
    "tempfile.",
    "glob.",
];

fn is_file_api(qual: &str) -> bool {
    FILE_APIS.iter().any(|api| {
        if api.ends_with('.') {
            qual.starts_with(api) || qual == &api[..api.len() - 1]
        } else {
            qual == *api
        }
    })
}

pub(crate) fn check(cx: &mut Checker<'_, '_>) {
    let mut found = Vec::new();
    for &(name, call) in &cx.facts.builtin_calls {
        if name == "open" {
            found.push((
                call.range().start(),
                "`open(...)` accesses the file system. A kernel computes its outputs from its \
                 inputs; remove the file access."
                    .to_string(),
            ));
        }
    }
    for r in &cx.facts.refs {
        if is_file_api(&r.qual) {
            found.push((
                r.range.start(),
                format!(
                    "`{}` accesses the file system. A kernel computes its outputs from its \
                     inputs; remove the file access.",
                    r.qual
                ),
            ));
        }
    }
    for &(name, call) in &cx.facts.method_calls {
        if matches!(
            name,
            "read_text" | "write_text" | "read_bytes" | "write_bytes" | "tofile"
        ) {
            found.push((
                call.range().start(),
                format!(
                    "`.{name}()` accesses the file system. A kernel computes its outputs from \
                     its inputs; remove the file access."
                ),
            ));
        }
    }
    for (at, message) in found {
        cx.report(at, message);
    }
}
