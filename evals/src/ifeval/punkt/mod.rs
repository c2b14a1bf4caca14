//! NLTK's Punkt sentence splitter with the English `punkt_tab` model, as NLTK 3.10.4 runs it
//! (`PunktTokenizer("english").tokenize(text)`), which IFEval uses to count sentences and,
//! through `word_tokenize`, to count capitalised words.
//!
//! Punkt (Kiss & Strunk 2006) does not split at every period: it finds each candidate end
//! (`.`, `?`, `!` followed by punctuation or by whitespace and a word), tokenizes the word
//! before it and the word after it, and decides with the model's abbreviations, collocations,
//! frequent sentence starters and orthographic statistics. NLTK's code has quirks that decide
//! counts (how the word before a candidate is found, how closing quotes and brackets are moved
//! onto the previous sentence); they are kept here on purpose. Offsets are byte offsets into
//! the text; every offset NLTK computes lands on a character boundary because the characters
//! it steps over are ASCII.

mod params;
mod tokens;

use crate::ifeval::pytext;
pub use params::{english, PunktParams};

/// A candidate sentence end: the end character and what follows it.
struct Candidate {
    start: usize,
    end: usize,
    /// The punctuation, or whitespace and the next token, after the end character.
    after_end: usize,
    /// Where the next token starts, when whitespace follows.
    next_tok: Option<usize>,
}

fn is_sent_end(c: char) -> bool {
    matches!(c, '.' | '?' | '!')
}

fn is_after_punct(c: char) -> bool {
    matches!(
        c,
        ')' | '"'
            | ';'
            | '}'
            | ']'
            | '*'
            | ':'
            | '@'
            | '\''
            | '('
            | '{'
            | '['
            | '\u{2018}'
            | '\u{2019}'
            | '\u{201C}'
            | '\u{201D}'
            | '\u{AB}'
            | '\u{BB}'
            | '?'
            | '!'
    )
}

/// `period_context_re().finditer(text)`: `[.?!](?=(NonWord|\s+(\S+)))`.
fn candidates(text: &str) -> Vec<Candidate> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let byte_at = |i: usize| chars.get(i).map_or(text.len(), |&(b, _)| b);
    let mut out = Vec::new();
    for (i, &(b, c)) in chars.iter().enumerate() {
        if !is_sent_end(c) {
            continue;
        }
        let Some(&(_, next)) = chars.get(i + 1) else {
            continue;
        };
        if is_after_punct(next) {
            out.push(Candidate {
                start: b,
                end: b + 1,
                after_end: byte_at(i + 2),
                next_tok: None,
            });
        } else if pytext::rx_is_space(next) {
            let mut j = i + 1;
            while j < chars.len() && pytext::rx_is_space(chars[j].1) {
                j += 1;
            }
            let word_start = j;
            while j < chars.len() && !pytext::rx_is_space(chars[j].1) {
                j += 1;
            }
            if j > word_start {
                out.push(Candidate {
                    start: b,
                    end: b + 1,
                    after_end: byte_at(j),
                    next_tok: Some(byte_at(word_start)),
                });
            }
        }
    }
    out
}

/// `_get_last_whitespace_index`: the last ASCII whitespace in `s`, or 0 when there is none
/// (so whitespace at index 0 also reads as "none", as in NLTK).
fn last_whitespace_index(s: &str) -> usize {
    s.bytes()
        .rposition(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c))
        .unwrap_or(0)
}

/// `_match_potential_end_contexts`: each candidate with the text Punkt decides on (the word
/// before it, the end character and what follows). A candidate whose preceding word overlaps
/// the previous candidate's is dropped in favour of the later one.
fn end_contexts<'t>(text: &'t str, cands: &'t [Candidate]) -> Vec<(&'t Candidate, String)> {
    let context = |slice: (usize, usize), m: &Candidate| {
        format!("{}{}", &text[slice.0..slice.1], &text[m.start..m.after_end])
    };
    let mut out = Vec::new();
    let mut prev_slice = (0usize, 0usize);
    let mut prev: Option<&Candidate> = None;
    for m in cands {
        let before = &text[prev_slice.1..m.start];
        let idx = last_whitespace_index(before);
        let word_start = if idx != 0 {
            idx + prev_slice.1 + 1
        } else {
            prev_slice.0
        };
        let word = (word_start, m.start);
        if let Some(p) = prev {
            if prev_slice.1 <= word.0 {
                out.push((p, context(prev_slice, p)));
            }
        }
        prev = Some(m);
        prev_slice = word;
    }
    if let Some(p) = prev {
        out.push((p, context(prev_slice, p)));
    }
    out
}

