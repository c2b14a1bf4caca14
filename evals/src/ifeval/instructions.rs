//! The 25 registered IFEval instructions and how their `kwargs` become checkers.
//!
//! The reference builds each checker with `build_description(**kwargs)` after dropping
//! falsy values (`None`, `0`, `""`, `[]`). A missing or invalid argument makes it draw a
//! random one (a random keyword, threshold, relation, language, ...), so its verdict is then
//! random; this port refuses such items with an error instead of guessing. One exception,
//! as asked by the data: `keywords:letter_frequency` with a `letter` that is not an ASCII
//! letter (IFEval has `"!"` and `"#"`) counts that character (the reference would count a
//! random letter).

use regex::Regex;
use serde_json::{Map, Value};

use super::pytext;

/// `"less than"` or `"at least"`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Relation {
    LessThan,
    AtLeast,
}

impl Relation {
    pub fn holds(self, count: usize, threshold: f64) -> bool {
        match self {
            Relation::LessThan => (count as f64) < threshold,
            Relation::AtLeast => (count as f64) >= threshold,
        }
    }
}

/// A keyword as the reference uses it: a regular expression, matched case-insensitively.
/// Plain words (every keyword in IFEval) are matched here with `re`'s exact IGNORECASE rules;
/// a keyword with regex syntax goes to the `regex` crate, whose syntax and case folding are
/// close to, but not guaranteed equal to, Python's.
#[derive(Debug)]
pub enum Keyword {
    Literal(Vec<char>),
    Regex(Regex),
}

/// One instruction with its arguments.
#[derive(Debug)]
pub enum Instruction {
    KeywordExistence {
        keywords: Vec<Keyword>,
    },
    KeywordFrequency {
        keyword: Keyword,
        frequency: f64,
        relation: Relation,
    },
    ForbiddenWords {
        words: Vec<Keyword>,
    },
    LetterFrequency {
        letter: char,
        frequency: f64,
        relation: Relation,
    },
    ResponseLanguage {
        language: String,
    },
    NumberSentences {
        num_sentences: f64,
        relation: Relation,
    },
    NumberParagraphs {
        num_paragraphs: f64,
    },
    NumberWords {
        num_words: f64,
        relation: Relation,
    },
    NthParagraphFirstWord {
        num_paragraphs: usize,
        nth_paragraph: usize,
        first_word: String,
    },
    NumberPlaceholders {
        num_placeholders: f64,
    },
    Postscript {
        pattern: Regex,
    },
    NumberBulletLists {
        num_bullets: f64,
    },
    ConstrainedResponse,
    NumberHighlightedSections {
        num_highlights: f64,
    },
    MultipleSections {
        splitter: Regex,
        num_sections: f64,
    },
    JsonFormat,
    Title,
    TwoResponses,
    RepeatPrompt {
        prompt_to_repeat: String,
    },
    EndChecker {
        end_phrase: String,
    },
    CapitalWordFrequency {
        frequency: f64,
        relation: Relation,
    },
    EnglishCapital,
    EnglishLowercase,
    NoComma,
    Quotation,
}

/// Every instruction id in lm-eval's `INSTRUCTION_DICT`.
pub const INSTRUCTION_IDS: [&str; 25] = [
    "keywords:existence",
    "keywords:frequency",
    "keywords:forbidden_words",
    "keywords:letter_frequency",
    "language:response_language",
    "length_constraints:number_sentences",
    "length_constraints:number_paragraphs",
    "length_constraints:number_words",
    "length_constraints:nth_paragraph_first_word",
    "detectable_content:number_placeholders",
    "detectable_content:postscript",
    "detectable_format:number_bullet_lists",
    "detectable_format:constrained_response",
    "detectable_format:number_highlighted_sections",
    "detectable_format:multiple_sections",
    "detectable_format:json_format",
    "detectable_format:title",
    "combination:two_responses",
    "combination:repeat_prompt",
    "startend:end_checker",
    "change_case:capital_word_frequency",
    "change_case:english_capital",
    "change_case:english_lowercase",
    "punctuation:no_comma",
    "startend:quotation",
];

/// Python truthiness of a JSON value.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// The kwargs left after the reference's `{k: v for k, v in kwargs.items() if v}`.
struct Args<'a> {
    id: &'a str,
    map: Map<String, Value>,
}

