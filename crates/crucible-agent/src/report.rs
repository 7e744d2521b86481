//! The bench report: `metrics.json` (the whole [`Report`]), `samples.csv` (one row per sample:
//! its best turn), `metrics.csv` (one row per level, metric and threshold), two PNG plots
//! (`speedup.png`, the distribution of correct samples' speedups; `fast_p_by_turn.png`) and
//! `report.html`, which shows them all and loads the plots from beside itself.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Once;

use crucible_rl::reward::SpeedupBasis;
use plotters::prelude::*;

use crate::episode::best_turn;
use crate::error::{Error, Result};
use crate::metrics::{Metrics, P, Report};
use crate::store::Episodes;

pub const HTML: &str = "report.html";
pub const SPEEDUP_PNG: &str = "speedup.png";
pub const FAST_P_PNG: &str = "fast_p_by_turn.png";

const FONT: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSansMono.ttf");
const FONT_NAME: &str = "sans-serif";

/// Speedup bins of the distribution plot: the Fast@p thresholds, and below 1.
const BINS: [(f64, f64, &str); 7] = [
    (0.0, 0.5, "<0.5"),
    (0.5, 1.0, "0.5-1"),
    (1.0, 1.2, "1-1.2"),
    (1.2, 1.5, "1.2-1.5"),
    (1.5, 2.0, "1.5-2"),
    (2.0, 3.0, "2-3"),
    (3.0, f64::INFINITY, ">=3"),
];

/// Writes every report file into `dir`; returns their paths.
pub fn write_all(
    dir: &Path,
    title: &str,
    episodes: &Episodes,
    report: &Report,
) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
    let mut written = Vec::new();
    let mut put = |name: &str, text: String| -> Result<()> {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(Error::io(&path))?;
        written.push(path);
        Ok(())
    };
    let json = serde_json::to_string_pretty(report)
        .map_err(|e| Error::output(dir.join("metrics.json"))(e.to_string()))?;
    put("metrics.json", json)?;
    put("samples.csv", samples_csv(episodes))?;
    put("metrics.csv", metrics_csv(report))?;
    put(HTML, html(title, episodes, report))?;
    let speedups = correct_speedups(episodes);
    plot_speedups(&dir.join(SPEEDUP_PNG), &speedups)?;
    plot_fast_p_by_turn(&dir.join(FAST_P_PNG), &report.overall)?;
    written.push(dir.join(SPEEDUP_PNG));
    written.push(dir.join(FAST_P_PNG));
    Ok(written)
}

