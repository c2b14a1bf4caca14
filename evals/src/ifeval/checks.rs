//! `check_following` of each instruction, ported from lm-eval 0.4.13's `instructions.py`.
//!
//! Each check mirrors its Python line by line; the comments name the Python expression when
//! the Rust spelling hides it. Python's `re` patterns run on the `regex` crate with Python's
//! own `\s`/`\d` sets spliced in (leftmost-first matching is the same); patterns that need
//! IGNORECASE or `\b` on keywords are matched by hand with `re`'s rules.

use std::sync::LazyLock;

use regex::Regex;

use super::instructions::{Instruction, Keyword, Relation};
use super::{langid, punkt, pyjson, pytext, word_tokenize};

struct Patterns {
    placeholder: Regex,
    bullet_star: Regex,
    bullet_dash: Regex,
    highlight: Regex,
    double_highlight: Regex,
    paragraph_divider: Regex,
    title: Regex,
}

static PATTERNS: LazyLock<Patterns> = LazyLock::new(|| {
    let ws = pytext::re_space_class();
    // Constant patterns: a failure is a bug that every test would show.
    let re = |p: String| Regex::new(&p).unwrap_or_else(|e| panic!("pattern {p}: {e}"));
    Patterns {
        placeholder: re(r"\[.*?\]".to_owned()),
        bullet_star: re(format!(r"(?m)^{ws}*\*[^\*].*$")),
        bullet_dash: re(format!(r"(?m)^{ws}*-.*$")),
        highlight: re(r"\*[^\n\*]*\*".to_owned()),
        double_highlight: re(r"\*\*[^\n\*]*\*\*".to_owned()),
        paragraph_divider: re(format!(r"{ws}?\*\*\*{ws}?")),
        title: re(r"<<[^\n]+>>".to_owned()),
    }
});

/// Start of the first case-insensitive match of a literal keyword at or after `from`
/// (`re.search(keyword, value, re.IGNORECASE)`), optionally between `\b`s.
fn find_literal(text: &[char], word: &[char], from: usize, whole_word: bool) -> Option<usize> {
    let last = text.len().checked_sub(word.len())?;
    (from..=last).find(|&i| {
        (!whole_word || pytext::is_boundary(text, i))
            && word
                .iter()
                .zip(&text[i..])
                .all(|(&p, &c)| pytext::re_icase_eq(p, c))
            && (!whole_word || pytext::is_boundary(text, i + word.len()))
    })
}

fn keyword_found(keyword: &Keyword, value: &str, whole_word: bool) -> bool {
    match keyword {
        Keyword::Literal(word) => {
            let text: Vec<char> = value.chars().collect();
            find_literal(&text, word, 0, whole_word).is_some()
        }
        Keyword::Regex(re) => re.is_match(value),
    }
}

/// `len(re.findall(keyword, value, re.IGNORECASE))`: non-overlapping matches.
fn keyword_count(keyword: &Keyword, value: &str) -> usize {
    match keyword {
        Keyword::Literal(word) => {
            let text: Vec<char> = value.chars().collect();
            if word.is_empty() {
                return text.len() + 1;
            }
            let mut count = 0;
            let mut from = 0;
            while let Some(i) = find_literal(&text, word, from, false) {
                count += 1;
                from = i + word.len();
            }
            count
        }
        Keyword::Regex(re) => re.find_iter(value).count(),
    }
}

/// `instructions_util.count_words`: `RegexpTokenizer(r"\w+")` tokens, NLTK's `regex` `\w`.
pub fn count_words(value: &str) -> usize {
    let mut count = 0;
    let mut in_word = false;
    for c in value.chars() {
        let word = pytext::rx_is_word(c);
        if word && !in_word {
            count += 1;
        }
        in_word = word;
    }
    count
}

fn paragraphs_follow(value: &str, expected: f64) -> bool {
    let paragraphs: Vec<&str> = PATTERNS.paragraph_divider.split(value).collect();
    let mut count = paragraphs.len();
    for (i, p) in paragraphs.iter().enumerate() {
        if pytext::strip(p).is_empty() {
            if i == 0 || i == paragraphs.len() - 1 {
                count -= 1;
            } else {
                return false;
            }
        }
    }
    count as f64 == expected
}