impl Args<'_> {
    fn err(&self, what: &str) -> String {
        format!("{}: {what}", self.id)
    }

    fn take(&mut self, name: &str) -> Option<Value> {
        self.map.remove(name)
    }

    /// A threshold; the reference draws a random one when it is missing or negative.
    fn count(&mut self, name: &str) -> Result<f64, String> {
        match self.take(name) {
            Some(Value::Number(n)) => match n.as_f64() {
                Some(x) if x >= 0.0 => Ok(x),
                _ => Err(self.err(&format!(
                    "`{name}` is negative: the reference draws it at random"
                ))),
            },
            Some(other) => Err(self.err(&format!("`{name}` must be a number, not {other}"))),
            None => Err(self.err(&format!(
                "`{name}` is missing: the reference draws it at random"
            ))),
        }
    }

    fn string(&mut self, name: &str) -> Result<String, String> {
        match self.take(name) {
            Some(Value::String(s)) => Ok(s),
            Some(other) => Err(self.err(&format!("`{name}` must be a string, not {other}"))),
            None => Err(self.err(&format!(
                "`{name}` is missing: the reference draws it at random"
            ))),
        }
    }

    fn relation(&mut self, name: &str) -> Result<Relation, String> {
        match self.string(name)?.as_str() {
            "less than" => Ok(Relation::LessThan),
            "at least" => Ok(Relation::AtLeast),
            other => Err(self.err(&format!("unsupported relation {other:?}"))),
        }
    }

    fn strings(&mut self, name: &str) -> Result<Vec<String>, String> {
        match self.take(name) {
            Some(Value::Array(items)) => items
                .into_iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s),
                    other => Err(self.err(&format!("`{name}` must hold strings, not {other}"))),
                })
                .collect(),
            Some(other) => Err(self.err(&format!("`{name}` must be a list, not {other}"))),
            None => Err(self.err(&format!(
                "`{name}` is missing: the reference draws it at random"
            ))),
        }
    }

    /// `build_description` takes no other arguments: the reference raises `TypeError`.
    fn finish(self, instruction: Instruction) -> Result<Instruction, String> {
        match self.map.keys().next() {
            Some(extra) => Err(self.err(&format!("unexpected argument `{extra}`"))),
            None => Ok(instruction),
        }
    }
}

const REGEX_SYNTAX: &[char] = &[
    '.', '^', '$', '*', '+', '?', '{', '}', '[', ']', '\\', '|', '(', ')',
];

/// A Python regex fragment for the `regex` crate: `\s`, `\d`, `\w` become Python's sets.
fn translate_fragment(pattern: &str) -> String {
    pattern
        .replace(r"\s", &pytext::re_space_class())
        .replace(r"\d", &pytext::re_digit_class())
        .replace(r"\w", &pytext::re_word_class())
}

fn keyword(id: &str, text: &str, whole_word: bool) -> Result<Keyword, String> {
    if !text.contains(REGEX_SYNTAX) {
        return Ok(Keyword::Literal(text.chars().collect()));
    }
    let body = translate_fragment(text);
    let pattern = if whole_word {
        format!(r"(?i)\b{body}\b")
    } else {
        format!("(?i){body}")
    };
    Regex::new(&pattern)
        .map(Keyword::Regex)
        .map_err(|e| format!("{id}: keyword {text:?}: {e}"))
}

fn postscript_pattern(id: &str, marker: &str) -> Result<Regex, String> {
    let ws = pytext::re_space_class();
    let body = match marker {
        "P.P.S" => format!(r"{ws}*p\.{ws}?p\.{ws}?s"),
        "P.S." => format!(r"{ws}*p\.{ws}?s\."),
        other => format!("{ws}*{}", translate_fragment(&pytext::lower(other))),
    };
    Regex::new(&format!("(?m){body}.*$")).map_err(|e| format!("{id}: marker {marker:?}: {e}"))
}

fn section_pattern(id: &str, splitter: &str) -> Result<Regex, String> {
    let ws = pytext::re_space_class();
    let digit = pytext::re_digit_class();
    let body = translate_fragment(splitter);
    Regex::new(&format!("{ws}?{body}{ws}?{digit}+{ws}?"))
        .map_err(|e| format!("{id}: section splitter {splitter:?}: {e}"))
}

