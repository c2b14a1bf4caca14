//! lm-eval 0.4.13's `minerva_math` answer handling (`lm_eval/tasks/minerva_math/utils.py`),
//! ported function by function with Python's semantics: `last_boxed_only_string`,
//! `remove_boxed`, `get_unnormalized_answer`, `normalize_final_answer` and the string path of
//! `is_equiv`. Each `re.sub` of the original is a hand-written scan here (the `regex` crate
//! has no look-behind), on chars so indices are Python's; `.` never matches a newline and a
//! negated class does, as in `re`. Checked string for string against the reference on a
//! committed corpus (`evals/tests/math_exact.rs`).

use crate::ifeval::pytext::{is_boundary, is_digit, is_word, strip};

/// `SUBSTITUTIONS`, applied in order with `str.replace`.
const SUBSTITUTIONS: [(&str, &str); 10] = [
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    ("\\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
];

/// `REMOVED_EXPRESSIONS`, in order.
const REMOVED_EXPRESSIONS: [&str; 42] = [
    "square",
    "ways",
    "integers",
    "dollars",
    "mph",
    "inches",
    "ft",
    "hours",
    "km",
    "units",
    "\\ldots",
    "sue",
    "points",
    "feet",
    "minutes",
    "digits",
    "cents",
    "degrees",
    "cm",
    "gm",
    "pounds",
    "meters",
    "meals",
    "edges",
    "students",
    "childrentickets",
    "multiples",
    "\\text{s}",
    "\\text{.}",
    "\\text{\ns}",
    "\\text{}^2",
    "\\text{}^3",
    "\\text{\n}",
    "\\text{}",
    "\\mathrm{th}",
    "^\\circ",
    "^{\\circ}",
    "\\;",
    ",\\!",
    "{,}",
    "\"",
    "\\dots",
];

/// What `get_unnormalized_answer` returns when the response has no final-answer sentence.
pub const INVALID_ANSWER: &str = "[invalidanswer]";

fn chars(s: &str) -> Vec<char> {
    s.chars().collect()
}

fn starts_with(hay: &[char], at: usize, needle: &[char]) -> bool {
    hay.len() >= at + needle.len() && hay[at..at + needle.len()] == *needle
}

/// Python's `str.isalpha()` on the (ASCII) expression list.
fn is_alpha(s: &str) -> bool {
    !s.is_empty() && s.chars().all(char::is_alphabetic)
}

/// `last_boxed_only_string`: the last `\boxed{…}` (or `\fbox{…}`) with balanced braces; the
/// `\boxed ` form up to the next `$`; `None` when there is none or its braces never close.
pub fn last_boxed_only_string(string: &str) -> Option<String> {
    if let Some(pos) = string.rfind("\\boxed ") {
        // "\\boxed " + string.split("\\boxed ")[-1].split("$")[0]
        let tail = &string[pos + "\\boxed ".len()..];
        let tail = tail.split('$').next().unwrap_or("");
        return Some(format!("\\boxed {tail}"));
    }
    let s = chars(string);
    let find_last = |needle: &str| {
        let n = chars(needle);
        (0..=s.len().saturating_sub(n.len()))
            .rev()
            .find(|&i| starts_with(&s, i, &n))
    };
    let idx = find_last("\\boxed").or_else(|| find_last("\\fbox"))?;
    let mut open = 0i64;
    for (i, &c) in s.iter().enumerate().skip(idx) {
        if c == '{' {
            open += 1;
        }
        if c == '}' {
            open -= 1;
            if open == 0 {
                return Some(s[idx..=i].iter().collect());
            }
        }
    }
    None
}

/// `remove_boxed`: the inside of `\boxed{…}` or the rest after `\boxed `; `None` where the
/// reference's assertions fail (it raises there).
pub fn remove_boxed(s: &str) -> Option<String> {
    if s.contains("\\boxed ") {
        return s.strip_prefix("\\boxed ").map(String::from);
    }
    let inner = s.strip_prefix("\\boxed{")?;
    inner.strip_suffix('}').map(String::from)
}

/// `get_unnormalized_answer`: the text between "Final Answer: The final answer is" and
/// "I hope it is correct." on one line (the pattern's dots match any character but a
/// newline), stripped; [`INVALID_ANSWER`] when there is none.
pub fn get_unnormalized_answer(text: &str) -> String {
    let t = chars(&format!("{text}I hope it is correct."));
    let prefix = chars("Final Answer: The final answer is");
    let tail = chars(" I hope it is correct");
    for start in 0..t.len() {
        if !starts_with(&t, start, &prefix) {
            continue;
        }
        let g = start + prefix.len();
        // (.*?) then `.`, the tail, then `.`: the shortest group that fits on this line.
        let mut k = g;
        while k < t.len() && t[k] != '\n' {
            let after = k + 1 + tail.len();
            if starts_with(&t, k + 1, &tail) && after < t.len() && t[after] != '\n' {
                let group: String = t[g..k].iter().collect();
                return strip(&group).to_string();
            }
            k += 1;
        }
    }
    INVALID_ANSWER.to_string()
}

/// `re.sub(rf"(?<!\\)\b{expr}\b", "", s)` for an alphabetic `expr`.
fn remove_word(s: &[char], expr: &[char]) -> Vec<char> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if starts_with(s, i, expr)
            && (i == 0 || s[i - 1] != '\\')
            && is_boundary(s, i)
            && is_boundary(s, i + expr.len())
        {
            i += expr.len();
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

fn replace(s: &[char], from: &str, to: &str) -> Vec<char> {
    let f = chars(from);
    let t = chars(to);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if !f.is_empty() && starts_with(s, i, &f) {
            out.extend_from_slice(&t);
            i += f.len();
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

/// The `str.replace` of one unit word outside LaTeX command names: `re.split(r"(\\[a-zA-Z]+)")`
/// and the replacement in the even (non-command) pieces.
fn remove_outside_commands(s: &[char], expr: &str) -> Vec<char> {
    let mut out = Vec::with_capacity(s.len());
    let mut piece: Vec<char> = Vec::new();
    let mut i = 0;
    while i < s.len() {
        if s[i] == '\\' && i + 1 < s.len() && s[i + 1].is_ascii_alphabetic() {
            out.extend(replace(&piece, expr, ""));
            piece.clear();
            let mut j = i + 1;
            while j < s.len() && s[j].is_ascii_alphabetic() {
                j += 1;
            }
            out.extend_from_slice(&s[i..j]);
            i = j;
        } else {
            piece.push(s[i]);
            i += 1;
        }
    }
    out.extend(replace(&piece, expr, ""));
    out
}

/// `re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", s)`: every line with two `$` becomes the text
/// between its first two, in dollars.
fn keep_first_math(s: &[char]) -> Vec<char> {
    let mut out = Vec::with_capacity(s.len());
    for (n, line) in s.split(|&c| c == '\n').enumerate() {
        if n > 0 {
            out.push('\n');
        }
        let dollars: Vec<usize> = line
            .iter()
            .enumerate()
            .filter(|(_, &c)| c == '$')
            .map(|(i, _)| i)
            .take(2)
            .collect();
        if let [a, b] = dollars[..] {
            out.push('$');
            out.extend_from_slice(&line[a + 1..b]);
            out.push('$');
        } else {
            out.extend_from_slice(line);
        }
    }
    out
}

/// `re.sub(r"(\\NAME\{)(.*?)(\})", "\\2", s)` (lazy: up to the first `}` on the line) or,
/// with `greedy`, `(.*)` (up to the last `}` on the line).
fn unwrap_command(s: &[char], name: &str, greedy: bool) -> Vec<char> {
    let open = chars(&format!("\\{name}{{"));
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if starts_with(s, i, &open) {
            let body = i + open.len();
            let line_end = s[body..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(s.len(), |p| body + p);
            let close = if greedy {
                s[body..line_end].iter().rposition(|&c| c == '}')
            } else {
                s[body..line_end].iter().position(|&c| c == '}')
            };
            if let Some(p) = close {
                out.extend_from_slice(&s[body..body + p]);
                i = body + p + 1;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

/// `re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", s)`.
fn brace_frac(s: &[char]) -> Vec<char> {
    let frac = chars("frac");
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if starts_with(s, i, &frac) && i + 5 < s.len() && s[i + 4] != '{' && s[i + 5] != '\n' {
            out.extend_from_slice(&frac);
            out.push('{');
            out.push(s[i + 4]);
            out.extend(['}', '{']);
            out.push(s[i + 5]);
            out.push('}');
            i += 6;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

/// `re.sub(r"(sqrt)(\[[^\]]*\])(\w)", "\\1\\2{\\3}", s)`.
fn brace_indexed_root(s: &[char]) -> Vec<char> {
    let sqrt = chars("sqrt[");
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if starts_with(s, i, &sqrt) {
            let from = i + sqrt.len();
            if let Some(p) = s[from..].iter().position(|&c| c == ']') {
                let close = from + p;
                if close + 1 < s.len() && is_word(s[close + 1]) {
                    out.extend_from_slice(&s[i..=close]);
                    out.push('{');
                    out.push(s[close + 1]);
                    out.push('}');
                    i = close + 2;
                    continue;
                }
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

/// `re.sub(r"(sqrt)(?!\[)([^{])", "sqrt{\\2}", s)`.
fn brace_root(s: &[char]) -> Vec<char> {
    let sqrt = chars("sqrt");
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if starts_with(s, i, &sqrt) && i + 4 < s.len() && s[i + 4] != '[' && s[i + 4] != '{' {
            out.extend(chars("sqrt{"));
            out.push(s[i + 4]);
            out.push('}');
            i += 5;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

/// `re.fullmatch(r"-?\d{1,3}(,\d{3})+", s)`.
fn is_grouped_number(s: &[char]) -> bool {
    let body = s.strip_prefix(&['-']).unwrap_or(s);
    let groups: Vec<&[char]> = body.split(|&c| c == ',').collect();
    groups.len() >= 2
        && (1..=3).contains(&groups[0].len())
        && groups[1..].iter().all(|g| g.len() == 3)
        && groups.iter().all(|g| g.iter().all(|&c| is_digit(c)))
}

/// `normalize_final_answer`.
pub fn normalize_final_answer(final_answer: &str) -> String {
    let last = final_answer.rsplit('=').next().unwrap_or("");
    let mut s = chars(last);
    for expr in REMOVED_EXPRESSIONS {
        if is_alpha(expr) {
            s = remove_word(&s, &chars(expr));
        }
    }
    for (before, after) in SUBSTITUTIONS {
        s = replace(&s, before, after);
    }
    for expr in REMOVED_EXPRESSIONS {
        if is_alpha(expr) {
            s = remove_outside_commands(&s, expr);
        } else {
            s = replace(&s, expr, "");
        }
    }
    s = keep_first_math(&s);
    s = unwrap_command(&s, "text", false);
    s = unwrap_command(&s, "textbf", false);
    s = unwrap_command(&s, "overline", false);
    s = unwrap_command(&s, "boxed", true);
    s = brace_frac(&s);
    s = brace_indexed_root(&s);
    s = brace_root(&s);
    s.retain(|&c| c != '$');
    if is_grouped_number(&s) {
        s.retain(|&c| c != ',');
    }
    s.into_iter().collect()
}

/// The string path of `is_equiv`: equal and non-empty. (The reference then tries sympy's
/// LaTeX parser and `simplify`; that symbolic equivalence is not ported, so an answer equal
/// to the gold only symbolically scores 0 here.)
pub fn is_equiv_string(x1: &str, x2: &str) -> bool {
    !x1.is_empty() && x1 == x2
}

/// The gold answer of a MATH solution, as `process_docs` makes it.
pub fn gold_answer(solution: &str) -> Option<String> {
    let boxed = last_boxed_only_string(solution)?;
    remove_boxed(&boxed).map(|a| normalize_final_answer(&a))
}
