//! Python string semantics the IFEval reference depends on, read from generated tables.
//!
//! The reference is Python: `str.strip()`, `str.lower()`, `str.isupper()`, `re`'s `\s`, `\w`,
//! `\b` and IGNORECASE decide verdicts, and NLTK's third-party `regex` module has its own
//! `\s`, `\w` and `\d`. Rust's `char` methods follow a newer Unicode version and different
//! definitions (e.g. `char::is_whitespace` is not `str.isspace`, which also counts U+001C to
//! U+001F), so every predicate here looks up tables generated from the pinned interpreter
//! (`scripts/ifeval_unicode_tables.py`, CPython 3.11 = Unicode 14.0).

use std::cmp::Ordering;

use super::unicode_tables as tables;

/// The Unicode version of the CPython the tables come from (`unicodedata.unidata_version`).
pub use super::unicode_tables::PY_UNICODE_VERSION;

fn in_ranges(c: char, ranges: &[(u32, u32)]) -> bool {
    let cp = c as u32;
    ranges
        .binary_search_by(|&(lo, hi)| {
            if hi < cp {
                Ordering::Less
            } else if lo > cp {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        })
        .is_ok()
}

fn lookup<V: Copy>(map: &[(u32, V)], c: char) -> Option<V> {
    map.binary_search_by_key(&(c as u32), |&(k, _)| k)
        .ok()
        .map(|i| map[i].1)
}

/// `str.isspace()` for one character; also `re`'s `\s` and what `str.strip()` removes.
pub fn is_space(c: char) -> bool {
    in_ranges(c, tables::PY_SPACE)
}

/// `re`'s `\w` (`str.isalnum()` or `_`), which also defines `re`'s `\b`.
pub fn is_word(c: char) -> bool {
    in_ranges(c, tables::PY_WORD)
}

/// `re`'s `\d` for `str` patterns (Unicode decimal digits).
pub fn is_digit(c: char) -> bool {
    in_ranges(c, tables::PY_DIGIT)
}

/// The `regex` module's `\s` (used by NLTK): Unicode White_Space, without U+001C..U+001F.
pub fn rx_is_space(c: char) -> bool {
    in_ranges(c, tables::RX_SPACE)
}

/// The `regex` module's `\w` (used by NLTK): it includes combining marks, unlike `re`'s.
pub fn rx_is_word(c: char) -> bool {
    in_ranges(c, tables::RX_WORD)
}

/// The `regex` module's `\d` (used by NLTK).
pub fn rx_is_digit(c: char) -> bool {
    in_ranges(c, tables::RX_DIGIT)
}

/// Whether the `regex` module's `(?i)` matches text character `c` against the ASCII lowercase
/// letter `letter` (NLTK's case-insensitive contraction patterns).
pub fn rx_icase_letter(letter: char, c: char) -> bool {
    c == letter
        || tables::RX_ICASE_EXTRA
            .iter()
            .any(|&(l, other)| l == letter as u32 && other == c as u32)
}

/// `str.strip()`: removes Python whitespace at both ends.
pub fn strip(s: &str) -> &str {
    s.trim_matches(is_space)
}

/// `str.rstrip()`.
pub fn rstrip(s: &str) -> &str {
    s.trim_end_matches(is_space)
}

/// `str.split()` without arguments: runs of Python whitespace separate, ends are ignored.
pub fn split_whitespace(s: &str) -> impl Iterator<Item = &str> {
    s.split(is_space).filter(|w| !w.is_empty())
}

/// `str.isupper()` of a one-character string (CPython's `Py_UNICODE_ISUPPER`).
pub fn char_is_upper(c: char) -> bool {
    in_ranges(c, tables::PY_UPPER)
}

/// `str.islower()` of a one-character string.
pub fn char_is_lower(c: char) -> bool {
    in_ranges(c, tables::PY_LOWER)
}

fn char_is_title(c: char) -> bool {
    in_ranges(c, tables::PY_TITLE)
}

/// `str.isupper()`: no lowercase or titlecase character, and at least one uppercase one.
pub fn is_upper(s: &str) -> bool {
    let mut cased = false;
    for c in s.chars() {
        if char_is_lower(c) || char_is_title(c) {
            return false;
        }
        cased |= char_is_upper(c);
    }
    cased
}

/// `str.islower()`: no uppercase or titlecase character, and at least one lowercase one.
pub fn is_lower(s: &str) -> bool {
    let mut cased = false;
    for c in s.chars() {
        if char_is_upper(c) || char_is_title(c) {
            return false;
        }
        cased |= char_is_lower(c);
    }
    cased
}

const CAPITAL_SIGMA: char = '\u{3A3}';

/// `str.lower()`: full lowercase mapping (U+0130 becomes two characters) and CPython's
/// final-sigma rule: a capital sigma preceded by a cased letter (skipping case-ignorable
/// characters) and not followed by one becomes `ς`, otherwise `σ`.
pub fn lower(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    for (i, &c) in chars.iter().enumerate() {
        if c == CAPITAL_SIGMA {
            out.push(if is_final_sigma(&chars, i) {
                'ς'
            } else {
                'σ'
            });
        } else if let Some(mapped) = lookup(tables::PY_LOWER_MAP, c) {
            out.push_str(mapped);
        } else {
            out.push(c);
        }
    }
    out
}

fn is_final_sigma(chars: &[char], i: usize) -> bool {
    let ignorable = |c: char| in_ranges(c, tables::PY_SIGMA_IGNORABLE);
    let cased = |c: char| in_ranges(c, tables::PY_SIGMA_CASED);
    let before = chars[..i].iter().rev().find(|&&c| !ignorable(c));
    if !before.is_some_and(|&c| cased(c)) {
        return false;
    }
    match chars[i + 1..].iter().find(|&&c| !ignorable(c)) {
        None => true,
        Some(&c) => !cased(c),
    }
}

/// Whether `re` with IGNORECASE matches text character `c` against pattern character `p`:
/// both lowercased with the simple mapping must be equal, or be one of `re`'s extra
/// equivalences (`i`/`ı`, `s`/`ſ`, `µ`/`μ`, ...). Characters that are not cased match only
/// themselves.
pub fn re_icase_eq(p: char, c: char) -> bool {
    if !in_ranges(p, tables::SRE_CASED) {
        return p == c;
    }
    let simple_lower = |x: char| lookup(tables::SRE_LOWER, x).unwrap_or(x as u32);
    let (lp, lc) = (simple_lower(p), simple_lower(c));
    lp == lc
        || tables::SRE_EXTRA_CASES
            .iter()
            .any(|&(a, b)| a == lp && b == lc)
}

/// `re`'s `\b` between `chars[i - 1]` and `chars[i]` (the ends count as non-word).
pub fn is_boundary(chars: &[char], i: usize) -> bool {
    let before = i > 0 && is_word(chars[i - 1]);
    let after = i < chars.len() && is_word(chars[i]);
    before != after
}

/// A regex character-class body (without brackets) for `ranges`, for the `regex` crate.
pub fn class_body(ranges: &[(u32, u32)]) -> String {
    let mut out = String::new();
    for &(lo, hi) in ranges {
        if lo == hi {
            out.push_str(&format!("\\x{{{lo:X}}}"));
        } else {
            out.push_str(&format!("\\x{{{lo:X}}}-\\x{{{hi:X}}}"));
        }
    }
    out
}

/// `[...]` for Python's `\s`, for the `regex` crate.
pub fn re_space_class() -> String {
    format!("[{}]", class_body(tables::PY_SPACE))
}

/// `[...]` for Python's `\d`, for the `regex` crate.
pub fn re_digit_class() -> String {
    format!("[{}]", class_body(tables::PY_DIGIT))
}

/// `[...]` for Python's `\w`, for the `regex` crate.
pub fn re_word_class() -> String {
    format!("[{}]", class_body(tables::PY_WORD))
}

/// `[...]` for the `regex` module's `\s`, for the `regex` crate.
pub fn rx_space_class() -> String {
    format!("[{}]", class_body(tables::RX_SPACE))
}

/// `[...]` for the `regex` module's `\d`, for the `regex` crate.
pub fn rx_digit_class() -> String {
    format!("[{}]", class_body(tables::RX_DIGIT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_is_pythons() {
        assert!(is_space('\x1c') && !'\x1c'.is_whitespace());
        assert!(!rx_is_space('\x1c'));
        assert_eq!(strip("\x1f a \u{3000}"), "a");
        assert!(!is_space('\u{200b}'));
        assert_eq!(
            split_whitespace(" a\x1cb  c ").collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
    }

    #[test]
    fn word_characters_differ_between_re_and_regex() {
        // The virama and vowel signs of Devanagari are marks: `re`'s \w excludes them.
        assert!(!is_word('\u{94D}') && rx_is_word('\u{94D}'));
        assert!(is_word('½') && !rx_is_word('½'));
        assert!(is_word('_') && rx_is_word('_'));
    }

    #[test]
    fn case_predicates_match_python() {
        assert!(is_upper("HELLO, WORLD 1") && !is_upper("1, 2") && !is_upper("ǅEMAL"));
        assert!(is_lower("hello ß") && !is_lower("helLo") && !is_lower(""));
        assert!(is_upper("ΣΟΦΙΑ"));
    }

    #[test]
    fn lower_handles_sigma_and_dotted_i() {
        assert_eq!(lower("ΟΔΥΣΣΕΥΣ"), "οδυσσευς");
        assert_eq!(lower("Σ"), "σ");
        assert_eq!(lower("AΣ'"), "aς'");
        assert_eq!(lower("İ"), "i\u{307}");
        assert_eq!(lower("K"), "k");
    }

    #[test]
    fn ignorecase_follows_re() {
        assert!(re_icase_eq('i', 'I') && re_icase_eq('i', 'ı') && re_icase_eq('i', 'İ'));
        assert!(re_icase_eq('s', 'ſ') && re_icase_eq('k', 'K'));
        assert!(!re_icase_eq('a', 'b') && re_icase_eq('\'', '\'') && !re_icase_eq('1', '¹'));
    }
}