/// Builds the checker for `id` from its kwargs object, as `build_description` would.
pub fn build(id: &str, kwargs: &Value) -> Result<Instruction, String> {
    let map = match kwargs {
        Value::Object(m) => m
            .iter()
            .filter(|(_, v)| truthy(v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        Value::Null => Map::new(),
        other => return Err(format!("{id}: kwargs must be an object, not {other}")),
    };
    let mut a = Args { id, map };
    let instruction = match id {
        "keywords:existence" => Instruction::KeywordExistence {
            keywords: a
                .strings("keywords")?
                .iter()
                .map(|k| keyword(id, k, false))
                .collect::<Result<_, _>>()?,
        },
        "keywords:frequency" => {
            let word = a.string("keyword")?;
            Instruction::KeywordFrequency {
                keyword: keyword(id, pytext::strip(&word), false)?,
                frequency: a.count("frequency")?,
                relation: a.relation("relation")?,
            }
        }
        "keywords:forbidden_words" => Instruction::ForbiddenWords {
            words: a
                .strings("forbidden_words")?
                .iter()
                .map(|k| keyword(id, k, true))
                .collect::<Result<_, _>>()?,
        },
        "keywords:letter_frequency" => {
            let given = a.string("letter")?;
            let lowered = pytext::lower(pytext::strip(&given));
            let mut chars = lowered.chars();
            let letter = match (chars.next(), chars.next()) {
                (Some(c), None) => c,
                _ => return Err(a.err(&format!("letter {given:?} is not one character"))),
            };
            Instruction::LetterFrequency {
                letter,
                frequency: a.count("let_frequency")?,
                relation: a.relation("let_relation")?,
            }
        }
        "language:response_language" => Instruction::ResponseLanguage {
            language: a.string("language")?,
        },
        "length_constraints:number_sentences" => Instruction::NumberSentences {
            num_sentences: a.count("num_sentences")?,
            relation: a.relation("relation")?,
        },
        "length_constraints:number_paragraphs" => Instruction::NumberParagraphs {
            num_paragraphs: a.count("num_paragraphs")?,
        },
        "length_constraints:number_words" => Instruction::NumberWords {
            num_words: a.count("num_words")?,
            relation: a.relation("relation")?,
        },
        "length_constraints:nth_paragraph_first_word" => nth_paragraph(&mut a)?,
        "detectable_content:number_placeholders" => Instruction::NumberPlaceholders {
            num_placeholders: a.count("num_placeholders")?,
        },
        "detectable_content:postscript" => {
            let marker = a.string("postscript_marker")?;
            Instruction::Postscript {
                pattern: postscript_pattern(id, pytext::strip(&marker))?,
            }
        }
        "detectable_format:number_bullet_lists" => Instruction::NumberBulletLists {
            num_bullets: a.count("num_bullets")?,
        },
        "detectable_format:constrained_response" => Instruction::ConstrainedResponse,
        "detectable_format:number_highlighted_sections" => Instruction::NumberHighlightedSections {
            num_highlights: a.count("num_highlights")?,
        },
        "detectable_format:multiple_sections" => {
            let splitter = a.string("section_spliter")?;
            Instruction::MultipleSections {
                splitter: section_pattern(id, pytext::strip(&splitter))?,
                num_sections: a.count("num_sections")?,
            }
        }
        "detectable_format:json_format" => Instruction::JsonFormat,
        "detectable_format:title" => Instruction::Title,
        "combination:two_responses" => Instruction::TwoResponses,
        "combination:repeat_prompt" => Instruction::RepeatPrompt {
            prompt_to_repeat: a.string("prompt_to_repeat")?,
        },
        "startend:end_checker" => Instruction::EndChecker {
            end_phrase: pytext::lower(pytext::strip(&a.string("end_phrase")?)),
        },
        "change_case:capital_word_frequency" => capital_word_frequency(&mut a)?,
        "change_case:english_capital" => Instruction::EnglishCapital,
        "change_case:english_lowercase" => Instruction::EnglishLowercase,
        "punctuation:no_comma" => Instruction::NoComma,
        "startend:quotation" => Instruction::Quotation,
        other => return Err(format!("unknown instruction id {other:?}")),
    };
    a.finish(instruction)
}

fn nth_paragraph(a: &mut Args) -> Result<Instruction, String> {
    let num_paragraphs = a.count("num_paragraphs")?;
    let nth = a.count("nth_paragraph")?;
    if nth < 1.0 || nth > num_paragraphs || nth.fract() != 0.0 || num_paragraphs.fract() != 0.0 {
        return Err(a.err("`nth_paragraph` out of range: the reference draws it at random"));
    }
    Ok(Instruction::NthParagraphFirstWord {
        num_paragraphs: num_paragraphs as usize,
        nth_paragraph: nth as usize,
        first_word: pytext::lower(&a.string("first_word")?),
    })
}

/// `capital_frequency` may be negative here: this checker only redraws a missing one.
fn capital_word_frequency(a: &mut Args) -> Result<Instruction, String> {
    let frequency = match a.take("capital_frequency") {
        Some(Value::Number(n)) => n
            .as_f64()
            .ok_or_else(|| a.err("`capital_frequency` is not a number"))?,
        Some(other) => {
            return Err(a.err(&format!(
                "`capital_frequency` must be a number, not {other}"
            )))
        }
        None => {
            return Err(a.err("`capital_frequency` is missing: the reference draws it at random"))
        }
    };
    Ok(Instruction::CapitalWordFrequency {
        frequency,
        relation: a.relation("capital_relation")?,
    })
}