fn correct_speedups(episodes: &Episodes) -> Vec<f64> {
    episodes
        .values()
        .filter_map(|t| best_turn(t, SpeedupBasis::Matched))
        .filter_map(|t| t.speedup(SpeedupBasis::Matched))
        .collect()
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn opt(x: Option<f64>) -> String {
    x.map(|v| v.to_string()).unwrap_or_default()
}

fn samples_csv(episodes: &Episodes) -> String {
    let mut out = String::from(
        "task,level,sample,turns,best_turn,verdict,correct,speedup_fp32,speedup_matched,reward,hack_turns,flag_turns\n",
    );
    for ((task, sample), turns) in episodes {
        let best = best_turn(turns, SpeedupBasis::Matched);
        let verdict = best
            .and_then(|t| t.result.as_ref())
            .map_or("no_code", |r| r.verdict.as_str());
        let _ = writeln!(
            out,
            "{},{},{sample},{},{},{verdict},{},{},{},{},{},{}",
            csv_field(task),
            csv_field(&turns.first().map(|t| t.level.clone()).unwrap_or_default()),
            turns.len(),
            best.map(|t| t.turn.to_string()).unwrap_or_default(),
            best.is_some_and(|t| t.is_correct()),
            opt(best.and_then(|t| t.speedup(SpeedupBasis::Fp32))),
            opt(best.and_then(|t| t.speedup(SpeedupBasis::Matched))),
            opt(best.and_then(|t| t.reward)),
            turns.iter().filter(|t| t.is_hack()).count(),
            turns.iter().filter(|t| t.is_flagged()).count(),
        );
    }
    out
}

fn metrics_csv(report: &Report) -> String {
    let mut out = String::from("level,metric,p,value\n");
    let levels = std::iter::once(("all", &report.overall))
        .chain(report.per_level.iter().map(|(l, m)| (l.as_str(), m)));
    for (level, m) in levels {
        let level = csv_field(level);
        let mut row = |metric: &str, p: &str, v: Option<f64>| {
            let _ = writeln!(out, "{level},{metric},{p},{}", opt(v));
        };
        row("samples", "", Some(m.samples as f64));
        row("correct_rate", "", Some(m.correct_rate));
        for (i, p) in P.iter().enumerate() {
            row("fast_p", &p.to_string(), Some(m.fast_p.all[i]));
            row("fast_p_correct", &p.to_string(), m.fast_p.correct[i]);
            row("fast_p_fp32", &p.to_string(), Some(m.fast_p_fp32.all[i]));
        }
        row("geomean_speedup_fp32", "", m.geomean_speedup_fp32);
        row("geomean_speedup_matched", "", m.geomean_speedup_matched);
        row("hack_rate", "", Some(m.hack_rate));
        row("flag_rate", "", Some(m.flag_rate));
        row("no_code_rate", "", Some(m.no_code_rate));
        for b in &m.best_by_turn {
            row(
                &format!("best_by_turn_{}_correct_rate", b.turn),
                "",
                Some(b.correct_rate),
            );
        }
    }
    out
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

fn speed(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.3}x"))
}

fn metrics_table(rows: &[(&str, &Metrics)]) -> String {
    let mut h = String::from("<table><tr><th>level</th><th>samples</th><th>correct</th>");
    for p in P {
        let _ = write!(h, "<th>fast_{p}</th>");
    }
    h.push_str("<th>geomean fp32</th><th>geomean matched</th><th>hack</th><th>flag</th><th>no code</th></tr>");
    for (level, m) in rows {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td>",
            esc(level),
            m.samples,
            pct(m.correct_rate)
        );
        for v in &m.fast_p.all {
            let _ = write!(h, "<td>{}</td>", pct(*v));
        }
        let _ = write!(
            h,
            "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            speed(m.geomean_speedup_fp32),
            speed(m.geomean_speedup_matched),
            pct(m.hack_rate),
            pct(m.flag_rate),
            pct(m.no_code_rate)
        );
    }
    h.push_str("</table>");
    h
}

fn html(title: &str, episodes: &Episodes, report: &Report) -> String {
    let mut rows = vec![("all", &report.overall)];
    rows.extend(report.per_level.iter().map(|(l, m)| (l.as_str(), m)));
    let mut by_turn = String::from("<table><tr><th>turn</th><th>correct</th>");
    for p in P {
        let _ = write!(by_turn, "<th>fast_{p}</th>");
    }
    by_turn.push_str("</tr>");
    for b in &report.overall.best_by_turn {
        let _ = write!(
            by_turn,
            "<tr><td>{}</td><td>{}</td>",
            b.turn,
            pct(b.correct_rate)
        );
        for v in &b.fast_p.all {
            let _ = write!(by_turn, "<td>{}</td>", pct(*v));
        }
        by_turn.push_str("</tr>");
    }
    by_turn.push_str("</table>");
    let mut samples = String::from(
        "<table><tr><th>task</th><th>sample</th><th>turns</th><th>best turn</th><th>verdict</th><th>speedup</th><th>matched</th></tr>",
    );
    for ((task, sample), turns) in episodes {
        let best = best_turn(turns, SpeedupBasis::Matched);
        let _ = write!(
            samples,
            "<tr><td>{}</td><td>{sample}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(task),
            turns.len(),
            best.map(|t| t.turn.to_string()).unwrap_or_default(),
            best.and_then(|t| t.result.as_ref())
                .map_or("no code", |r| r.verdict.as_str()),
            speed(best.and_then(|t| t.speedup(SpeedupBasis::Fp32))),
            speed(best.and_then(|t| t.speedup(SpeedupBasis::Matched))),
        );
    }
    samples.push_str("</table>");
    format!(
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 14px; }}
th, td {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; }}
th {{ background: #f0f0f0; }} td:first-child {{ text-align: left; }}
img {{ max-width: 48%; border: 1px solid #ddd; margin: 4px; }}
</style></head>
<body>
<h1>{title}</h1>
<p>Fast@p: share of samples that are correct and faster than p times the reference (matched
precision); fast_0 is the correctness rate. A sample counts with its best turn. Rates of hacks,
flags and answers without code are per judged turn.</p>
<h2>Metrics</h2>
{metrics}
<h2>Plots</h2>
<div><img src="{SPEEDUP_PNG}" alt="speedup distribution"><img src="{FAST_P_PNG}" alt="Fast@p by turn"></div>
<h2>Best by turn</h2>
{by_turn}
<h2>Samples</h2>
{samples}
<script>
window.addEventListener('load', function () {{
  var images = Array.prototype.slice.call(document.images);
  var loaded = images.filter(function (i) {{ return i.complete && i.naturalWidth > 0; }}).length;
  document.body.setAttribute('data-plots-loaded', loaded + '/' + images.length);
}});
</script>
</body></html>
"#,
        title = esc(title),
        metrics = metrics_table(&rows),
    )
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if plotters::style::register_font(FONT_NAME, FontStyle::Normal, FONT).is_err() {
            tracing::warn!("cannot register the plot font: plots will have no text");
        }
    });
}