fn nth_paragraph_follows(value: &str, num_paragraphs: usize, nth: usize, first_word: &str) -> bool {
    let paragraphs: Vec<&str> = value.split("\n\n").collect();
    let count = paragraphs
        .iter()
        .filter(|p| !pytext::strip(p).is_empty())
        .count();
    if nth > count {
        return false;
    }
    let paragraph = pytext::strip(paragraphs[nth - 1]);
    let Some(word) = pytext::split_whitespace(paragraph).next() else {
        return false;
    };
    let word = word.trim_start_matches('\'').trim_start_matches('"');
    let mut found = String::new();
    for c in word.chars() {
        if matches!(c, '.' | ',' | '?' | '!' | '\'' | '"') {
            break;
        }
        found.push_str(&pytext::lower(c.encode_utf8(&mut [0; 4])));
    }
    count == num_paragraphs && found == first_word
}

fn highlights(value: &str) -> usize {
    let single = PATTERNS
        .highlight
        .find_iter(value)
        .filter(|m| !pytext::strip(m.as_str().trim_matches('*')).is_empty())
        .count();
    let double = PATTERNS
        .double_highlight
        .find_iter(value)
        .filter(|m| {
            let s = m.as_str();
            let s = s.strip_prefix("**").unwrap_or(s);
            let s = s.strip_suffix("**").unwrap_or(s);
            !pytext::strip(s).is_empty()
        })
        .count();
    single + double
}

fn json_follows(value: &str) -> bool {
    let mut v = pytext::strip(value);
    for prefix in ["```json", "```Json", "```JSON", "```"] {
        v = v.strip_prefix(prefix).unwrap_or(v);
    }
    v = v.strip_suffix("```").unwrap_or(v);
    pyjson::loads_ok(pytext::strip(v))
}

fn two_responses_follow(value: &str) -> bool {
    let parts: Vec<&str> = value.split("******").collect();
    let mut valid = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        if pytext::strip(part).is_empty() {
            if i != 0 && i != parts.len() - 1 {
                return false;
            }
        } else {
            valid.push(*part);
        }
    }
    valid.len() == 2 && pytext::strip(valid[0]) != pytext::strip(valid[1])
}

/// `langdetect.detect(value) == expected`, or true where langdetect finds no features.
fn language_is(value: &str, expected: &str) -> bool {
    langid::detect(value).is_none_or(|lang| lang == expected)
}

