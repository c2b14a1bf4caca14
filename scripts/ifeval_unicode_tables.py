#!/usr/bin/env python3
"""Writes evals/src/ifeval/unicode_tables.rs: the character tables the IFEval reference uses.

The reference mixes two regular-expression engines and Python's own string methods, each with
its own idea of "whitespace", "word character" and "case":

* lm-eval's checkers call the standard library (`re`, `str.isupper`, `str.lower`, `str.strip`),
  whose tables are CPython's Unicode database (Unicode 14.0 on CPython 3.11);
* NLTK 3.10 sends every pattern (Punkt, `word_tokenize`, `RegexpTokenizer(r"\\w+")`) through
  the third-party `regex` module, whose `\\w`, `\\s` and `\\d` are different sets again.

Rather than approximate either with Rust's own (newer) Unicode tables, the port reads these
tables, generated here by asking the pinned interpreter and `regex` module character by
character. Run with the reference venv's python (scripts/make-ifeval-fixtures.sh does).
"""
import re
import re._casefix
import sys
import unicodedata
import _sre

import regex

MAX = 0x110000
CHARS = [c for c in range(MAX) if not 0xD800 <= c < 0xE000]


def ranges(pred):
    out = []
    for c in CHARS:
        if pred(c):
            if out and out[-1][1] == c - 1:
                out[-1][1] = c
            else:
                out.append([c, c])
    return out


def fmt_ranges(name, doc, rs):
    lines = [f"/// {doc}", f"pub static {name}: &[(u32, u32)] = &["]
    row = []
    for a, b in rs:
        row.append(f"(0x{a:X}, 0x{b:X})")
        if len(row) == 6:
            lines.append("    " + ", ".join(row) + ",")
            row = []
    if row:
        lines.append("    " + ", ".join(row) + ",")
    lines.append("];")
    return "\n".join(lines)


def rust_str(s):
    return '"' + "".join(f"\\u{{{ord(ch):X}}}" for ch in s) + '"'


def fmt_map(name, doc, pairs, value_type):
    lines = [f"/// {doc}", f"pub static {name}: &[(u32, {value_type})] = &["]
    row = []
    for a, b in pairs:
        val = rust_str(b) if value_type == "&str" else f"0x{b:X}"
        row.append(f"(0x{a:X}, {val})")
        if len(row) == 6:
            lines.append("    " + ", ".join(row) + ",")
            row = []
    if row:
        lines.append("    " + ", ".join(row) + ",")
    lines.append("];")
    return "\n".join(lines)


