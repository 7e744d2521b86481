//! The pages, as maud templates. Every dynamic string goes through maud's escaping; SVG comes
//! only from [`crate::plots`], which draws numbers and fixed labels (stage names are escaped by
//! plotters' SVG backend).

use std::collections::{BTreeMap, HashSet};

use crucible_queue::{QueueStats, TaskRecord, TaskSpec, TaskSummary, WorkerStatus};
use crucible_result::EvalResult;
use maud::{DOCTYPE, Markup, PreEscaped, html};

use crate::plots;
use crate::view::{TaskStanding, Window, integrity_findings, ranking_speedup};

/// The frame every page shares. `live` turns on the home page's event stream.
pub fn layout(title: &str, live: bool, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · crucible" }
                // No favicon request (a 404 in every browser console).
                link rel="icon" href="data:,";
                link rel="stylesheet" href="/dashboard/assets/dashboard.css";
                script src="/dashboard/assets/dashboard.js" defer {}
            }
            body data-live=[live.then_some("/dashboard/events")] {
                nav {
                    a.brand href="/" { "crucible" }
                    a href="/" { "live" }
                    a href="/evaluations" { "evaluations" }
                    a href="/integrity" { "integrity" }
                    a href="/tasks" { "tasks" }
                    a href="/v1/openapi.json" { "API" }
                }
                main { h1 { (title) } (body) }
            }
        }
    }
}

pub fn home(sections: &HomeSections) -> Markup {
    layout(
        "The gym at a glance",
        true,
        html! {
            div.grid {
                section #queue { (sections.queue) }
                section #hour { (sections.hour) }
            }
            section #workers { (sections.workers) }
            section #recent { (sections.recent) }
        },
    )
}

/// The home page's live parts, rendered once and sent again by the event stream.
pub struct HomeSections {
    pub queue: Markup,
    pub workers: Markup,
    pub hour: Markup,
    pub recent: Markup,
}

impl HomeSections {
    pub fn render(
        stats: &QueueStats,
        workers: &[WorkerStatus],
        hour: &Window,
        recent: &[TaskSummary],
        now: f64,
    ) -> HomeSections {
        HomeSections {
            queue: queue_section(stats),
            workers: workers_section(workers, now),
            hour: hour_section(hour),
            recent: html! { h2 { "Latest evaluations" } (summary_table(recent, now)) },
        }
    }

    /// The sections as the JSON object the page's script swaps in by element id.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "queue": self.queue.0,
            "workers": self.workers.0,
            "hour": self.hour.0,
            "recent": self.recent.0,
        })
    }
}

fn queue_section(stats: &QueueStats) -> Markup {
    html! {
        h2 { "Queue" }
        p.big { span.num { (stats.queued) } " queued · " span.num { (stats.running) } " running" }
        table {
            tr { th { "priority" } th.r { "queued" } }
            @for (priority, n) in stats.queued_by_priority.iter().rev() {
                tr { td { (priority) } td.r { (n) } }
            }
        }
        table {
            tr { th { "client" } th.r { "queued" } }
            @for (client, n) in &stats.queued_by_client {
                tr { td { (client) } td.r { (n) } }
            }
        }
        p.muted {
            (stats.evaluations_completed) " evaluated · " (stats.cache_hits) " cache hits · "
            (stats.duplicates_shared) " shared duplicates · " (stats.worker_restarts) " worker restarts"
        }
    }
}

fn workers_section(workers: &[WorkerStatus], now: f64) -> Markup {
    html! {
        h2 { "Workers" }
        @if workers.is_empty() { p.muted { "No worker has registered yet." } }
        @else {
            table {
                tr { th { "worker" } th { "device" } th { "GPU" } th { "task" } th { "stage" } th.r { "seen" } th.r { "restarts" } }
                @for w in workers {
                    tr {
                        td { (w.id) }
                        td { (w.device) }
                        td { (w.gpu_model.as_deref().unwrap_or("—")) }
                        @if w.in_flight.is_empty() {
                            td { @if let Some(task) = &w.current_task { a href={ "/evaluations/" (task) } { (short(task)) } } @else { span.muted { "idle" } } }
                            td { (w.stage.as_deref().unwrap_or("")) }
                        } @else {
                            // One line per evaluation in flight, its judge stage beside it.
                            td { @for t in &w.in_flight { a href={ "/evaluations/" (t.task) } { (short(&t.task)) } br; } }
                            td.stage { @for t in &w.in_flight { (t.stage.as_deref().unwrap_or("claimed")) br; } }
                        }
                        td.r { (ago(now - w.last_seen)) }
                        td.r { (w.restarts) }
                    }
                }
            }
        }
    }
}

