//! lm-eval's answer extraction and exact match for GSM8K, with Python `re` semantics:
//! `RegexFilter` + `take_first` (`lm_eval/filters/extraction.py`, `selection.py`) and
//! `exact_match_hf_evaluate` (`lm_eval/api/metrics.py`).
//!
//! The patterns come from the harness's yaml files. Python's `re` and the `regex` crate agree on
//! them (ASCII classes, `.` without newline, leftmost-first alternation and greedy repeats give
//! the same captures) except for `$`, which in Python also matches before a final newline;
//! [`PySub`] handles the one place it occurs (`\.$`). `tests/gsm8k_exact.rs` compares every
//! verdict with the real lm-eval code on a committed set of tricky completions.

use crate::ifeval::pytext;
use regex::Regex;

/// What `RegexFilter` returns when nothing matches.
pub const FALLBACK: &str = "[invalid]";

/// `RegexFilter(regex_pattern, group_select)` followed by `take_first`.
#[derive(Debug)]
pub struct RegexFilter {
    re: Regex,
    group_select: i64,
}

impl RegexFilter {
    /// The yaml filter patterns have no `^`/`$` anchors, the one place where Python's and the
    /// `regex` crate's meanings differ for them.
    pub fn new(pattern: &str, group_select: i64) -> Result<RegexFilter, String> {
        let re = Regex::new(pattern).map_err(|e| format!("pattern {pattern:?}: {e}"))?;
        Ok(RegexFilter { re, group_select })
    }

    /// The extracted answer: `re.findall`, the match at `group_select` (negative counts from the
    /// end), for several groups the first non-empty one, then `str.strip()`.
    pub fn apply(&self, response: &str) -> String {
        let all: Vec<regex::Captures> = self.re.captures_iter(response).collect();
        if all.is_empty() {
            return FALLBACK.to_string();
        }
        let n = all.len() as i64;
        let at = if self.group_select < 0 {
            n + self.group_select
        } else {
            self.group_select
        };
        // Python would raise IndexError; the yaml files only use 0 and -1, which always exist.
        let Some(caps) = usize::try_from(at).ok().and_then(|i| all.get(i)) else {
            return FALLBACK.to_string();
        };
        let groups = caps.len() - 1;
        let found = match groups {
            // findall returns whole matches without groups, the group's text with one (empty
            // when it did not take part), and a tuple with more.
            0 => caps.get(0).map_or("", |m| m.as_str()),
            1 => caps.get(1).map_or("", |m| m.as_str()),
            _ => (1..=groups)
                .filter_map(|g| caps.get(g))
                .map(|m| m.as_str())
                .find(|s| !s.is_empty())
                .unwrap_or(FALLBACK),
        };
        pytext::strip(found).to_string()
    }
}

/// `re.sub(pattern, "", text)` for the patterns of `regexes_to_ignore`.
#[derive(Debug)]
pub struct PySub {
    re: Regex,
    /// The pattern ended in `$`, rewritten as a captured optional final newline that the
    /// replacement puts back: Python's `$` matches at the end and before a final `\n`.
    keeps_final_newline: bool,
}

impl PySub {
    pub fn new(pattern: &str) -> Result<PySub, String> {
        let trailing_dollar =
            pattern.ends_with('$') && !escaped_at_end(&pattern[..pattern.len() - 1]);
        let body = if trailing_dollar {
            &pattern[..pattern.len() - 1]
        } else {
            pattern
        };
        if body.contains('$') && !body.contains("\\$") {
            return Err(format!(
                "pattern {pattern:?}: only a final `$` anchor is ported"
            ));
        }
        let source = if trailing_dollar {
            format!("(?:{body})(?P<final_newline>\n?)\\z")
        } else {
            body.to_string()
        };
        let re = Regex::new(&source).map_err(|e| format!("pattern {pattern:?}: {e}"))?;
        Ok(PySub {
            re,
            keeps_final_newline: trailing_dollar,
        })
    }

    pub fn apply(&self, text: &str) -> String {
        let replacement = if self.keeps_final_newline {
            "${final_newline}"
        } else {
            ""
        };
        self.re.replace_all(text, replacement).into_owned()
    }
}

/// True when `s` ends in an odd number of backslashes (the next character is escaped).
fn escaped_at_end(s: &str) -> bool {
    s.chars().rev().take_while(|&c| c == '\\').count() % 2 == 1
}

/// `exact_match_hf_evaluate`'s normalisation of one string: each ignored pattern removed in
/// order, then `lower()`, then (if asked) ASCII punctuation removed.
#[derive(Debug)]
pub struct ExactMatch {
    pub ignore: Vec<PySub>,
    pub ignore_case: bool,
    pub ignore_punctuation: bool,
}

impl ExactMatch {
    pub fn normalize(&self, text: &str) -> String {
        let mut s = text.to_string();
        for sub in &self.ignore {
            s = sub.apply(&s);
        }
        if self.ignore_case {
            s = pytext::lower(&s);
        }
        if self.ignore_punctuation {
            // Python's string.punctuation.
            s.retain(|c| !c.is_ascii_punctuation());
        }
        s
    }

    pub fn matches(&self, prediction: &str, reference: &str) -> bool {
        self.normalize(prediction) == self.normalize(reference)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollar_matches_before_a_final_newline_as_in_python() {
        let sub = PySub::new(r"\.$").unwrap();
        assert_eq!(sub.apply("5."), "5");
        assert_eq!(sub.apply("5.\n"), "5\n");
        assert_eq!(sub.apply("5.\n\n"), "5.\n\n");
        assert_eq!(sub.apply("5.."), "5.");
        assert_eq!(PySub::new(r"\$").unwrap().apply("$5$"), "5");
    }

    #[test]
    fn groups_follow_findall() {
        let flex = RegexFilter::new(r"(-?[$0-9.,]{2,})|(-?[0-9]+)", -1).unwrap();
        assert_eq!(
            flex.apply("I had 3 apples and -5 pears, so 1,000."),
            "1,000."
        );
        assert_eq!(flex.apply("-5"), "-5");
        assert_eq!(flex.apply("none"), FALLBACK);
        let strict = RegexFilter::new(r"The answer is (\-?[0-9\.\,]+).", 0).unwrap();
        // The unescaped final `.` takes a digit when nothing follows.
        assert_eq!(strict.apply("The answer is 55"), "5");
        assert_eq!(strict.apply("The answer is 55."), "55");
    }
}
