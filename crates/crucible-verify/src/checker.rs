//! The context a rule runs in: the analyses of the module, the policy, and the findings so far.

use crucible_result::Finding;
use ruff_text_size::{TextRange, TextSize};

use crate::facts::ModuleFacts;
use crate::forward::Forward;
use crate::kernel::KernelTable;
use crate::policy::{Level, Policy};
use crate::rules::RULES;
use crate::semantic::Semantic;

pub(crate) struct Checker<'s, 'a> {
    pub sem: &'s Semantic<'a>,
    pub facts: &'s ModuleFacts<'a>,
    pub fwd: &'s Forward<'a>,
    source: &'a str,
    policy: &'s Policy,
    /// Index in [`RULES`] of the rule now running.
    rule: usize,
    level: Level,
    findings: Vec<Finding>,
    lines: Option<LineIndex>,
    kernels: Option<std::rc::Rc<KernelTable>>,
}

impl<'s, 'a> Checker<'s, 'a> {
    pub(crate) fn new(
        source: &'a str,
        policy: &'s Policy,
        sem: &'s Semantic<'a>,
        facts: &'s ModuleFacts<'a>,
        fwd: &'s Forward<'a>,
    ) -> Self {
        Checker {
            sem,
            facts,
            fwd,
            source,
            policy,
            rule: 0,
            level: Level::Off,
            findings: Vec::new(),
            lines: None,
            kernels: None,
        }
    }

    /// Makes rule `index` the one reporting; `false` when the policy turns it off.
    pub(crate) fn select(&mut self, index: usize) -> bool {
        self.rule = index;
        self.level = self.policy.level_at(index);
        self.level != Level::Off
    }

    /// The device-call graph and stores of the module's kernels, built on first use.
    pub(crate) fn kernels(&mut self) -> std::rc::Rc<KernelTable> {
        let sem = self.sem;
        self.kernels
            .get_or_insert_with(|| std::rc::Rc::new(KernelTable::new(sem)))
            .clone()
    }

    /// The source text of `range` (empty if the range is not in the source).
    pub(crate) fn text(&self, range: TextRange) -> &'a str {
        self.source
            .get(range.start().to_usize()..range.end().to_usize())
            .unwrap_or("")
    }

    /// Reports a finding of the running rule at byte offset `at`.
    pub(crate) fn report(&mut self, at: TextSize, message: impl Into<String>) {
        let Some(severity) = self.level.severity() else {
            return;
        };
        let source = self.source;
        let (line, column) = self
            .lines
            .get_or_insert_with(|| LineIndex::new(source))
            .locate(source, at.to_usize());
        self.findings.push(Finding {
            code: RULES[self.rule].info.code.to_string(),
            severity,
            message: message.into(),
            line: Some(line),
            column: Some(column),
        });
    }

    /// Reports a finding that has no one place in the source (e.g. a missing class).
    pub(crate) fn report_file(&mut self, message: impl Into<String>) {
        let Some(severity) = self.level.severity() else {
            return;
        };
        self.findings.push(Finding {
            code: RULES[self.rule].info.code.to_string(),
            severity,
            message: message.into(),
            line: None,
            column: None,
        });
    }

    /// The findings in source order, one per code and position.
    pub(crate) fn into_findings(self) -> Vec<Finding> {
        let mut findings = self.findings;
        findings.sort_by(|a, b| {
            (a.line.unwrap_or(0), a.column.unwrap_or(0))
                .cmp(&(b.line.unwrap_or(0), b.column.unwrap_or(0)))
        });
        findings.dedup_by(|a, b| a.code == b.code && a.line == b.line && a.column == b.column);
        findings
    }
}

/// Byte offsets of line starts, for 1-based line and column (in characters) of an offset.
pub(crate) struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub(crate) fn new(source: &str) -> LineIndex {
        let mut starts = vec![0];
        starts.extend(
            source
                .bytes()
                .enumerate()
                .filter(|&(_, b)| b == b'\n')
                .map(|(i, _)| i + 1),
        );
        LineIndex { starts }
    }

    pub(crate) fn locate(&self, source: &str, offset: usize) -> (u32, u32) {
        let offset = offset.min(source.len());
        let line = self.starts.partition_point(|&s| s <= offset).max(1) - 1;
        let start = self.starts[line];
        let column = source
            .get(start..offset)
            .map_or(offset - start, |s| s.chars().count());
        (
            u32::try_from(line + 1).unwrap_or(u32::MAX),
            u32::try_from(column + 1).unwrap_or(u32::MAX),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::LineIndex;

    #[test]
    fn offsets_map_to_one_based_lines_and_character_columns() {
        let src = "ab\ncdé f\n\nx";
        let idx = LineIndex::new(src);
        assert_eq!(idx.locate(src, 0), (1, 1));
        assert_eq!(idx.locate(src, 3), (2, 1));
        // `f` follows the two-byte `é`: byte 8, character column 5.
        assert_eq!(idx.locate(src, 8), (2, 5));
        assert_eq!(idx.locate(src, 11), (4, 1));
        assert_eq!(idx.locate(src, 99), (4, 2));
    }
}
