//! Reference timings shared between evaluations, re-measured on a schedule.
//!
//! The key ([`ReferenceKey`]) holds everything a reference timing depends on; an entry is
//! served until it is older than `max_age` or has been served `remeasure_every` times, and then
//! the next evaluation times the reference itself and replaces it. Why serving it is sound:
//! ARCHITECTURE.md, "Reference timing cache"; in full, docs/design-notes.md, "Reference
//! timings".

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crucible_judge::{ReferenceKey, ReferenceTiming, ReferenceTimingCache};

use super::probe::{EngineEvent, Probe};

/// When a cached reference timing is measured again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReferencePolicy {
    /// An entry older than this is measured again (clocks, temperature and neighbours drift).
    pub max_age: Duration,
    /// An entry served this many times is measured again, however young.
    pub remeasure_every: u32,
}

impl Default for ReferencePolicy {
    fn default() -> Self {
        ReferencePolicy {
            max_age: Duration::from_secs(600),
            remeasure_every: 32,
        }
    }
}

struct Entry {
    timing: ReferenceTiming,
    measured: Instant,
    served: u32,
}

pub struct ReferenceCache {
    policy: ReferencePolicy,
    entries: Mutex<HashMap<ReferenceKey, Entry>>,
    probe: Option<Probe>,
}

impl std::fmt::Debug for ReferenceCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReferenceCache")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl ReferenceCache {
    pub fn new(policy: ReferencePolicy, probe: Option<Probe>) -> ReferenceCache {
        ReferenceCache {
            policy,
            entries: Mutex::new(HashMap::new()),
            probe,
        }
    }

    fn report(&self, hit: bool) {
        if let Some(probe) = &self.probe {
            probe(EngineEvent::ReferenceTiming { hit });
        }
    }
}

impl ReferenceTimingCache for ReferenceCache {
    fn lookup(&self, key: &ReferenceKey) -> Option<ReferenceTiming> {
        let hit = self.entries.lock().ok().and_then(|mut entries| {
            let entry = entries.get_mut(key)?;
            let due = entry.measured.elapsed() >= self.policy.max_age
                || entry.served >= self.policy.remeasure_every;
            if due {
                return None;
            }
            entry.served += 1;
            Some(entry.timing.clone())
        });
        self.report(hit.is_some());
        hit
    }

    fn store(&self, key: ReferenceKey, timing: ReferenceTiming) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.insert(
                key,
                Entry {
                    timing,
                    measured: Instant::now(),
                    served: 0,
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(task: &str) -> ReferenceKey {
        ReferenceKey {
            task_sha256: task.into(),
            size_profile: "full".into(),
            device_name: "H200".into(),
            versions: "v".into(),
            warmup: 5,
            iters: 100,
            flush_bytes: 1 << 28,
            precision: None,
        }
    }

    fn timing(ms: f64) -> ReferenceTiming {
        ReferenceTiming {
            samples_ms: vec![ms],
            io_bytes: 8.0,
        }
    }

    #[test]
    fn serves_until_the_use_count_then_asks_for_a_measurement() {
        let cache = ReferenceCache::new(
            ReferencePolicy {
                max_age: Duration::from_secs(3600),
                remeasure_every: 2,
            },
            None,
        );
        assert_eq!(cache.lookup(&key("a")), None);
        cache.store(key("a"), timing(1.0));
        assert_eq!(cache.lookup(&key("a")), Some(timing(1.0)));
        assert_eq!(cache.lookup(&key("b")), None, "another task is another key");
        assert_eq!(cache.lookup(&key("a")), Some(timing(1.0)));
        assert_eq!(cache.lookup(&key("a")), None, "served twice: measure again");
        cache.store(key("a"), timing(2.0));
        assert_eq!(cache.lookup(&key("a")), Some(timing(2.0)));
    }

    #[test]
    fn an_old_entry_is_measured_again() {
        let cache = ReferenceCache::new(
            ReferencePolicy {
                max_age: Duration::from_millis(30),
                remeasure_every: 1000,
            },
            None,
        );
        cache.store(key("a"), timing(1.0));
        assert!(cache.lookup(&key("a")).is_some());
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(cache.lookup(&key("a")), None);
    }

    #[test]
    fn every_part_of_the_key_separates_entries() {
        let cache = ReferenceCache::new(ReferencePolicy::default(), None);
        cache.store(key("a"), timing(1.0));
        let variants = [
            ReferenceKey {
                precision: Some(crucible_result::PrecisionClass::Fp16),
                ..key("a")
            },
            ReferenceKey {
                iters: 50,
                ..key("a")
            },
            ReferenceKey {
                device_name: "A100".into(),
                ..key("a")
            },
            ReferenceKey {
                size_profile: "small".into(),
                ..key("a")
            },
            ReferenceKey {
                versions: "w".into(),
                ..key("a")
            },
        ];
        for variant in variants {
            assert_eq!(cache.lookup(&variant), None, "{variant:?}");
        }
    }
}
