//! The SQLite side of [`crate::listing`]: summaries come from `json_extract` in SQL, so no
//! result document is parsed in Rust.

use rusqlite::{OptionalExtension, Row};

use super::{SqliteStore, parse_state};
use crate::listing::{FindingSummary, FinishedCounts, Listing, TaskSummary};
use crate::{Result, TaskSpec};

const SUMMARY: &str = "SELECT id, task_name, client, state, submitted_at, finished_at, cached,
    json_extract(result, '$.verdict'), json_extract(result, '$.speedup'),
    json_extract(result, '$.speedup_matched'), json_extract(result, '$.findings'),
    json_extract(spec, '$.options.verify_policy')
    FROM tasks
    WHERE (?1 IS NULL OR task_name = ?1)
      AND (?2 IS NULL OR finished_at >= ?2)
      AND (?3 = 0 OR EXISTS (SELECT 1 FROM json_each(result, '$.findings') AS f
                             WHERE json_extract(f.value, '$.severity') IN ('reject', 'flag')))
    ORDER BY seq DESC LIMIT ?4";

impl SqliteStore {
    /// See [`crate::Store::recent`].
    pub fn recent(&self, listing: &Listing) -> Result<Vec<TaskSummary>> {
        self.read(|conn| {
            let limit = i64::try_from(listing.limit).unwrap_or(i64::MAX);
            let rows = conn
                .prepare_cached(SUMMARY)?
                .query_map(
                    rusqlite::params![
                        listing.task_name,
                        listing.finished_since,
                        listing.with_findings,
                        limit
                    ],
                    summary_from_row,
                )?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
    }

    /// See [`crate::Store::finished_counts`].
    pub fn finished_counts(&self, since: f64) -> Result<FinishedCounts> {
        self.read(|conn| {
            let rows = conn
                .prepare_cached(
                    "SELECT COALESCE(json_extract(result, '$.verdict'), state),
                            cached OR shared_with IS NOT NULL, COUNT(*)
                     FROM tasks WHERE finished_at IS NOT NULL AND finished_at >= ?1
                     GROUP BY 1, 2",
                )?
                .query_map([since], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(FinishedCounts { rows })
        })
    }

    /// See [`crate::Store::spec`].
    pub fn spec(&self, id: &str) -> Result<Option<TaskSpec>> {
        self.read(|conn| {
            let text: Option<String> = conn
                .prepare_cached("SELECT spec FROM tasks WHERE id = ?1")?
                .query_row([id], |row| row.get(0))
                .optional()?;
            Ok(text.map(|text| serde_json::from_str(&text)).transpose()?)
        })
    }
}

fn summary_from_row(row: &Row<'_>) -> rusqlite::Result<TaskSummary> {
    let state: String = row.get(3)?;
    let findings: Option<String> = row.get(10)?;
    Ok(TaskSummary {
        id: row.get(0)?,
        task_name: row.get(1)?,
        client: row.get(2)?,
        state: parse_state(&state)?,
        submitted_at: row.get(4)?,
        finished_at: row.get(5)?,
        cached: row.get(6)?,
        verdict: row.get(7)?,
        speedup: row.get(8)?,
        speedup_matched: row.get(9)?,
        findings: findings.as_deref().map(parse_findings).unwrap_or_default(),
        verify_policy: row.get(11)?,
    })
}

/// The findings array of a stored result; entries that do not fit are skipped, since the
/// listing is for display and the full document stays available.
fn parse_findings(text: &str) -> Vec<FindingSummary> {
    let Ok(serde_json::Value::Array(items)) = serde_json::from_str(text) else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| {
            Some(FindingSummary {
                code: item.get("code")?.as_str()?.to_string(),
                severity: item.get("severity")?.as_str()?.to_string(),
                message: item
                    .get("message")?
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                line: item
                    .get("line")
                    .and_then(serde_json::Value::as_u64)
                    .and_then(|line| u32::try_from(line).ok()),
            })
        })
        .collect()
}
