//! The device an evaluation runs on, and how a harness process is pinned to it.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

/// `cpu` (Triton's interpreter, correctness only) or one GPU, `cuda:N` in this process's own
/// numbering (after the judge's own `CUDA_VISIBLE_DEVICES`, if any).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
    Cuda(u32),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    #[error("`{0}` is not a device: use `cpu` or `cuda:N`")]
    NotADevice(String),
    #[error("`{device}` does not exist: CUDA_VISIBLE_DEVICES={list} shows {count} GPU(s)")]
    NotVisible {
        device: Device,
        list: String,
        count: usize,
    },
}

impl Device {
    /// `cuda:0` when this machine has an NVIDIA GPU, else `cpu`.
    pub fn detect() -> Device {
        if Path::new("/proc/driver/nvidia/gpus").is_dir() || Path::new("/dev/nvidia0").exists() {
            Device::Cuda(0)
        } else {
            Device::Cpu
        }
    }

    pub fn is_gpu(self) -> bool {
        matches!(self, Device::Cuda(_))
    }

    /// The name a harness process is told to use: a GPU evaluation's processes see exactly one
    /// GPU, the requested one, as `cuda:0` (see [`crate::runtime::harness_env`]).
    pub(crate) fn harness_name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Cuda(_) => "cuda:0",
        }
    }

    /// The `CUDA_VISIBLE_DEVICES` entry a harness process gets for this device, given this
    /// process's own `CUDA_VISIBLE_DEVICES` (`visible`); `None` on the CPU.
    pub(crate) fn visible_entry(
        self,
        visible: Option<&str>,
    ) -> Result<Option<String>, DeviceError> {
        let Device::Cuda(index) = self else {
            return Ok(None);
        };
        let Some(list) = visible else {
            return Ok(Some(index.to_string()));
        };
        let entries: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect();
        entries
            .get(index as usize)
            .map(|entry| Some((*entry).to_string()))
            .ok_or_else(|| DeviceError::NotVisible {
                device: self,
                list: list.to_string(),
                count: entries.len(),
            })
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(index) => write!(f, "cuda:{index}"),
        }
    }
}

impl FromStr for Device {
    type Err = DeviceError;

    fn from_str(name: &str) -> Result<Device, DeviceError> {
        let bad = || DeviceError::NotADevice(name.to_string());
        match name {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => name
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(bad),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(name: &str) -> Device {
        name.parse().expect("a device")
    }

    #[test]
    fn names_round_trip() {
        for name in ["cpu", "cuda:0", "cuda:3"] {
            assert_eq!(device(name).to_string(), name);
        }
        assert_eq!(device("cuda"), Device::Cuda(0));
        for bad in ["gpu", "cuda:", "cuda:x", "cudax", "cuda:-1", "CPU"] {
            assert!(bad.parse::<Device>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_gpu_index_names_one_entry_of_the_visible_list() {
        assert_eq!(Device::Cpu.visible_entry(None), Ok(None));
        assert_eq!(device("cuda:3").visible_entry(None), Ok(Some("3".into())));
        assert_eq!(
            device("cuda:1").visible_entry(Some("4, 6")),
            Ok(Some("6".into()))
        );
        assert_eq!(
            device("cuda:0").visible_entry(Some("GPU-1f2e,GPU-77aa")),
            Ok(Some("GPU-1f2e".into()))
        );
        assert!(device("cuda:2").visible_entry(Some("4,6")).is_err());
        assert_eq!(device("cuda:7").harness_name(), "cuda:0");
        assert_eq!(Device::Cpu.harness_name(), "cpu");
    }
}