def main(out_path):
    rx = {k: regex.compile(p) for k, p in [("w", r"\w"), ("s", r"\s"), ("d", r"\d")]}
    st = {k: re.compile(p) for k, p in [("w", r"\w"), ("s", r"\s"), ("d", r"\d")]}

    def sigma_lower(ctx_after):
        # Final-sigma context as CPython's lower() decides it (see module doc in pytext.rs).
        return lambda c: ("A\u03a3" + chr(c) + ctx_after).lower()[1] == "\u03c3"

    after_end = sigma_lower("")  # sigma followed by c then end: not final iff c is cased
    after_b = sigma_lower("B")  # ... then a cased letter: not final iff c is cased or ignorable

    parts = []
    parts.append(fmt_ranges("PY_SPACE", "`str.isspace()` (and `re`'s `\\s`) of CPython.",
                            ranges(lambda c: chr(c).isspace())))
    assert ranges(lambda c: chr(c).isspace()) == ranges(lambda c: st["s"].match(chr(c)))
    parts.append(fmt_ranges("PY_WORD", "`re`'s `\\w`: `str.isalnum()` or `_`.",
                            ranges(lambda c: st["w"].match(chr(c)))))
    parts.append(fmt_ranges("PY_DIGIT", "`re`'s `\\d`: decimal digits.",
                            ranges(lambda c: st["d"].match(chr(c)))))
    parts.append(fmt_ranges("PY_UPPER", "Characters `str.isupper()` counts as uppercase.",
                            ranges(lambda c: chr(c).isupper())))
    parts.append(fmt_ranges("PY_LOWER", "Characters `str.islower()` counts as lowercase.",
                            ranges(lambda c: chr(c).islower())))
    parts.append(fmt_ranges("PY_TITLE", "Titlecase letters (Lt): they make `isupper`/`islower` false.",
                            ranges(lambda c: unicodedata.category(chr(c)) == "Lt")))
    ignorable = ranges(lambda c: after_b(c) and not after_end(c))
    cased = ranges(lambda c: after_end(c))
    parts.append(fmt_ranges("PY_SIGMA_IGNORABLE", "Case-ignorable characters `lower()` skips around a capital sigma.", ignorable))
    parts.append(fmt_ranges("PY_SIGMA_CASED", "Cased (and not case-ignorable) characters for the final-sigma rule.", cased))
    lower_pairs = [(c, chr(c).lower()) for c in CHARS if chr(c).lower() != chr(c)]
    parts.append(fmt_map("PY_LOWER_MAP", "`str.lower()` of one character (capital sigma: see pytext).",
                         lower_pairs, "&str"))
    sre_lower = [(c, _sre.unicode_tolower(c)) for c in CHARS if _sre.unicode_tolower(c) != c]
    parts.append(fmt_map("SRE_LOWER", "`re`'s simple lowercase, used for IGNORECASE matching.",
                         sre_lower, "u32"))
    parts.append(fmt_ranges("SRE_CASED", "Characters `re` treats as cased under IGNORECASE.",
                            ranges(lambda c: _sre.unicode_iscased(c))))
    extra = []
    for lo, others in sorted(re._casefix._EXTRA_CASES.items()):
        for o in others:
            extra.append((lo, o))
    parts.append(fmt_map("SRE_EXTRA_CASES", "`re`'s extra case equivalences (`_casefix._EXTRA_CASES`), as pairs.",
                         extra, "u32"))
    parts.append(fmt_ranges("RX_SPACE", "The `regex` module's `\\s` (NLTK).", ranges(lambda c: rx["s"].match(chr(c)))))
    parts.append(fmt_ranges("RX_WORD", "The `regex` module's `\\w` (NLTK).", ranges(lambda c: rx["w"].match(chr(c)))))
    parts.append(fmt_ranges("RX_DIGIT", "The `regex` module's `\\d` (NLTK).", ranges(lambda c: rx["d"].match(chr(c)))))
    # Case-insensitive matches of each ASCII letter in the `regex` module (NLTK's `(?i)`).
    candidates = [c for c in CHARS if chr(c).lower() != chr(c) or chr(c).upper() != chr(c)
                  or chr(c).casefold() != chr(c)]
    rx_icase = []
    for letter in "abcdefghijklmnopqrstuvwxyz":
        p = regex.compile("(?i)" + letter)
        for c in candidates:
            if c != ord(letter) and p.fullmatch(chr(c)):
                rx_icase.append((ord(letter), c))
    parts.append(fmt_map("RX_ICASE_EXTRA", "Other characters the `regex` module's `(?i)` matches for an ASCII lowercase letter.",
                         rx_icase, "u32"))

    header = (
        "// @generated by scripts/ifeval_unicode_tables.py: do not edit.\n"
        f"// CPython {sys.version.split()[0]} (Unicode {unicodedata.unidata_version}), "
        f"regex {regex.__version__}.\n"
        "// Sorted, disjoint, inclusive code point ranges; maps sorted by key.\n\n"
        f"/// Unicode version of the interpreter the tables were read from.\n"
        f"pub const PY_UNICODE_VERSION: &str = \"{unicodedata.unidata_version}\";\n"
    )
    with open(out_path, "w") as f:
        f.write(header + "\n" + "\n\n".join(parts) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
