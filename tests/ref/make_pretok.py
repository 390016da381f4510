#!/usr/bin/env python3
"""Regenerate tests/fixtures/pretok_words.json: the words each pre-tokenizer makes of Unicode-rich texts,
by the regular expressions themselves (PyPI `regex`, an engine independent of runtime/text/tokenizer.c's
hand-coded scanners), for test_tokenizer's test_pretokenizers_match_regex.

    pip install regex && python3 tests/ref/make_pretok.py

The expressions are llama.cpp's (src/llama-vocab.cpp, the byte-level BPE pre-tokenizer types), applied
as llama.cpp applies them (unicode_regex_split): each expression splits every piece the previous one
left, and the text between two matches is a piece of its own.
  gpt-2 / default:            GPT2
  smollm / starcoder / refact: \\p{N}, then GPT2 without its last alternative
  qwen2:                       QWEN2 (Qwen2.5's tokenizer.json, the contractions case-insensitive in ASCII)
The tokenizer's tables are Unicode 14.0.0 (tools/gen_unicode_tables.py); every character of every text
is checked to be classed alike by `regex` and Python's unicodedata of that version, so a newer `regex`
cannot move a boundary.
"""
import json
import os
import sys
import unicodedata

import regex

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
SMOLLM = [r"\p{N}", r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"]
QWEN2 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE = {"gpt-2": [GPT2], "default": [GPT2], "smollm": SMOLLM, "starcoder": SMOLLM, "qwen2": [QWEN2]}

# each line exercises a class boundary: every White_Space code point, letters of scripts with combining
# marks (not letters), numbers of every kind (Nd, Nl, No), symbols and emoji (4-byte UTF-8), the UTF-8
# length boundaries, contractions in both cases, line breaks after punctuation and inside space runs
TEXTS = [
    "a\u3000!b \u3000\u3000c",
    "x\u00a0\u00a0y z\u00a0 w",
    "line\u2028sep\u2029para \u2028\u2028 end",
    "\u1680ogham\u205fmath\u202fnarrow\u2000en\u2001em\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200athin",
    "nel\u0085x\u000bvt\u000cff\r\nwin\r\rmac\n\n\nunix",
    "tab\tsep\t\tdouble \t mixed\t",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\u53e5\u8aad\u70b9\u3002 \u4e2d\u6587",
    "\u0661\u0662\u0663 \u0664\u0665 \u216b \u00bd \u00b2 \u2460\u2461 x\u00b3y",
    "emoji \U0001f600\U0001f600 and \U00010000\U00010001 linear B \U0001d518\U0001d52b\U0001d526",
    "edges \u007f\u0080 \u07fa\u0800 \ufffd\uffef \U00010000 \U0010fffd.",
    "It's I'M they'RE we'Ve you'LL he'D isn'T 'x ''s",
    "'ae 've 'vx 're 'rx 'll 'lx 'LX 'Vx 'Rx 'am 'dx 'sx 'tt 'Ve 'rE 'Ll '",
    "'v1 'v! 'r! 'l! 'R1 'L. '1e '!e 'e 's1 'd!",
    "12345 678 a1b2 3.14 -42 1,000,000",
    "def f(x):\n    return x  # comment\n\n\n  \n\tpass\n",
    "!!!  ???\n\n...\r\n$$$ %%%\t&&&",
    "   leading and trailing   ",
    " ",
    "\n",
    "\u00e9t\u00e9 cafe\u0301 na\u00efve \u00c5ngstr\u00f6m",
    "\u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627 \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
    "mixed\u00a0\n\u3000\r\n \u2028x",
]
# every White_Space code point between a letter and punctuation, and doubled before a letter: where a
# space and a symbol split differently under every expression
WHITE = [chr(c) for c in [9, 10, 11, 12, 13, 32, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F,
                          0x205F, 0x3000]]
TEXTS += ["".join(f"a{w}!" for w in WHITE), "".join(f"{w}{w}b" for w in WHITE)]


def pieces(text, exprs):
    """llama.cpp's unicode_regex_split: every expression splits each piece; gaps are pieces too."""
    parts = [text]
    for e in exprs:
        out = []
        for p in parts:
            at = 0
            for m in regex.finditer(e, p):
                if m.start() > at:
                    out.append(p[at:m.start()])
                if m.end() > m.start():
                    out.append(m.group())
                at = m.end()
            if at < len(p):
                out.append(p[at:])
        parts = out
    return parts


def same_classes(text):
    for ch in text:
        cat = unicodedata.category(ch)
        for prop, want in ((r"\p{L}", cat[0] == "L"), (r"\p{N}", cat[0] == "N")):
            if bool(regex.match(prop, ch)) != want:
                sys.exit(f"make_pretok: U+{ord(ch):04X} is {cat} in unicodedata {unicodedata.unidata_version} "
                         f"but regex says {prop} = {not want}: pick another character")


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cases = []
    for text in TEXTS:
        same_classes(text)
        for pre, exprs in PRE.items():
            words = pieces(text, exprs)
            assert "".join(words) == text
            ends, at = [], 0
            for w in words:
                at += len(w.encode("utf-8"))
                ends.append(at)
            cases.append({"pre": pre, "text": text, "ends": ends})
    out = {"generator": f"tests/ref/make_pretok.py (regex {regex.__version__}, unicodedata {unicodedata.unidata_version})",
           "cases": cases}
    path = os.path.join(root, "tests", "fixtures", "pretok_words.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=True, indent=0)
        f.write("\n")
    print(f"{path}: {len(cases)} cases")


if __name__ == "__main__":
    main()
