//! BBH's answer, as lm-eval 0.4.13's `bbh_cot_fewshot` scores it: the
//! `get-answer` filter (`regex_pattern: "(?<=the answer is )(.*)(?=.)"`, then `take_first`)
//! and `exact_match` without options. The `regex` crate has no look-around, so the pattern is a
//! hand-written scan with `re`'s semantics: the text after the first "the answer is " that
//! has at least one more character on its line, up to the line's last character (which the
//! look-ahead leaves out), stripped; "[invalid]" when there is none. Checked against lm-eval's
//! own `RegexFilter` on a committed corpus (`tests/bbh_exact.rs`).

use crate::gsm8k::filter::{ExactMatch, FALLBACK};
use crate::ifeval::pytext;

const CUE: &str = "the answer is ";

/// The `get-answer` filter.
pub fn answer(response: &str) -> String {
    let mut from = 0;
    while let Some(at) = response[from..].find(CUE) {
        let start = from + at + CUE.len();
        let line_end = response[start..]
            .find('\n')
            .map_or(response.len(), |p| start + p);
        // `(.*)` then `(?=.)`: at least one character left on the line, which stays outside.
        if let Some((last, _)) = response[start..line_end].char_indices().next_back() {
            return pytext::strip(&response[start..start + last]).to_string();
        }
        from = from + at + 1;
    }
    FALLBACK.to_string()
}

/// `exact_match` of the filtered answer against the target (no case or punctuation folding).
pub fn is_correct(response: &str, target: &str) -> bool {
    ExactMatch {
        ignore: Vec::new(),
        ignore_case: false,
        ignore_punctuation: false,
    }
    .matches(&answer(response), target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_character_of_the_line_stays_out() {
        assert_eq!(answer("So the answer is (A)."), "(A)");
        assert_eq!(answer("So the answer is (A)"), "(A");
        assert_eq!(answer("the answer is \nthe answer is Yes.\n"), "Yes");
        assert_eq!(answer("So The answer is No."), FALLBACK);
        assert_eq!(answer("the answer is x"), "");
        assert!(is_correct("Thus the answer is False.", "False"));
    }
}
