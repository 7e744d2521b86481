//! SVG plots, drawn on the server.

use crucible_result::{Stage, Stats};
use plotters::prelude::*;

const REFERENCE: RGBColor = RGBColor(0x4c, 0x78, 0xa8);
const CANDIDATE: RGBColor = RGBColor(0xe4, 0x57, 0x56);
const BINS: usize = 30;
/// Text is laid out with ab_glyph from a bundled font (the workspace's plotters has no system
/// font loader), registered under the family the plots name.
const FONT: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSansMono.ttf");

fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_err() {
            tracing::warn!("cannot register the plot font: plots will have no text");
        }
    });
}

/// The timing distributions of reference and candidate as overlaid histograms of their samples
/// (milliseconds). Documents without samples get their summary drawn as min–max ranges with the
/// median marked. Returns the SVG text.
pub fn timing(reference: &Stats, candidate: &Stats) -> String {
    register_font();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (640, 300)).into_drawing_area();
        // Drawing into a String cannot fail for I/O reasons; a failure leaves a partial plot,
        // which is still better than no page.
        let _ = root.fill(&WHITE);
        let _ = draw_timing(&root, reference, candidate);
        let _ = root.present();
    }
    svg
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn draw_timing(root: &Area<'_>, reference: &Stats, candidate: &Stats) -> Result<(), String> {
    let lo = reference.min_ms.min(candidate.min_ms);
    let hi = reference.max_ms.max(candidate.max_ms);
    let (lo, hi) = if hi > lo {
        (lo, hi)
    } else {
        (lo * 0.9, lo * 1.1 + 1e-9)
    };
    let width = (hi - lo) / BINS as f64;
    let series = [
        ("reference", reference, REFERENCE),
        ("candidate", candidate, CANDIDATE),
    ];
    let counts: Vec<Vec<usize>> = series
        .iter()
        .map(|(_, stats, _)| histogram(&stats.samples_ms, lo, width))
        .collect();
    let top = counts.iter().flatten().copied().max().unwrap_or(0).max(1);
    let mut chart = ChartBuilder::on(root)
        .margin(10)
        .caption("timed iterations (ms)", ("sans-serif", 16))
        .x_label_area_size(30)
        .y_label_area_size(40)
        .build_cartesian_2d(lo..hi + width, 0..top + 1)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("ms")
        .y_desc("iterations")
        .draw()
        .map_err(|e| e.to_string())?;
    for ((name, stats, color), counts) in series.iter().zip(&counts) {
        if stats.samples_ms.is_empty() {
            // Summary only: the min–max range at mid height, the median as a tall mark.
            let mid = top / 2 + 1;
            chart
                .draw_series(LineSeries::new(
                    [(stats.min_ms, mid), (stats.max_ms, mid)],
                    color.stroke_width(3),
                ))
                .map_err(|e| e.to_string())?
                .label(format!("{name} (min–median–max)"))
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 16, y)], color.stroke_width(3))
                });
            chart
                .draw_series(std::iter::once(PathElement::new(
                    [(stats.median_ms, 0), (stats.median_ms, top + 1)],
                    color.stroke_width(2),
                )))
                .map_err(|e| e.to_string())?;
            continue;
        }
        chart
            .draw_series(
                counts
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| **c > 0)
                    .map(|(i, c)| {
                        let x0 = lo + i as f64 * width;
                        Rectangle::new([(x0, 0), (x0 + width, *c)], color.mix(0.55).filled())
                    }),
            )
            .map_err(|e| e.to_string())?
            .label(format!(
                "{name}: median {:.4} ms (n = {})",
                stats.median_ms, stats.n
            ))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}

fn histogram(samples: &[f64], lo: f64, width: f64) -> Vec<usize> {
    let mut counts = vec![0; BINS + 1];
    for sample in samples.iter().filter(|s| s.is_finite()) {
        let bin = ((sample - lo) / width).floor().max(0.0) as usize;
        counts[bin.min(BINS)] += 1;
    }
    counts
}

/// The stages as one horizontal bar, each segment as wide as its share of the total time.
pub fn stage_timeline(stages: &[Stage]) -> String {
    register_font();
    let total: f64 = stages.iter().map(|s| s.duration_s.max(0.0)).sum();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (640, 70)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let mut x = 0.0;
        for (i, stage) in stages.iter().enumerate() {
            let share = if total > 0.0 {
                stage.duration_s.max(0.0) / total
            } else {
                0.0
            };
            let x0 = (x * 640.0) as i32;
            let x1 = ((x + share) * 640.0).ceil() as i32;
            let color = Palette99::pick(i).mix(0.8);
            let _ = root.draw(&Rectangle::new([(x0, 10), (x1, 40)], color.filled()));
            if x1 - x0 > 40 {
                let _ = root.draw(&Text::new(
                    stage.name.clone(),
                    (x0 + 3, 48),
                    ("sans-serif", 11),
                ));
            }
            x += share;
        }
        let _ = root.present();
    }
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(samples: &[f64]) -> Stats {
        Stats::from_samples(samples).unwrap()
    }

    #[test]
    fn timing_plot_draws_both_series() {
        let svg = timing(&stats(&[1.0, 1.1, 1.2, 1.05]), &stats(&[0.5, 0.52, 0.55]));
        assert!(svg.starts_with("<svg"), "{svg:.80}");
        assert!(svg.contains("reference: median"), "no reference legend");
        assert!(svg.contains("candidate: median"), "no candidate legend");
        assert!(svg.matches("<rect").count() > 4, "no bars");
    }

    #[test]
    fn summary_only_documents_still_plot() {
        let mut reference = stats(&[1.0, 2.0]);
        reference.samples_ms.clear();
        let svg = timing(&reference, &stats(&[1.5]));
        assert!(svg.contains("reference (min–median–max)"));
    }

    #[test]
    fn timeline_names_the_long_stages() {
        let stage = |name: &str, d| Stage {
            name: name.into(),
            status: crucible_result::StageStatus::Ok,
            duration_s: d,
            diagnostics: vec![],
        };
        let svg = stage_timeline(&[stage("start", 3.0), stage("timing", 1.0), stage("x", 0.001)]);
        assert!(svg.contains("start") && svg.contains("timing"), "{svg}");
        assert!(
            !svg.contains("\nx\n") && !svg.contains(">x<"),
            "a sliver is too narrow for its name: {svg}"
        );
    }
}