fn hour_section(hour: &Window) -> Markup {
    let total = hour.finished.max(1) as f64;
    html! {
        h2 { "Last hour" }
        p.big { span.num { (hour.evaluated) } " evaluations/h · " (hour.finished) " finished" }
        // SVG, not styled spans: the content security policy allows no inline style.
        svg.mix viewBox="0 0 100 4" preserveAspectRatio="none" {
            @for (verdict, x, width) in mix_segments(&hour.verdicts, total) {
                rect class={ "v-" (verdict) } x=(x) y="0" width=(width) height="4" { title { (verdict) } }
            }
        }
        ul.legend {
            @for (verdict, n) in &hour.verdicts { li { span class={ "dot v-" (verdict) } {} (verdict) " " (n) } }
        }
    }
}

/// (verdict, x, width) of each segment of the verdict-mix bar, in percent.
fn mix_segments(verdicts: &BTreeMap<String, usize>, total: f64) -> Vec<(&str, String, String)> {
    let mut x = 0.0;
    verdicts
        .iter()
        .map(|(verdict, n)| {
            let width = *n as f64 * 100.0 / total;
            let segment = (verdict.as_str(), format!("{x:.3}"), format!("{width:.3}"));
            x += width;
            segment
        })
        .collect()
}

/// A table of task summaries, one row each, newest first.
pub fn summary_table(rows: &[TaskSummary], now: f64) -> Markup {
    html! {
        table.rows {
            tr { th { "evaluation" } th { "task" } th { "client" } th { "verdict" } th.r { "speedup" } th.r { "matched" } th { "findings" } th.r { "finished" } }
            @for row in rows {
                tr {
                    td { a href={ "/evaluations/" (row.id) } { (short(&row.id)) } }
                    td { a href={ "/tasks/" (row.task_name) } { (row.task_name) } }
                    td { (row.client) }
                    td { (verdict_badge(row.verdict.as_deref().unwrap_or(row.state.as_str()))) @if row.cached { " " span.muted { "cached" } } }
                    td.r { (opt_x(row.speedup)) }
                    td.r { (opt_x(row.speedup_matched)) }
                    td { @for f in integrity_findings(row) { span class={ "tag " (f.severity) } { (f.code) } " " } }
                    td.r { @if let Some(t) = row.finished_at { (ago(now - t)) } }
                }
            }
        }
    }
}

pub fn evaluations(rows: &[TaskSummary], now: f64, limit: usize) -> Markup {
    layout(
        "Evaluations",
        false,
        html! {
            p.muted { "The newest " (rows.len()) " (at most " (limit) "; " a href="/evaluations?limit=10000" { "show 10,000" } ")." }
            (summary_table(rows, now))
        },
    )
}

