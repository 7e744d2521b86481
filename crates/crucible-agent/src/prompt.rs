//! What the model reads: the first turn (the task, what `ModelNew` must be, a short honest Triton
//! example) and the feedback on a judged answer, which reads like a reviewer's note (verdict,
//! error excerpt, mismatch, speed, coverage, precision, findings in plain words) rather than the
//! raw result document. Everything here is deterministic and bounded: the same result always gives
//! the same note, never longer than its token budget.

use crucible_result::{EvalResult, Severity, Verdict};

use crate::client::Message;

/// Characters per token for budgets: a deliberately low estimate for code and English under
/// BPE tokenizers, so a note within budget by this count stays within it for the model.
pub const CHARS_PER_TOKEN: usize = 3;

pub const SYSTEM: &str = "You are an expert GPU programmer. You write correct, fast Triton kernels \
that replace PyTorch code.";

const EXAMPLE: &str = r#"import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out"#;

/// The first user message for a task.
pub fn first_turn(task_name: &str, task_source: &str) -> String {
    format!(
        "Write a faster version of this PyTorch model with custom Triton kernels.\n\n\
         Reference `{task_name}`:\n```python\n{}\n```\n\n\
         Requirements:\n\
         - Define `class ModelNew(nn.Module)` with the same constructor arguments as `Model` and a \
         `forward` that takes the same inputs and returns the same outputs (shapes and dtypes).\n\
         - The main computation must run in your own `@triton.jit` kernels. Calling the PyTorch \
         operation you replace, skipping work, caching outputs between calls or special-casing \
         the test shapes is detected and rejected.\n\
         - The judge compares your outputs with `Model` on fresh random inputs (atol = rtol = \
         1e-2), then times both. Lower precision than the reference is measured and reported.\n\n\
         Example of the expected form, for `out = x + y`:\n```python\n{EXAMPLE}\n```\n\n\
         Reply with the complete Python module in a single ```python block.",
        task_source.trim_end()
    )
}

/// The messages of a first turn.
pub fn first_messages(task_name: &str, task_source: &str) -> Vec<Message> {
    vec![
        Message::system(SYSTEM),
        Message::user(first_turn(task_name, task_source)),
    ]
}

/// Cuts `text` to at most `max` characters on a char boundary, marking the cut.
pub fn truncate_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let keep = max.saturating_sub(12);
    let cut: String = text.chars().take(keep).collect();
    format!("{cut} [truncated]")
}

/// The head and tail of a long error (the cause is usually the last lines, the context the first).
fn excerpt(text: &str, max: usize) -> String {
    let text = text.trim();
    let n = text.chars().count();
    if n <= max {
        return text.to_string();
    }
    let head_len = max / 3;
    let tail_len = max.saturating_sub(head_len + 16);
    let head: String = text.chars().take(head_len).collect();
    let tail: String = text.chars().skip(n - tail_len).collect();
    format!(
        "{head}\n[... {} chars ...]\n{tail}",
        n - head_len - tail_len
    )
}

fn verdict_line(r: &EvalResult) -> String {
    let what = match r.verdict {
        Verdict::Correct => "correct: every trial matched the reference",
        Verdict::Incorrect => "incorrect: the outputs do not match the reference",
        Verdict::Rejected => "rejected: the judge found a hack or a forbidden construct",
        Verdict::CompileError => "did not compile or import",
        Verdict::RuntimeError => "failed while running",
        Verdict::Timeout => "timed out",
        Verdict::Crashed => "crashed the process",
        Verdict::InfraError => "not judged: the judge itself failed (not your fault); try again",
    };
    format!("Verdict: {what}.")
}

fn failure_lines(r: &EvalResult, budget: usize) -> Vec<String> {
    let Some(f) = &r.failure else {
        return Vec::new();
    };
    if r.verdict == Verdict::Incorrect && !r.trials.is_empty() {
        // The mismatch statistics say more than the message.
        return Vec::new();
    }
    vec![format!(
        "Error in stage `{}` ({}):\n{}",
        f.stage,
        serde_json::to_value(f.class)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        excerpt(&f.message, budget)
    )]
}

fn mismatch_lines(r: &EvalResult) -> Vec<String> {
    let Some(trial) = r.trials.iter().find(|t| !t.passed) else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    for o in trial.outputs.iter().filter(|o| o.mismatched > 0).take(3) {
        lines.push(format!(
            "Mismatch in output {} ({} {:?}): {} of {} elements outside tolerance; max abs \
             error {}, mean abs error {}, max rel error {}.",
            o.index,
            o.dtype,
            o.shape,
            o.mismatched,
            o.numel,
            num(o.max_abs),
            num(o.mean_abs),
            num(o.max_rel)
        ));
    }
    if lines.is_empty()
        && let Some(m) = &trial.message
    {
        lines.push(format!("Trial failed: {}", excerpt(m, 300)));
    }
    lines
}

/// A number in 4 significant digits, deterministic.
fn num(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    if !(1e-4..1e6).contains(&x.abs()) {
        return format!("{x:.3e}");
    }
    let digits = (3 - x.abs().log10().floor() as i32).clamp(0, 8) as usize;
    format!("{x:.digits$}")
}

