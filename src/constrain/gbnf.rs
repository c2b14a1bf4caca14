//! llama.cpp's GBNF grammars, translated to the Lark that llguidance compiles.

use super::spec::{err, quote, ConstraintError};

/// A GBNF file defines its rules as `name ::= …`.
pub(super) fn looks_like_gbnf(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim_start();
        let name_len = l
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .unwrap_or(l.len());
        name_len > 0 && l[name_len..].trim_start().starts_with("::=")
    })
}

/// Translates llama.cpp's GBNF to llguidance's Lark: `name ::= …` rules become `name: …`
/// (names renamed to lowercase Lark rule names; `root` is the start), `"…"` literals keep
/// their text, `[…]` classes and `.` become regexes, and grouping, `|`, `*`, `+`, `?` and
/// `{m,n}` carry over. Errors name the line.
pub fn gbnf_to_lark(text: &str) -> Result<String, ConstraintError> {
    let toks = gbnf_lex(text)?;
    // Rule names, in order, mapped to Lark names.
    let mut names: Vec<(String, String)> = Vec::new();
    let mut i = 0;
    while i + 1 < toks.len() {
        if let (G::Name(n), G::Define) = (&toks[i].1, &toks[i + 1].1) {
            if names.iter().any(|(g, _)| g == n) {
                return err(format!("line {}: rule {n:?} is defined twice", toks[i].0));
            }
            let mut l: String = n
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() {
                        c.to_ascii_lowercase()
                    } else {
                        '_'
                    }
                })
                .collect();
            l.insert_str(0, "g_");
            while names.iter().any(|(_, x)| *x == l) {
                l.push('_');
            }
            names.push((n.clone(), l));
        }
        i += 1;
    }
    if !names.iter().any(|(g, _)| g == "root") {
        return err("a GBNF grammar needs a `root ::= …` rule");
    }
    let lookup = |n: &str, line: usize| -> Result<String, ConstraintError> {
        names
            .iter()
            .find(|(g, _)| g == n)
            .map(|(_, l)| l.clone())
            .ok_or_else(|| ConstraintError(format!("line {line}: rule {n:?} is not defined")))
    };
    let mut out = format!("start: {}\n", lookup("root", 0)?);
    let mut depth = 0usize;
    let mut i = 0;
    if !matches!(toks.first(), Some((_, G::Name(_))))
        || !matches!(toks.get(1), Some((_, G::Define)))
    {
        let line = toks.first().map_or(1, |t| t.0);
        return err(format!("line {line}: expected a rule `name ::= …`"));
    }
    while i < toks.len() {
        let (line, t) = &toks[i];
        let starts_rule =
            matches!(t, G::Name(_)) && matches!(toks.get(i + 1), Some((_, G::Define)));
        if starts_rule {
            if depth != 0 {
                return err(format!("line {line}: unclosed `(` before this rule"));
            }
            let G::Name(n) = t else { unreachable!() };
            out.push('\n');
            out.push_str(&lookup(n, *line)?);
            out.push(':');
            i += 2;
            continue;
        }
        match t {
            G::Name(n) => {
                out.push(' ');
                out.push_str(&lookup(n, *line)?);
            }
            G::Define => return err(format!("line {line}: `::=` without a rule name")),
            G::Literal(s) => {
                out.push(' ');
                if s.is_empty() {
                    out.push_str("\"\"");
                } else {
                    out.push_str(&quote(s));
                }
            }
            G::Class(c) => {
                out.push_str(" /");
                out.push_str(&c.replace('/', "\\/"));
                out.push('/');
            }
            G::Any => out.push_str(" /(?s:.)/"),
            G::Open => {
                depth += 1;
                out.push_str(" (");
            }
            G::Close => {
                if depth == 0 {
                    return err(format!("line {line}: `)` without `(`"));
                }
                depth -= 1;
                out.push_str(" )");
            }
            G::Alt => out.push_str(" |"),
            G::Op(o) => out.push_str(o),
        }
        i += 1;
    }
    if depth != 0 {
        return err("unclosed `(` at the end of the grammar");
    }
    out.push('\n');
    Ok(out)
}

#[derive(Debug, PartialEq)]
enum G {
    Name(String),
    Define,
    Literal(String),
    /// A character class in regex syntax, brackets included.
    Class(String),
    Any,
    Open,
    Close,
    Alt,
    /// `*`, `+`, `?` or `{m,n}`, written as Lark writes it.
    Op(String),
}

