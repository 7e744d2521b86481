//! Suites: `builtin` (the tasks shipped in this binary), `kernelbench:levelN` (from a
//! KernelBench checkout) or a path (a directory of task files, or one file).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The builtin tasks, embedded so a copied binary carries them.
const BUILTIN: &[(&str, &str)] = &[
    (
        "01_relu.py",
        include_str!("../../../tasks/builtin/01_relu.py"),
    ),
    (
        "02_gelu_tanh.py",
        include_str!("../../../tasks/builtin/02_gelu_tanh.py"),
    ),
    (
        "03_bias_add_mul.py",
        include_str!("../../../tasks/builtin/03_bias_add_mul.py"),
    ),
    (
        "04_row_sum.py",
        include_str!("../../../tasks/builtin/04_row_sum.py"),
    ),
    (
        "05_row_max_mean.py",
        include_str!("../../../tasks/builtin/05_row_max_mean.py"),
    ),
    (
        "06_softmax.py",
        include_str!("../../../tasks/builtin/06_softmax.py"),
    ),
    (
        "07_rmsnorm.py",
        include_str!("../../../tasks/builtin/07_rmsnorm.py"),
    ),
    (
        "08_layernorm.py",
        include_str!("../../../tasks/builtin/08_layernorm.py"),
    ),
    (
        "09_matmul.py",
        include_str!("../../../tasks/builtin/09_matmul.py"),
    ),
    (
        "10_matmul_fp16.py",
        include_str!("../../../tasks/builtin/10_matmul_fp16.py"),
    ),
    (
        "11_linear_bias_relu.py",
        include_str!("../../../tasks/builtin/11_linear_bias_relu.py"),
    ),
    (
        "12_matmul_scale_residual.py",
        include_str!("../../../tasks/builtin/12_matmul_scale_residual.py"),
    ),
    (
        "13_softmax_scale.py",
        include_str!("../../../tasks/builtin/13_softmax_scale.py"),
    ),
    (
        "14_gelu_mul_bf16.py",
        include_str!("../../../tasks/builtin/14_gelu_mul_bf16.py"),
    ),
    (
        "15_depthwise_conv2d.py",
        include_str!("../../../tasks/builtin/15_depthwise_conv2d.py"),
    ),
    (
        "16_swish.py",
        include_str!("../../../tasks/builtin/16_swish.py"),
    ),
];

/// One task of a suite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// The file stem, e.g. `01_relu`.
    pub name: String,
    /// The suite group, e.g. `builtin` or `level2`.
    pub level: String,
    pub path: PathBuf,
    pub source: String,
}

/// Resolves a suite spec to tasks. `builtin` tasks are written under `scratch/tasks/builtin`
/// (the judge reads a task from disk); `kernelbench:levelN` looks in `kernelbench` for `levelN`
/// or `KernelBench/levelN`.
pub fn resolve(spec: &str, kernelbench: Option<&Path>, scratch: &Path) -> Result<Vec<Task>> {
    let bad = |why: String| Error::Suite(spec.to_string(), why);
    if spec == "builtin" {
        return write_builtin(scratch);
    }
    if let Some(level) = spec.strip_prefix("kernelbench:") {
        if !level.starts_with("level") || level[5..].parse::<u32>().is_err() {
            return Err(bad(
                "expected kernelbench:levelN, e.g. kernelbench:level2".into()
            ));
        }
        let Some(root) = kernelbench else {
            return Err(bad(
                "give the KernelBench directory with --kernelbench (or CRUCIBLE_KERNELBENCH)"
                    .into(),
            ));
        };
        let dir = [root.join(level), root.join("KernelBench").join(level)]
            .into_iter()
            .find(|d| d.is_dir())
            .ok_or_else(|| bad(format!("no {level} directory in {}", root.display())))?;
        return load(&dir, level);
    }
    let path = Path::new(spec);
    let level = if path.is_dir() {
        path.file_name()
    } else {
        path.parent().and_then(Path::file_name)
    }
    .map(|n| n.to_string_lossy().into_owned())
    .unwrap_or_else(|| "suite".into());
    load(path, &level)
}

fn load(path: &Path, level: &str) -> Result<Vec<Task>> {
    let files = crucible_judge::audit::discover_tasks(path)
        .map_err(|e| Error::Suite(path.display().to_string(), e.to_string()))?;
    files
        .into_iter()
        .map(|file| {
            let source = std::fs::read_to_string(&file).map_err(Error::io(&file))?;
            Ok(Task {
                name: stem(&file),
                level: level.to_string(),
                path: file,
                source,
            })
        })
        .collect()
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn write_builtin(scratch: &Path) -> Result<Vec<Task>> {
    let dir = scratch.join("tasks").join("builtin");
    std::fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
    BUILTIN
        .iter()
        .map(|(file, source)| {
            let path = dir.join(file);
            std::fs::write(&path, source).map_err(Error::io(&path))?;
            Ok(Task {
                name: stem(&path),
                level: "builtin".into(),
                path,
                source: source.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_is_complete_and_kernelbench_needs_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let tasks = resolve("builtin", None, dir.path()).unwrap();
        let on_disk =
            std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tasks/builtin"))
                .unwrap()
                .count();
        assert_eq!(
            tasks.len(),
            on_disk,
            "a builtin task is missing from BUILTIN"
        );
        assert_eq!(tasks[0].name, "01_relu");
        assert!(tasks[0].path.is_file());
        let err = resolve("kernelbench:level1", None, dir.path()).unwrap_err();
        assert!(err.to_string().contains("--kernelbench"), "{err}");
        let err = resolve("kernelbench:two", None, dir.path()).unwrap_err();
        assert!(err.to_string().contains("levelN"), "{err}");
        let kb = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/kernelbench"
        ));
        let tasks = resolve("kernelbench:level1", Some(kb), dir.path()).unwrap();
        assert!(tasks.iter().all(|t| t.level == "level1") && !tasks.is_empty());
    }
}