fn speed_lines(r: &EvalResult) -> Vec<String> {
    let mut lines = Vec::new();
    match (r.speedup, &r.timing) {
        (Some(s), Some(t)) => {
            let mut line = format!(
                "Speed: {}x the reference (reference {} ms, yours {} ms)",
                num(s),
                num(t.reference.median_ms),
                num(t.candidate.median_ms)
            );
            if let (Some(m), Some(class)) = (r.speedup_matched, r.speedup_matched_class) {
                line.push_str(&format!(
                    "; {}x against the reference run at your precision ({})",
                    num(m),
                    class.as_str()
                ));
            }
            line.push('.');
            if s < 1.0 {
                line.push_str(" Slower than PyTorch: make it faster.");
            }
            lines.push(line);
        }
        _ => {
            if let Some(why) = &r.timing_skipped {
                lines.push(format!(
                    "Speed: not measured ({}).",
                    truncate_chars(why, 160)
                ));
            }
        }
    }
    lines
}

fn coverage_lines(r: &EvalResult) -> Vec<String> {
    let Some(c) = r.coverage else {
        return Vec::new();
    };
    let mut line = format!(
        "Coverage: your Triton kernels are {:.0}% of GPU time",
        c * 100.0
    );
    if let Some(p) = &r.profile
        && p.total_gpu_us > 0.0
    {
        let mut kernels: Vec<_> = p.kernels.iter().collect();
        kernels.sort_by(|a, b| {
            b.gpu_time_us
                .total_cmp(&a.gpu_time_us)
                .then(a.name.cmp(&b.name))
        });
        let top: Vec<String> = kernels
            .iter()
            .take(3)
            .map(|k| {
                format!(
                    "{}{} {:.0}%",
                    truncate_chars(&k.name, 48),
                    if k.candidate_triton {
                        ""
                    } else {
                        " (not yours)"
                    },
                    100.0 * k.gpu_time_us / p.total_gpu_us
                )
            })
            .collect();
        line.push_str(&format!("; top kernels: {}", top.join(", ")));
    }
    line.push('.');
    vec![line]
}

fn precision_lines(r: &EvalResult) -> Vec<String> {
    let Some(p) = &r.precision else {
        return Vec::new();
    };
    match (&p.unmeasured, p.class, p.reference_class) {
        (None, Some(c), Some(rc)) if c != rc => vec![format!(
            "Precision: your outputs carry {} precision; the reference computes in {}.",
            c.as_str(),
            rc.as_str()
        )],
        (None, Some(c), _) => vec![format!("Precision: {} (as the reference).", c.as_str())],
        _ => Vec::new(),
    }
}

fn finding_lines(r: &EvalResult) -> Vec<String> {
    let mut findings: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.severity != Severity::Info)
        .collect();
    findings.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.code.cmp(&b.code)));
    findings
        .iter()
        .take(5)
        .map(|f| {
            let what = match f.severity {
                Severity::Reject => "rejected",
                _ => "flagged",
            };
            let at = f.line.map(|l| format!(" at line {l}")).unwrap_or_default();
            format!(
                "- {what} ({}){at}: {}",
                f.code,
                truncate_chars(f.message.trim(), 240)
            )
        })
        .collect()
}

fn advice(r: &EvalResult) -> &'static str {
    match r.verdict {
        Verdict::Correct => "Keep it correct and make it faster; reply with the complete module.",
        Verdict::Rejected => {
            "Remove what the findings name and do the work in Triton kernels; reply with the \
             complete module."
        }
        Verdict::InfraError => "Reply with the complete module again.",
        _ => "Fix the problem above; reply with the complete module.",
    }
}

/// The note on a judged answer, at most `max_tokens` tokens by [`CHARS_PER_TOKEN`].
pub fn feedback(r: &EvalResult, max_tokens: usize) -> String {
    let budget = max_tokens * CHARS_PER_TOKEN;
    let mut lines = vec![verdict_line(r)];
    lines.extend(failure_lines(r, budget / 2));
    lines.extend(mismatch_lines(r));
    lines.extend(speed_lines(r));
    lines.extend(coverage_lines(r));
    lines.extend(precision_lines(r));
    let findings = finding_lines(r);
    if !findings.is_empty() {
        lines.push("Findings of the judge:".into());
        lines.extend(findings);
    }
    lines.push(advice(r).into());
    truncate_chars(&lines.join("\n"), budget)
}

/// The note on an answer with no code in it.
pub fn no_code_feedback(reason: &str) -> String {
    format!(
        "Verdict: nothing was judged: {reason}.\nReply with the complete Python module in a \
         single ```python block."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_marks_the_cut_and_respects_the_limit() {
        let long = "x".repeat(100);
        let cut = truncate_chars(&long, 40);
        assert!(cut.chars().count() <= 40, "{cut}");
        assert!(cut.ends_with("[truncated]"));
        assert_eq!(truncate_chars("short", 40), "short");
        let e = excerpt(&format!("HEAD{}TAIL", "y".repeat(500)), 100);
        assert!(e.starts_with("HEAD") && e.ends_with("TAIL"), "{e}");
    }

    #[test]
    fn numbers_have_four_significant_digits() {
        assert_eq!(num(1.23456), "1.235");
        assert_eq!(num(0.000123456), "0.0001235");
        assert_eq!(num(12345.6), "12346");
        assert_eq!(num(0.0), "0");
        assert_eq!(num(5e11), "5.000e11");
    }

    #[test]
    fn first_turn_holds_the_task_and_the_contract() {
        let p = first_turn("01_relu", "class Model: pass\n");
        assert!(p.contains("Reference `01_relu`"));
        assert!(p.contains("class Model: pass\n```"));
        assert!(p.contains("ModelNew"));
    }
}