fn plot_err(path: &Path) -> impl Fn(String) -> Error + '_ {
    move |m| Error::output(path)(m)
}

fn plot_speedups(path: &Path, speedups: &[f64]) -> Result<()> {
    register_font();
    let e = plot_err(path);
    let counts: Vec<u32> = BINS
        .iter()
        .map(|(lo, hi, _)| speedups.iter().filter(|s| **s >= *lo && **s < *hi).count() as u32)
        .collect();
    let top = counts.iter().copied().max().unwrap_or(0).max(1) + 1;
    let root = BitMapBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let caption = format!("Speedup of correct samples (n = {})", speedups.len());
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, (FONT_NAME, 22))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((0..BINS.len()).into_segmented(), 0u32..top)
        .map_err(|x| e(x.to_string()))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(BINS.len())
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                BINS.get(*i).map_or(String::new(), |b| b.2.to_string())
            }
            SegmentValue::Last => String::new(),
        })
        .x_desc("speedup vs reference (matched precision)")
        .y_desc("samples")
        .label_style((FONT_NAME, 14))
        .draw()
        .map_err(|x| e(x.to_string()))?;
    chart
        .draw_series(counts.iter().enumerate().map(|(i, &c)| {
            // Below 1x in red: slower than PyTorch.
            let color = if i < 2 {
                RGBColor(220, 120, 90)
            } else {
                RGBColor(70, 130, 180)
            };
            let mut bar = Rectangle::new(
                [(SegmentValue::Exact(i), 0), (SegmentValue::Exact(i + 1), c)],
                color.filled(),
            );
            bar.set_margin(0, 0, 8, 8);
            bar
        }))
        .map_err(|x| e(x.to_string()))?;
    root.present().map_err(|x| e(x.to_string()))
}

fn plot_fast_p_by_turn(path: &Path, m: &Metrics) -> Result<()> {
    register_font();
    let e = plot_err(path);
    let turns = m.best_by_turn.len().max(1);
    let root = BitMapBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Fast@p by turn (best so far)", (FONT_NAME, 22))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(-0.2f64..(turns as f64 - 0.8).max(0.8), 0f64..1.05)
        .map_err(|x| e(x.to_string()))?;
    chart
        .configure_mesh()
        .x_labels(turns.min(20))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{:.0}%", y * 100.0))
        .x_desc("turn")
        .y_desc("share of samples")
        .label_style((FONT_NAME, 14))
        .draw()
        .map_err(|x| e(x.to_string()))?;
    for (i, p) in P.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points: Vec<(f64, f64)> = m
            .best_by_turn
            .iter()
            .map(|b| (f64::from(b.turn), b.fast_p.all[i]))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(|x| e(x.to_string()))?
            .label(format!("fast_{p}"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        chart
            .draw_series(points.iter().map(|&pt| Circle::new(pt, 3, color.filled())))
            .map_err(|x| e(x.to_string()))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font((FONT_NAME, 14))
        .draw()
        .map_err(|x| e(x.to_string()))?;
    root.present().map_err(|x| e(x.to_string()))
}