/// `text_contains_sentbreak`: a token other than the last one ends a sentence.
fn contains_sentbreak(context: &str, params: &PunktParams) -> bool {
    let mut toks = tokens::tokenize_words(context);
    tokens::annotate(&mut toks, params);
    toks.split_last()
        .is_some_and(|(_, init)| init.iter().any(|t| t.sentbreak))
}

/// `_slices_from_text`: sentence spans before realignment (`start` may exceed `end`, which
/// Python slicing reads as empty).
fn raw_slices(text: &str, params: &PunktParams) -> Vec<(usize, usize)> {
    let cands = candidates(text);
    let mut out = Vec::new();
    let mut last_break = 0;
    for (m, context) in end_contexts(text, &cands) {
        if contains_sentbreak(&context, params) {
            out.push((last_break, m.end));
            last_break = m.next_tok.unwrap_or(m.end);
        }
    }
    out.push((last_break, pytext::rstrip(text).len()));
    out
}

fn is_closing(c: char) -> bool {
    matches!(
        c,
        '"' | '\''
            | ')'
            | ']'
            | '}'
            | '\u{2018}'
            | '\u{2019}'
            | '\u{201C}'
            | '\u{201D}'
            | '\u{AB}'
            | '\u{BB}'
    )
}

/// `re_boundary_realignment.match(s)`: `[closing]+?(?:\s+|(?=--)|$)` (MULTILINE). Returns the
/// byte length of the closing characters and of the whole match.
fn realignment(s: &str) -> Option<(usize, usize)> {
    let mut k = 0;
    let rest = |k: usize| &s[k..];
    loop {
        let c = rest(k).chars().next()?;
        if !is_closing(c) {
            return None;
        }
        k += c.len_utf8();
        let ws: usize = rest(k)
            .chars()
            .take_while(|&x| pytext::rx_is_space(x))
            .map(char::len_utf8)
            .sum();
        if ws > 0 {
            return Some((k, k + ws));
        }
        if rest(k).starts_with("--") || rest(k).is_empty() || rest(k).starts_with('\n') {
            return Some((k, k));
        }
    }
}

/// `_realign_boundaries`: closing quotes and brackets right after a sentence end move onto
/// that sentence. Empty sentences are dropped, except one produced by a realignment.
fn realign(text: &str, slices: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let slice_text = |(a, b): (usize, usize)| if a < b { &text[a..b] } else { "" };
    let mut out = Vec::new();
    let mut shift = 0;
    for (i, &(start, stop)) in slices.iter().enumerate() {
        let s1 = (start + shift, stop);
        let Some(&s2) = slices.get(i + 1) else {
            if !slice_text(s1).is_empty() {
                out.push(s1);
            }
            continue;
        };
        match realignment(slice_text(s2)) {
            Some((closing, whole)) => {
                out.push((s1.0, s2.0 + closing));
                shift = whole;
            }
            None => {
                shift = 0;
                if !slice_text(s1).is_empty() {
                    out.push(s1);
                }
            }
        }
    }
    out
}

/// The sentences of `text`, as NLTK's English Punkt tokenizer returns them.
pub fn sentences(text: &str) -> Vec<&str> {
    let params = english();
    realign(text, &raw_slices(text, params))
        .into_iter()
        .map(|(a, b)| if a < b { &text[a..b] } else { "" })
        .collect()
}

/// `instructions_util.count_sentences`.
pub fn count_sentences(text: &str) -> usize {
    sentences(text).len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_like_nltk() {
        assert_eq!(
            sentences("Hello Dr. Smith. He went to the U.S. yesterday! Really?  \"Yes.\" Ok."),
            [
                "Hello Dr. Smith.",
                "He went to the U.S. yesterday!",
                "Really?",
                "\"Yes.\"",
                "Ok."
            ]
        );
        assert_eq!(
            sentences("Very bad acting!!! I promise."),
            ["Very bad acting!!!", "I promise."]
        );
        assert!(sentences("").is_empty() && sentences("  \n").is_empty());
        assert_eq!(sentences("(Sent1.) Sent2."), ["(Sent1.)", "Sent2."]);
    }
}
