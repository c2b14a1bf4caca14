//! Whether Python's `json.loads` accepts a string (the `json_format` check).
//!
//! Python's decoder is not RFC 8259: it accepts `NaN`, `Infinity` and `-Infinity`, any
//! top-level value, and lone surrogate escapes; it rejects control characters inside strings
//! (strict mode) and allows only `' \t\n\r'` as whitespace. serde_json differs on several of
//! these, so this is a small validator that follows CPython's C scanner (`_json.c`).
//! Nesting is walked with an explicit stack; CPython would raise `RecursionError` (not a
//! `ValueError`, so the reference crashes) past its recursion limit, which is not emulated.

/// `json.loads(text)` raises no `ValueError`.
pub fn loads_ok(text: &str) -> bool {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
    };
    p.skip_ws();
    if p.value().is_none() {
        return false;
    }
    p.skip_ws();
    p.i == p.s.len()
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

#[derive(Clone, Copy)]
enum Frame {
    Array,
    Object,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, lit: &[u8]) -> bool {
        if self.s[self.i..].starts_with(lit) {
            self.i += lit.len();
            true
        } else {
            false
        }
    }

    /// One value, containers included (iteratively). `None` on any error.
    fn value(&mut self) -> Option<()> {
        let mut stack: Vec<Frame> = Vec::new();
        loop {
            // Parse a value start.
            match self.peek()? {
                b'[' => {
                    self.i += 1;
                    self.skip_ws();
                    if self.peek() == Some(b']') {
                        self.i += 1;
                    } else {
                        stack.push(Frame::Array);
                        continue;
                    }
                }
                b'{' => {
                    self.i += 1;
                    self.skip_ws();
                    if self.peek() == Some(b'}') {
                        self.i += 1;
                    } else {
                        self.key()?;
                        stack.push(Frame::Object);
                        continue;
                    }
                }
                _ => self.scalar()?,
            }
            // After a complete value: close containers or move to the next element.
            loop {
                let Some(&frame) = stack.last() else {
                    return Some(());
                };
                self.skip_ws();
                let (close, is_object) = match frame {
                    Frame::Array => (b']', false),
                    Frame::Object => (b'}', true),
                };
                match self.peek()? {
                    b',' => {
                        self.i += 1;
                        self.skip_ws();
                        if is_object {
                            self.key()?;
                        }
                        break;
                    }
                    c if c == close => {
                        self.i += 1;
                        stack.pop();
                    }
                    _ => return None,
                }
            }
        }
    }

    /// `"key" :` and the whitespace after the colon.
    fn key(&mut self) -> Option<()> {
        if self.peek()? != b'"' {
            return None;
        }
        self.string()?;
        self.skip_ws();
        if self.peek()? != b':' {
            return None;
        }
        self.i += 1;
        self.skip_ws();
        Some(())
    }

    fn scalar(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string(),
            b'n' if self.eat(b"null") => Some(()),
            b't' if self.eat(b"true") => Some(()),
            b'f' if self.eat(b"false") => Some(()),
            b'N' if self.eat(b"NaN") => Some(()),
            b'I' if self.eat(b"Infinity") => Some(()),
            b'-' if self.s[self.i..].starts_with(b"-Infinity") => {
                self.i += 9;
                Some(())
            }
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?`, ASCII digits only; an incomplete
    /// fraction or exponent is left unconsumed (the caller then sees extra data).
    fn number(&mut self) -> Option<()> {
        let digits = |p: &mut Self| {
            let start = p.i;
            while matches!(p.peek(), Some(b'0'..=b'9')) {
                p.i += 1;
            }
            p.i - start
        };
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                digits(self);
            }
            _ => return None,
        }
        if self.peek() == Some(b'.') && matches!(self.s.get(self.i + 1), Some(b'0'..=b'9')) {
            self.i += 1;
            digits(self);
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            let save = self.i;
            self.i += 1;
            if matches!(self.peek(), Some(b'-' | b'+')) {
                self.i += 1;
            }
            if digits(self) == 0 {
                self.i = save;
            }
        }
        Some(())
    }

    /// A string after its opening quote check; strict: no raw control characters.
    fn string(&mut self) -> Option<()> {
        self.i += 1;
        loop {
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return Some(());
                }
                b'\\' => {
                    self.i += 1;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 1,
                        b'u' => {
                            let hex = self.s.get(self.i + 1..self.i + 5)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.i += 5;
                        }
                        _ => return None,
                    }
                }
                c if c < 0x20 => return None,
                _ => self.i += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::loads_ok;

    #[test]
    fn accepts_what_python_accepts() {
        for ok in [
            "{}",
            "[]",
            " 1 ",
            "-0",
            "1.5e10",
            "1E-5",
            "\"s\"",
            "NaN",
            "-Infinity",
            "{\"a\": [1, {\"b\": null}], \"c\": true}",
            "\"\\ud800\"",
            "[1,\n2]",
            "1e5",
            "{\"nan\": NaN, \"inf\": Infinity}",
            "\"\u{7f}\"",
        ] {
            assert!(loads_ok(ok), "{ok:?}");
        }
    }

    #[test]
    fn rejects_what_python_rejects() {
        for bad in [
            "",
            " ",
            "{\"a\": 1,}",
            "{'a': 1}",
            "01",
            "1.",
            ".5",
            "+1",
            "[1, 2",
            "\"line\nbreak\"",
            "\"\\x41\"",
            "{\"a\" 1}",
            "nul",
            "-",
            "1 2",
            "\u{feff}{}",
            "[1,]",
            "{1: 2}",
            "\"\\u12G4\"",
            "-Inf",
            "\u{a0}1",
        ] {
            assert!(!loads_ok(bad), "{bad:?}");
        }
    }
}
