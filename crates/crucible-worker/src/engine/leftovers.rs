//! Device memory that killed processes still hold. A killed process is a zombie (or gone) at
//! once, but the driver gives its device memory back a little later (one H200, 100 GiB: 0.13 to
//! 0.26 s after, `scripts/probe/kill_release.py`). A retry alone after running out of memory
//! that starts meanwhile runs out again, beside the very attempt it retries (seen: the killed
//! referee's 108 GiB still listed).

use std::process::Command;
use std::time::{Duration, Instant};

use crucible_judge::process::has_ended;

/// Waits (at most `limit`) until no process that has ended still holds memory on the GPU with
/// this UUID, as `nvidia-smi` lists them. Returns whether none did; `false` also when
/// `nvidia-smi` cannot say (nothing to wait on then).
pub fn wait_until_released(uuid: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        let Some(holders) = holders(uuid) else {
            return false;
        };
        if !holders.iter().any(|&pid| has_ended(pid)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The pids `nvidia-smi` lists with memory on the GPU `uuid`.
fn holders(uuid: &str) -> Option<Vec<u32>> {
    let out = Command::new("nvidia-smi")
        .args(["--query-compute-apps=gpu_uuid,pid", "--format=csv,noheader"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| holders_in(&String::from_utf8_lossy(&out.stdout), uuid))
}

/// `GPU-<uuid>, <pid>` lines for this GPU (torch names it without the `GPU-` prefix).
fn holders_in(listing: &str, uuid: &str) -> Vec<u32> {
    let bare = |id: &str| id.trim().trim_start_matches("GPU-").to_ascii_lowercase();
    let wanted = bare(uuid);
    listing
        .lines()
        .filter_map(|line| line.split_once(','))
        .filter(|(gpu, _)| bare(gpu) == wanted)
        .filter_map(|(_, pid)| pid.trim().parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_are_read_for_this_gpu_only() {
        let listing = "GPU-566adab6-87d0-9b0b, 703\nGPU-566adab6-87d0-9b0b, 709\nGPU-1111, 12\n";
        assert_eq!(holders_in(listing, "566ADAB6-87d0-9b0b"), vec![703, 709]);
        assert_eq!(holders_in("", "566adab6"), Vec::<u32>::new());
        assert_eq!(
            holders_in("No running processes found\n", "x"),
            Vec::<u32>::new()
        );
    }
}