/// Rejects and flags, by code, then each with its offending line.
pub fn integrity(
    rows: &[TaskSummary],
    counts: &BTreeMap<(String, String), usize>,
    lines: &BTreeMap<(String, u32), String>,
) -> Markup {
    layout(
        "Integrity",
        false,
        html! {
            h2 { "By finding" }
            table {
                tr { th { "code" } th { "severity" } th.r { "count" } }
                @for ((code, severity), n) in counts { tr { td { (code) } td { span class={ "tag " (severity) } { (severity) } } td.r { (n) } } }
            }
            h2 { "Recent rejects and flags" }
            table.rows {
                tr { th { "evaluation" } th { "task" } th { "finding" } th { "offending line" } }
                @for row in rows {
                    @for f in integrity_findings(row) {
                        tr {
                            td { a href={ "/evaluations/" (row.id) @if let Some(l) = f.line { "#L" (l) } } { (short(&row.id)) } }
                            td { (row.task_name) }
                            td { span class={ "tag " (f.severity) } { (f.code) } br; span.muted { (f.message) } }
                            td {
                                @if let Some(line) = f.line.and_then(|l| lines.get(&(row.id.clone(), l))) {
                                    code.hl { span.muted { (f.line.unwrap_or(0)) ": " } (line) }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}

pub fn tasks(standings: &BTreeMap<String, TaskStanding>) -> Markup {
    layout(
        "Tasks",
        false,
        html! {
            table.rows {
                tr { th { "task" } th.r { "evaluations" } th.r { "correct" } th.r { "honest" } th.r { "best honest speedup" } th { "rejected, by verifier policy" } }
                @for (name, s) in standings {
                    tr {
                        td { a href={ "/tasks/" (name) } { (name) } }
                        td.r { (s.evaluations) } td.r { (s.correct) } td.r { (s.honest) }
                        td.r { (opt_x(s.best_honest)) }
                        td { @for (policy, n) in &s.rejected_by_policy { (policy) ": " (n) " " } }
                    }
                }
            }
        },
    )
}

pub fn task(
    name: &str,
    board: &[&TaskSummary],
    standing: Option<&TaskStanding>,
    now: f64,
) -> Markup {
    layout(
        &format!("Task {name}"),
        false,
        html! {
            @if let Some(s) = standing {
                p { (s.evaluations) " evaluations · " (s.correct) " correct · " (s.honest) " honest (correct, no reject or flag)" }
                p { "Rejected, by verifier policy: " @for (policy, n) in &s.rejected_by_policy { b { (policy) } " " (n) " " } @if s.rejected_by_policy.is_empty() { "none" } }
            }
            h2 { "Leaderboard: best honest speedups" }
            p.muted { "Ranked by the speedup at matched precision when it was measured, else the plain one." }
            table.rows {
                tr { th.r { "#" } th { "evaluation" } th { "client" } th.r { "rank speedup" } th.r { "fp32 speedup" } th.r { "finished" } }
                @for (i, row) in board.iter().enumerate() {
                    tr {
                        td.r { (i + 1) }
                        td { a href={ "/evaluations/" (row.id) } { (short(&row.id)) } }
                        td { (row.client) }
                        td.r { (opt_x(ranking_speedup(row))) }
                        td.r { (opt_x(row.speedup)) }
                        td.r { @if let Some(t) = row.finished_at { (ago(now - t)) } }
                    }
                }
            }
        },
    )
}

/// One evaluation, rendered for a person.
pub fn evaluation(
    record: &TaskRecord,
    spec: Option<&TaskSpec>,
    result: Option<&EvalResult>,
) -> Markup {
    let title = format!("{} · {}", record.task_name, short(&record.id));
    layout(
        &title,
        false,
        html! {
            p {
                (verdict_badge(result.map(|r| r.verdict.as_str()).unwrap_or(record.state.as_str())))
                " · client " b { (record.client) } " · attempts " (record.attempts)
                @if record.cached { " · answered from the cache" }
                @if let Some(leader) = &record.shared_with { " · shared the evaluation of " a href={ "/evaluations/" (leader) } { (short(leader)) } }
            }
            @if let Some(result) = result { (result_body(result, spec)) }
            @else { p.muted { "No result yet: the task is " (record.state.as_str()) "." } }
        },
    )
}

fn result_body(r: &EvalResult, spec: Option<&TaskSpec>) -> Markup {
    let flagged: HashSet<u32> = r.findings.iter().filter_map(|f| f.line).collect();
    html! {
        table.kv {
            tr { th { "speedup" } td { (opt_x(r.speedup)) } th { "matched precision" } td { (opt_x(r.speedup_matched)) @if let Some(c) = r.speedup_matched_class { " (" (format!("{c:?}").to_lowercase()) ")" } } }
            tr { th { "precision class" } td { (r.precision.as_ref().and_then(|p| p.class).map(|c| format!("{c:?}").to_lowercase()).unwrap_or_else(|| "unmeasured".into())) } th { "coverage" } td { @if let Some(c) = r.coverage { (format!("{:.1}%", c * 100.0)) } @else { "—" } } }
            tr { th { "device" } td { (r.env.device) " " (r.env.device_name.as_deref().unwrap_or("")) } th { "wall" } td { (format!("{:.2} s", r.wall_s)) } }
        }
        @if let Some(failure) = &r.failure {
            h2 { "Failure" }
            p { b { (format!("{:?}", failure.class).to_lowercase()) } " in " (failure.stage) }
            pre.err { (failure.message) }
        }
        @if !r.findings.is_empty() {
            h2 { "Findings" }
            ul { @for f in &r.findings { li { span class={ "tag " (format!("{:?}", f.severity).to_lowercase()) } { (f.code) } " " (f.message) @if let Some(l) = f.line { " " a href={ "#L" (l) } { "line " (l) } } } } }
        }
        h2 { "Trials" }
        table.rows {
            tr { th { "seed" } th { "passed" } th { "outputs (max abs err, max rel err, mismatches)" } th { "message" } }
            @for t in &r.trials {
                tr {
                    td { (t.seed) @if let Some(of) = t.repeat_of { " (repeats " (of) ")" } }
                    td { @if t.passed { "yes" } @else { b { "no" } } }
                    td { @for o in &t.outputs { (serde_json::to_string(o).unwrap_or_default()) br; } }
                    td { (t.message.as_deref().unwrap_or("")) }
                }
            }
        }
        @if let Some(timing) = &r.timing {
            h2 { "Timing" }
            figure.plot #timing-plot { (PreEscaped(plots::timing(&timing.reference, &timing.candidate))) }
            p.muted { "reference median " (format!("{:.4}", timing.reference.median_ms)) " ms · candidate median " (format!("{:.4}", timing.candidate.median_ms)) " ms · warmup " (timing.warmup) " · L2 flush " (timing.l2_flush_bytes) " bytes" }
        } @else if let Some(why) = &r.timing_skipped {
            h2 { "Timing" } p.muted { "Not timed: " (why) }
        }
        @if let Some(profile) = &r.profile {
            h2 { "Profile" }
            table.rows {
                tr { th { "kernel" } th.r { "calls" } th.r { "GPU µs" } th { "candidate Triton" } }
                @for k in &profile.kernels { tr { td { code { (k.name) } } td.r { (k.calls) } td.r { (format!("{:.2}", k.gpu_time_us)) } td { @if k.candidate_triton { "yes" } } } }
            }
        }
        h2 { "Stages" }
        figure.plot { (PreEscaped(plots::stage_timeline(&r.stages))) }
        table.rows {
            tr { th { "stage" } th { "status" } th.r { "seconds" } th { "diagnostics" } }
            @for s in &r.stages { tr { td { (s.name) } td { (format!("{:?}", s.status).to_lowercase()) } td.r { (format!("{:.3}", s.duration_s)) } td { @for d in &s.diagnostics { (d) br; } } } }
        }
        @if let Some(spec) = spec {
            h2 { "Candidate" }
            pre.source { code {
                @for (i, line) in spec.candidate_source.lines().enumerate() {
                    @let n = i as u32 + 1;
                    span id={ "L" (n) } class=[flagged.contains(&n).then_some("hl")] { span.ln { (n) } (line) "\n" }
                }
            } }
        }
    }
}

fn verdict_badge(verdict: &str) -> Markup {
    html! { span class={ "badge v-" (verdict) } { (verdict) } }
}

fn opt_x(value: Option<f64>) -> String {
    value.map_or_else(|| "—".into(), |v| format!("{v:.2}×"))
}

fn short(id: &str) -> &str {
    // uuid v7: the random tail tells ids apart, the time prefix does not.
    id.get(id.len().saturating_sub(8)..).unwrap_or(id)
}

fn ago(seconds: f64) -> String {
    let s = seconds.max(0.0);
    if s < 60.0 {
        format!("{s:.0} s ago")
    } else if s < 3600.0 {
        format!("{:.0} min ago", s / 60.0)
    } else {
        format!("{:.1} h ago", s / 3600.0)
    }
}