impl Instruction {
    /// `check_following(value)` of the reference.
    pub fn check(&self, value: &str) -> bool {
        match self {
            Instruction::KeywordExistence { keywords } => {
                keywords.iter().all(|k| keyword_found(k, value, false))
            }
            Instruction::KeywordFrequency {
                keyword,
                frequency,
                relation,
            } => relation.holds(keyword_count(keyword, value), *frequency),
            Instruction::ForbiddenWords { words } => {
                !words.iter().any(|w| keyword_found(w, value, true))
            }
            Instruction::LetterFrequency {
                letter,
                frequency,
                relation,
            } => {
                let count = pytext::lower(value).chars().filter(|c| c == letter).count();
                relation.holds(count, *frequency)
            }
            Instruction::ResponseLanguage { language } => language_is(value, language),
            Instruction::NumberSentences {
                num_sentences,
                relation,
            } => relation.holds(punkt::count_sentences(value), *num_sentences),
            Instruction::NumberParagraphs { num_paragraphs } => {
                paragraphs_follow(value, *num_paragraphs)
            }
            Instruction::NumberWords {
                num_words,
                relation,
            } => relation.holds(count_words(value), *num_words),
            Instruction::NthParagraphFirstWord {
                num_paragraphs,
                nth_paragraph,
                first_word,
            } => nth_paragraph_follows(value, *num_paragraphs, *nth_paragraph, first_word),
            Instruction::NumberPlaceholders { num_placeholders } => {
                PATTERNS.placeholder.find_iter(value).count() as f64 >= *num_placeholders
            }
            Instruction::Postscript { pattern } => pattern.is_match(&pytext::lower(value)),
            Instruction::NumberBulletLists { num_bullets } => {
                let n = PATTERNS.bullet_star.find_iter(value).count()
                    + PATTERNS.bullet_dash.find_iter(value).count();
                n as f64 == *num_bullets
            }
            Instruction::ConstrainedResponse => {
                let v = pytext::strip(value);
                [
                    "My answer is yes.",
                    "My answer is no.",
                    "My answer is maybe.",
                ]
                .iter()
                .any(|o| v.contains(o))
            }
            Instruction::NumberHighlightedSections { num_highlights } => {
                highlights(value) as f64 >= *num_highlights
            }
            Instruction::MultipleSections {
                splitter,
                num_sections,
            } => {
                // len(re.split(pattern, value)) - 1 == the number of matches.
                splitter.find_iter(value).count() as f64 >= *num_sections
            }
            Instruction::JsonFormat => json_follows(value),
            Instruction::Title => PATTERNS.title.find_iter(value).any(|m| {
                !pytext::strip(m.as_str().trim_start_matches('<').trim_end_matches('>')).is_empty()
            }),
            Instruction::TwoResponses => two_responses_follow(value),
            Instruction::RepeatPrompt { prompt_to_repeat } => pytext::lower(pytext::strip(value))
                .starts_with(&pytext::lower(pytext::strip(prompt_to_repeat))),
            Instruction::EndChecker { end_phrase } => {
                pytext::lower(pytext::strip(value).trim_matches('"')).ends_with(end_phrase.as_str())
            }
            Instruction::CapitalWordFrequency {
                frequency,
                relation,
            } => {
                let tokens = word_tokenize::word_tokenize(value);
                relation.holds(
                    tokens.iter().filter(|t| pytext::is_upper(t)).count(),
                    *frequency,
                )
            }
            Instruction::EnglishCapital => pytext::is_upper(value) && language_is(value, "en"),
            Instruction::EnglishLowercase => pytext::is_lower(value) && language_is(value, "en"),
            Instruction::NoComma => !value.contains(','),
            Instruction::Quotation => {
                let v = pytext::strip(value);
                v.chars().count() > 1 && v.starts_with('"') && v.ends_with('"')
            }
        }
    }
}

impl Relation {
    /// For reports: the reference's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Relation::LessThan => "less than",
            Relation::AtLeast => "at least",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_regex_module_word_runs() {
        // Hello world don t e mail 3 14 नमस्ते (the `regex` module keeps the marks in).
        assert_eq!(count_words("Hello, world! don't e-mail 3.14 नमस्ते"), 9);
        assert_eq!(count_words(""), 0);
    }

    #[test]
    fn keyword_matching_follows_re() {
        let k = Keyword::Literal("is".chars().collect());
        assert_eq!(keyword_count(&k, "This IS ıs"), 3);
        assert!(keyword_found(
            &Keyword::Literal("can".chars().collect()),
            "can't",
            true
        ));
        assert!(!keyword_found(
            &Keyword::Literal("can".chars().collect()),
            "can_do cannot",
            true
        ));
    }

    #[test]
    fn structural_checks() {
        assert!(two_responses_follow("A\n******\nB"));
        assert!(!two_responses_follow("A\n******\n\n******\nB"));
        assert!(json_follows("```json\n{\"a\": NaN}\n```"));
        // `*a*`, then `**`, `**` and `* *` are empty; `**b**` counts as a double highlight.
        assert_eq!(highlights("*a* **b** * * *c\nd*"), 2);
        assert!(paragraphs_follow("a\n***\nb", 2.0) && !paragraphs_follow("a *** *** b", 3.0));
        // The first word ends at . , ? ! ' " only; the nth paragraph is indexed among the raw
        // "\n\n" pieces while empty pieces are not counted.
        assert!(nth_paragraph_follows("x\n\n\"Summary, y", 2, 2, "summary"));
        assert!(!nth_paragraph_follows("x\n\n\"Summary: y", 2, 2, "summary"));
        assert!(!nth_paragraph_follows(
            "x\n\n\n\n'Summary. y",
            2,
            2,
            "summary"
        ));
    }
}
