//! Punkt's word tokens and their annotation (NLTK 3.10 `PunktLanguageVars`, `PunktToken`,
//! first and second annotation pass).
//!
//! NLTK compiles these patterns with the third-party `regex` module, so `\s`, `\w` and `\d`
//! are that module's sets (`pytext::rx_*`); `str.lower()` and `str.isupper()` are CPython's.
//! The word pattern needs lookahead, which the `regex` crate lacks, so it is hand-written
//! here from its definition:
//!
//! ```text
//! MultiChar                               -{2,} | \.{2,} | (\.\s){2,}\.
//! | (?=WordStart)\S+?(?=\s|$|NonWord|MultiChar|,(?=$|\s|NonWord|MultiChar))
//! | \S
//! ```

use super::params::{PunktParams, ORTHO_BEG_LC, ORTHO_LC, ORTHO_MID_UC, ORTHO_UC};
use crate::ifeval::pytext;

/// Characters that cannot appear within words (`_re_non_word_chars`, with the curly quotes
/// and guillemets NLTK 3.10 added).
fn is_non_word(c: char) -> bool {
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

/// Characters that can start a word token (`_re_word_start` is a negated class).
fn is_word_start(c: char) -> bool {
    !matches!(
        c,
        '(' | '"'
            | '`'
            | '{'
            | '['
            | ':'
            | ';'
            | '&'
            | '#'
            | '*'
            | '@'
            | ')'
            | '}'
            | ']'
            | '-'
            | ','
    )
}

/// Length in characters of the multi-character punctuation starting at `p`, if any.
fn multi_char(c: &[char], p: usize) -> Option<usize> {
    let run = |ch: char| c[p..].iter().take_while(|&&x| x == ch).count();
    match c.get(p) {
        Some('-') if run('-') >= 2 => Some(run('-')),
        Some('.') if run('.') >= 2 => Some(run('.')),
        Some('.') => {
            let mut pairs = 0;
            while c.get(p + 2 * pairs) == Some(&'.')
                && c.get(p + 2 * pairs + 1)
                    .is_some_and(|&x| pytext::rx_is_space(x))
            {
                pairs += 1;
            }
            if pairs >= 2 && c.get(p + 2 * pairs) == Some(&'.') {
                Some(2 * pairs + 1)
            } else if pairs >= 3 {
                // Backtrack one ". " pair: its period closes the match.
                Some(2 * pairs - 1)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// `$` without MULTILINE: the end, or just before a final newline.
fn at_end(c: &[char], q: usize) -> bool {
    q == c.len() || (q + 1 == c.len() && c[q] == '\n')
}

/// The lookahead that ends a word token at `q`.
fn ends_word(c: &[char], q: usize) -> bool {
    if at_end(c, q) {
        return true;
    }
    let x = c[q];
    if pytext::rx_is_space(x) || is_non_word(x) || multi_char(c, q).is_some() {
        return true;
    }
    x == ','
        && (at_end(c, q + 1)
            || pytext::rx_is_space(c[q + 1])
            || is_non_word(c[q + 1])
            || multi_char(c, q + 1).is_some())
}

/// `PunktLanguageVars.word_tokenize`: the word tokens of one line, as char-index spans.
pub fn word_spans(c: &[char]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut p = 0;
    while p < c.len() {
        if let Some(n) = multi_char(c, p) {
            spans.push((p, p + n));
            p += n;
        } else if pytext::rx_is_space(c[p]) {
            p += 1;
        } else if is_word_start(c[p]) {
            let mut q = p + 1;
            while !ends_word(c, q) {
                q += 1;
            }
            spans.push((p, q));
            p = q;
        } else {
            spans.push((p, p + 1));
            p += 1;
        }
    }
    spans
}

/// A word token with Punkt's annotations.
pub struct Token {
    pub tok: String,
    pub typ: String,
    pub period_final: bool,
    pub sentbreak: bool,
    pub abbr: bool,
    pub ellipsis: bool,
}

/// `^-?[\.,]?\d[\d,\.-]*\.?$` on the lowercased token: numbers get the type `##number##`.
fn is_numeric(s: &str) -> bool {
    let c: Vec<char> = s.chars().collect();
    let mut i = 0;
    if c.get(i) == Some(&'-') {
        i += 1;
    }
    if matches!(c.get(i), Some('.' | ',')) {
        i += 1;
    }
    if !c.get(i).is_some_and(|&x| pytext::rx_is_digit(x)) {
        return false;
    }
    // (`$` could also match before a final newline, but tokens never contain one.)
    c[i + 1..]
        .iter()
        .all(|&x| pytext::rx_is_digit(x) || matches!(x, ',' | '.' | '-'))
}

impl Token {
    pub fn new(tok: String) -> Token {
        let lowered = pytext::lower(&tok);
        let typ = if is_numeric(&lowered) {
            "##number##".to_owned()
        } else {
            lowered
        };
        Token {
            period_final: tok.ends_with('.'),
            tok,
            typ,
            sentbreak: false,
            abbr: false,
            ellipsis: false,
        }
    }

    fn type_no_period(&self) -> &str {
        if self.typ.chars().count() > 1 && self.typ.ends_with('.') {
            &self.typ[..self.typ.len() - 1]
        } else {
            &self.typ
        }
    }

    fn type_no_sentperiod(&self) -> &str {
        if self.sentbreak {
            self.type_no_period()
        } else {
            &self.typ
        }
    }

    fn first_upper(&self) -> bool {
        self.tok.chars().next().is_some_and(pytext::char_is_upper)
    }

    fn first_lower(&self) -> bool {
        self.tok.chars().next().is_some_and(pytext::char_is_lower)
    }

    /// `\.\.+$`: two or more periods and nothing else.
    fn is_ellipsis(&self) -> bool {
        self.tok.len() >= 2 && self.tok.bytes().all(|b| b == b'.')
    }

    /// `[^\W\d]\.$`: one letter (a word character that is not a digit) and a period.
    fn is_initial(&self) -> bool {
        let mut it = self.tok.chars();
        match (it.next(), it.next(), it.next()) {
            (Some(x), Some('.'), None) => pytext::rx_is_word(x) && !pytext::rx_is_digit(x),
            _ => false,
        }
    }
}

/// `_tokenize_words`: Punkt tokens of a text, line by line (blank lines are skipped).
pub fn tokenize_words(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    for line in text.split('\n') {
        if pytext::strip(line).is_empty() {
            continue;
        }
        let c: Vec<char> = line.chars().collect();
        for (a, b) in word_spans(&c) {
            out.push(Token::new(c[a..b].iter().collect()));
        }
    }
    out
}

/// The first annotation pass: decisions from each token's own type.
fn first_pass(tok: &mut Token, params: &PunktParams) {
    if matches!(tok.tok.as_str(), "." | "?" | "!") {
        tok.sentbreak = true;
    } else if tok.is_ellipsis() {
        tok.ellipsis = true;
    } else if tok.period_final && !tok.tok.ends_with("..") {
        let base = pytext::lower(&tok.tok[..tok.tok.len() - 1]);
        let last_part = base.rsplit('-').next().unwrap_or(&base);
        if params.abbrev_types.contains(&base) || params.abbrev_types.contains(last_part) {
            tok.abbr = true;
        } else {
            tok.sentbreak = true;
        }
    }
}

#[derive(PartialEq)]
enum Ortho {
    Starter,
    NotStarter,
    Unknown,
}

/// `_ortho_heuristic`: does `tok` look like the first word of a sentence?
fn ortho_heuristic(tok: &Token, params: &PunktParams) -> Ortho {
    if matches!(tok.tok.as_str(), ";" | ":" | "," | "." | "!" | "?") {
        return Ortho::NotStarter;
    }
    let ctx = params.ortho(tok.type_no_sentperiod());
    if tok.first_upper() && ctx & ORTHO_LC != 0 && ctx & ORTHO_MID_UC == 0 {
        return Ortho::Starter;
    }
    if tok.first_lower() && (ctx & ORTHO_UC != 0 || ctx & ORTHO_BEG_LC == 0) {
        return Ortho::NotStarter;
    }
    Ortho::Unknown
}

/// The second pass on a pair of neighbours: collocations, abbreviations before a likely
/// sentence start, initials and ordinals (Kiss & Strunk, sections 4.1–4.3).
fn second_pass(t1: &mut Token, t2: &Token, params: &PunktParams) {
    if !t1.period_final {
        return;
    }
    let typ = t1.type_no_period().to_owned();
    let next_typ = t2.type_no_sentperiod();
    let is_initial = t1.is_initial();
    if params
        .collocations
        .contains(&(typ.clone(), next_typ.to_owned()))
    {
        t1.sentbreak = false;
        t1.abbr = true;
        return;
    }
    if (t1.abbr || t1.ellipsis) && !is_initial {
        if ortho_heuristic(t2, params) == Ortho::Starter {
            t1.sentbreak = true;
            return;
        }
        if t2.first_upper() && params.sent_starters.contains(next_typ) {
            t1.sentbreak = true;
            return;
        }
    }
    if is_initial || typ == "##number##" {
        let ortho = ortho_heuristic(t2, params);
        if ortho == Ortho::NotStarter {
            t1.sentbreak = false;
            t1.abbr = true;
            return;
        }
        if ortho == Ortho::Unknown
            && is_initial
            && t2.first_upper()
            && params.ortho(next_typ) & ORTHO_LC == 0
        {
            t1.sentbreak = false;
            t1.abbr = true;
        }
    }
}

/// Both annotation passes over a token sequence.
pub fn annotate(tokens: &mut [Token], params: &PunktParams) {
    for t in tokens.iter_mut() {
        first_pass(t, params);
    }
    for i in 1..tokens.len() {
        let (head, tail) = tokens.split_at_mut(i);
        second_pass(&mut head[i - 1], &tail[0], params);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        let c: Vec<char> = s.chars().collect();
        word_spans(&c)
            .into_iter()
            .map(|(a, b)| c[a..b].iter().collect())
            .collect()
    }

    #[test]
    fn splits_punctuation_but_keeps_periods() {
        assert_eq!(words("Hello, world."), ["Hello", ",", "world."]);
        assert_eq!(
            words("a,b (c) end..."),
            ["a,b", "(", "c", ")", "end", "..."]
        );
        assert_eq!(words("x . . . y"), ["x", ". . .", "y"]);
        assert_eq!(words("--x \"q\""), ["--", "x", "\"", "q", "\""]);
    }

    #[test]
    fn numbers_and_initials() {
        assert_eq!(Token::new("-1,000.5".into()).typ, "##number##");
        assert_eq!(Token::new("3.".into()).typ, "##number##");
        assert_eq!(Token::new("A1".into()).typ, "a1");
        assert!(Token::new("J.".into()).is_initial() && !Token::new("5.".into()).is_initial());
    }

    #[test]
    fn abbreviations_are_not_breaks() {
        let params = super::super::params::english();
        let mut toks = tokenize_words("Dr. Smith arrived. He sat.");
        annotate(&mut toks, params);
        let breaks: Vec<bool> = toks.iter().map(|t| t.sentbreak).collect();
        assert_eq!(breaks, [false, false, true, false, true]);
        assert!(toks[0].abbr);
    }
}