fn gbnf_lex(text: &str) -> Result<Vec<(usize, G)>, ConstraintError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let escape = |chars: &[char], i: &mut usize, line: usize| -> Result<char, ConstraintError> {
        // At a backslash: read the escape, leave `i` after it.
        let c = *chars
            .get(*i + 1)
            .ok_or_else(|| ConstraintError(format!("line {line}: `\\` at the end")))?;
        *i += 2;
        let hex = |n: usize, i: &mut usize| -> Result<char, ConstraintError> {
            let s: String = chars
                .get(*i..*i + n)
                .map(|c| c.iter().collect())
                .unwrap_or_default();
            let v = u32::from_str_radix(&s, 16)
                .ok()
                .filter(|_| s.len() == n)
                .and_then(char::from_u32)
                .ok_or_else(|| ConstraintError(format!("line {line}: bad escape \\{c}{s}")))?;
            *i += n;
            Ok(v)
        };
        Ok(match c {
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            '\\' => '\\',
            '"' => '"',
            '[' => '[',
            ']' => ']',
            '-' => '-',
            '^' => '^',
            'x' => hex(2, i)?,
            'u' => hex(4, i)?,
            'U' => hex(8, i)?,
            other => return err(format!("line {line}: unknown escape \\{other}")),
        })
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\n' => {
                line += 1;
                i += 1;
            }
            c if c.is_whitespace() => i += 1,
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ':' if chars.get(i + 1) == Some(&':') && chars.get(i + 2) == Some(&'=') => {
                out.push((line, G::Define));
                i += 3;
            }
            '"' => {
                let start = line;
                let mut s = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return err(format!("line {start}: unterminated string")),
                        Some('"') => {
                            i += 1;
                            break;
                        }
                        Some('\\') => s.push(escape(&chars, &mut i, line)?),
                        Some('\n') => return err(format!("line {line}: newline inside a string")),
                        Some(&c) => {
                            s.push(c);
                            i += 1;
                        }
                    }
                }
                out.push((start, G::Literal(s)));
            }
            '[' => {
                let mut s = String::from("[");
                i += 1;
                if chars.get(i) == Some(&'^') {
                    s.push('^');
                    i += 1;
                }
                loop {
                    match chars.get(i) {
                        None | Some('\n') => {
                            return err(format!("line {line}: unterminated character class"))
                        }
                        Some(']') => {
                            i += 1;
                            break;
                        }
                        Some('\\') => {
                            let c = escape(&chars, &mut i, line)?;
                            push_class_char(&mut s, c);
                        }
                        Some(&'-') => {
                            s.push('-');
                            i += 1;
                        }
                        Some(&c) => {
                            push_class_char(&mut s, c);
                            i += 1;
                        }
                    }
                }
                s.push(']');
                if s == "[]" || s == "[^]" {
                    return err(format!("line {line}: empty character class"));
                }
                out.push((line, G::Class(s)));
            }
            '.' => {
                out.push((line, G::Any));
                i += 1;
            }
            '(' => {
                out.push((line, G::Open));
                i += 1;
            }
            ')' => {
                out.push((line, G::Close));
                i += 1;
            }
            '|' => {
                out.push((line, G::Alt));
                i += 1;
            }
            '*' | '+' | '?' => {
                out.push((line, G::Op(c.to_string())));
                i += 1;
            }
            '{' => {
                let end = chars[i..]
                    .iter()
                    .position(|&c| c == '}')
                    .ok_or_else(|| ConstraintError(format!("line {line}: unclosed `{{`")))?;
                let body: String = chars[i + 1..i + end]
                    .iter()
                    .filter(|c| !c.is_whitespace())
                    .collect();
                let ok = !body.is_empty()
                    && body.chars().all(|c| c.is_ascii_digit() || c == ',')
                    && body.matches(',').count() <= 1
                    && !body.starts_with(',');
                if !ok {
                    return err(format!("line {line}: bad repetition {{{body}}}"));
                }
                out.push((line, G::Op(format!("{{{body}}}"))));
                i += end + 1;
            }
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                let mut n = String::new();
                while let Some(&c) = chars.get(i) {
                    if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                        n.push(c);
                        i += 1;
                    } else {
                        break;
                    }
                }
                out.push((line, G::Name(n)));
            }
            other => return err(format!("line {line}: unexpected {other:?}")),
        }
    }
    if out.is_empty() {
        return err("the grammar has no rules");
    }
    Ok(out)
}

/// A literal character inside a regex class, escaped where regex syntax needs it.
fn push_class_char(s: &mut String, c: char) {
    match c {
        '\\' | ']' | '[' | '^' | '-' | '/' => {
            s.push('\\');
            s.push(c);
        }
        '\n' => s.push_str("\\n"),
        '\t' => s.push_str("\\t"),
        '\r' => s.push_str("\\r"),
        c => s.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gbnf_rules_literals_classes_and_repeats_translate() {
        let g = r#"
# a comment
root ::= greeting " " name ("!" | "?")*
greeting ::= "hi" | "h\u00e9llo"
name ::= [A-Z] [a-z\-]{1,8}
"#;
        let lark = gbnf_to_lark(g).unwrap();
        assert!(lark.starts_with("start: g_root\n"), "{lark}");
        assert!(lark.contains("g_greeting: \"hi\" | \"héllo\""), "{lark}");
        assert!(lark.contains("/[A-Z]/ /[a-z\\-]/{1,8}"), "{lark}");
        assert!(looks_like_gbnf(g));
        assert!(!looks_like_gbnf("start: \"a\" | \"b\"\n"));
    }

    #[test]
    fn gbnf_errors_name_the_line() {
        let e = gbnf_to_lark("root ::= a\n").unwrap_err().0;
        assert!(e.contains("line 1") && e.contains("\"a\""), "{e}");
        let e = gbnf_to_lark("root ::= \"x\"\nb ::= \"unterminated\n")
            .unwrap_err()
            .0;
        assert!(e.contains("line 2"), "{e}");
        let e = gbnf_to_lark("x ::= \"y\"\n").unwrap_err().0;
        assert!(e.contains("root"), "{e}");
        let e = gbnf_to_lark("root ::= (\"a\"\n").unwrap_err().0;
        assert!(e.contains("unclosed"), "{e}");
        let e = gbnf_to_lark("root ::= [a-z\n").unwrap_err().0;
        assert!(e.contains("line 1"), "{e}");
    }
}
