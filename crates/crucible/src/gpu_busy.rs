//! How long the GPU ran kernels during a batch, by its own count: `nvidia-smi`'s utilization
//! (the share of the driver's sample period in which a kernel ran) read every 100 ms, each
//! reading weighted by the time since the one before. Kernels of different processes do not
//! run at once on a GPU without MPS (they take turns, time-sliced), so this time divided by
//! the evaluations is the GPU work one evaluation costs, and 3600 s over it the most
//! evaluations an hour one GPU could judge with that much work each, however the rest of the
//! engine overlaps. An estimate: the driver's own period is 1/6 to 1 s.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::Instant;

/// The sampling period asked of `nvidia-smi`, in milliseconds.
const SAMPLE_MS: u32 = 100;

/// Kernel time over a batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuBusy {
    pub samples: usize,
    /// Seconds between the first and last reading.
    pub span_s: f64,
    /// Seconds in which a kernel ran, summed over the readings.
    pub busy_s: f64,
}

impl GpuBusy {
    /// From (when read, utilization in percent) readings in order; `None` with fewer than two.
    pub fn of(readings: &[(Instant, u32)]) -> Option<GpuBusy> {
        let (first, last) = (readings.first()?, readings.last()?);
        let span_s = (last.0 - first.0).as_secs_f64();
        if readings.len() < 2 || span_s <= 0.0 {
            return None;
        }
        // Each reading covers the time since the one before it.
        let busy_s = readings
            .windows(2)
            .map(|pair| (pair[1].0 - pair[0].0).as_secs_f64() * f64::from(pair[1].1.min(100)))
            .sum::<f64>()
            / 100.0;
        Some(GpuBusy {
            samples: readings.len(),
            span_s,
            busy_s,
        })
    }

    /// The most evaluations an hour at `busy_s / evaluations` of kernel time each.
    pub fn ceiling_per_hour(&self, evaluations: usize) -> Option<f64> {
        (self.busy_s > 0.0).then(|| 3600.0 * evaluations as f64 / self.busy_s)
    }
}

/// A utilization line of `--format=csv,noheader,nounits`: a bare percentage; anything else
/// (`[N/A]`, a warning) is no reading.
fn utilization(line: &str) -> Option<u32> {
    line.trim().parse().ok()
}

/// `nvidia-smi` reading the GPU's utilization until finished.
pub struct GpuBusySampler {
    child: Child,
    reader: JoinHandle<Vec<(Instant, u32)>>,
}

impl GpuBusySampler {
    /// Samples the GPU with this UUID (torch's spelling, without `GPU-`); `None` when
    /// `nvidia-smi` cannot be started (then the batch's report has no GPU line).
    pub fn start(uuid: &str) -> Option<GpuBusySampler> {
        let id = format!("GPU-{}", uuid.trim_start_matches("GPU-"));
        let mut child = Command::new("nvidia-smi")
            .args([
                "--query-gpu=utilization.gpu",
                "--format=csv,noheader,nounits",
            ])
            .args(["-i", &id, "-lms", &SAMPLE_MS.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|error| tracing::warn!("no GPU utilization samples: nvidia-smi: {error}"))
            .ok()?;
        let stdout = child.stdout.take()?;
        let reader = std::thread::Builder::new()
            .name("gpu-busy".into())
            .spawn(move || {
                BufReader::new(stdout)
                    .lines()
                    .map_while(Result::ok)
                    .filter_map(|line| utilization(&line).map(|u| (Instant::now(), u)))
                    .collect()
            });
        match reader {
            Ok(reader) => Some(GpuBusySampler { child, reader }),
            Err(error) => {
                tracing::warn!("no GPU utilization samples: {error}");
                let _ = child.kill();
                let _ = child.wait();
                None
            }
        }
    }

    /// Stops `nvidia-smi` and sums what it read.
    pub fn finish(mut self) -> Option<GpuBusy> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let readings = self.reader.join().ok()?;
        GpuBusy::of(&readings)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn each_reading_weighs_by_the_time_since_the_last() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // 0.1 s at 100%, then 0.3 s at 50%: 0.25 s of kernels in 0.4 s.
        let busy = GpuBusy::of(&[(at(0), 0), (at(100), 100), (at(400), 50)]).unwrap();
        assert_eq!(busy.samples, 3);
        assert!((busy.span_s - 0.4).abs() < 1e-9);
        assert!((busy.busy_s - 0.25).abs() < 1e-9, "{busy:?}");
        // 0.25 s for 10 evaluations: 144,000 an hour at most.
        let ceiling = busy.ceiling_per_hour(10).unwrap();
        assert!((ceiling - 144_000.0).abs() < 1e-6, "{ceiling}");
    }

    #[test]
    fn too_few_readings_or_an_idle_gpu_give_no_figure() {
        let t0 = Instant::now();
        assert_eq!(GpuBusy::of(&[]), None);
        assert_eq!(GpuBusy::of(&[(t0, 40)]), None);
        let idle = GpuBusy::of(&[(t0, 0), (t0 + Duration::from_secs(1), 0)]).unwrap();
        assert_eq!(idle.ceiling_per_hour(64), None);
    }

    #[test]
    fn only_bare_percentages_are_readings() {
        assert_eq!(utilization(" 37\n"), Some(37));
        assert_eq!(utilization("[N/A]"), None);
        assert_eq!(utilization("utilization.gpu [%]"), None);
    }
}
