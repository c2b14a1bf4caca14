#!/usr/bin/env python3
"""Texts on which the Punkt and word_tokenize ports are compared with NLTK, one {"text"} a line.

Hand-picked traps for Punkt (abbreviations, initials, numbers, ellipses, quotes after the
period, collocations, sentence starters, odd whitespace) and for the Treebank word tokenizer
(contractions, quotes, brackets, dashes, final periods), then every 20th synthetic response.

Usage: ifeval_tokenize_texts.py RESPONSES OUT
"""
import json
import sys

CASES = [
    "",
    " ",
    "Hello world",
    "Hello world.",
    "Hello world.  ",
    "Hello! How are you? I'm fine.",
    "Dr. Smith went to Washington. He arrived on Jan. 5.",
    "Mr. and Mrs. Jones live in the U.S. They like it.",
    "The U.S. Army is large. the u.s. army too.",
    "e.g. this is an example. i.e. this too.",
    "J. S. Bach was a composer. B. Smith agreed.",
    "It cost $3.88. That was cheap.",
    "The result was 5. Then it was 6.",
    "Version 2.0 is out. Install it.",
    "He said \"Stop.\" Then he left.",
    "He said “Stop.” Then he left.",
    "(This sentence.) Another one.",
    "She asked 'why?' and left. OK.",
    "Wait... what? Really...",
    "Wait . . . what? Really . . . no.",
    "Very bad acting!!! I promise.",
    "One.Two. Three.",
    "Line one.\nLine two.\n\nNew paragraph.",
    "No period at the end\nbut a new line",
    "Trailing spaces.   \n\n",
    "Tabs\there.\tAnd here.",
    "Nbsp\u00a0here. And\u2003em space. Ideographic\u3000space.",
    "Odd \x1c separator. Next\x1d one.",
    "Carriage\r\nreturns.\r\nHere.",
    "ALL CAPS SENTENCE. ANOTHER ONE! IS IT? YES.",
    "I can't do it. They'll go. We're here. He'd know. It's O'Neil's.",
    "CANNOT gonna gimme lemme wanna go. 'Tis the season, 'twas night.",
    "Don't DON'T won't WON'T.",
    "He said \"hello\" and 'goodbye'.",
    "``Quoted'' text and \"double\" quotes.",
    "A -- B --- C - D – E — F.",
    "Prices: $5, 10%, #1, @home & more; really.",
    "Look [here], (there), {everywhere}, <now>.",
    "Stars *bold* **strong** and * bullets.",
    "1,000 people; 3.14 pi; 1.5e10 big; -5 cold.",
    "The end.\"",
    "The end.'",
    "The end.)",
    "The end.”",
    "The end.» Next.",
    "«Bonjour», dit-il. Il partit.",
    "Smith, J. et al. (2020). Title. Journal.",
    "St. Louis is in Mo. It is big.",
    "Inc. and Ltd. are suffixes. Corp. too.",
    "The No. 1 hit. No. It was not.",
    "See p. 5. See pp. 5-6.",
    "Ph.D. students work hard. M.B.A. students too.",
    "10 a.m. is early. 3 p.m. is late.",
    "www.example.com. Next sentence.",
    "email@example.com is mine. Write me.",
    "Numbers 1. 2. 3. Items.",
    "1. First item\n2. Second item\n3. Third item",
    "* Bullet one.\n* Bullet two.\n- Dash three.",
    "SECTION 1\nText here.\nSECTION 2\nMore text.",
    "P.S. Remember this. P.P.S. And this.",
    "<<Title>>\nBody text. More text.",
    "Σ ΣΊΣΥΦΟΣ ΟΔΥΣΣΕΥΣ. Σοφία.",
    "İstanbul. IĞDIR and ıspanak.",
    "ǅemal ǈubljana ǋegoš. ǅ.",
    "Straße. STRASSE. ß.",
    "KELVIN K and long ſ.",
    "Café crème brûlée. Naïve résumé.",
    "नमस्ते दुनिया। यह एक वाक्य है।",
    "今天天气很好。我们去公园吧！好吗？",
    "오늘은 날씨가 좋습니다. 공원에 갑시다!",
    "Привет. Как дела? Хорошо!",
    "Emoji 🙂 here. And 👍🏽 there!",
    "a.b.c. d.e. f.",
    "A. B. C. D.",
    "U.S.A. is big. U.K. is small.",
    "Hello.World. Hello. World.",
    "Mixed?! Punctuation!? Here.",
    "Quote at start: \"Hello.\" \"World.\"",
    "Nested (parens (inside) here.) Next.",
    "Ends with comma,",
    "Ends with colon:",
    "a:b c,d e;f",
    "__init__ and snake_case_words.",
    "½ ² ₂ Ⅻ ٣ numbers.",
    "Zero\u200bwidth space. Next.",
    "Line\u2028separator. Para\u2029separator.",
    "Next\u0085line char. Ok.",
    "'s 'm 'd 'll 're 've n't",
    "X's Y'S Z'd.",
    "\"I'm here,\" he said.",
    "Well... I don't know... maybe.",
    "The U.S. Gov't. said so.",
    "Gen. Grant. Lt. Dan. Sgt. Pepper.",
    "He was born in 1990. He died in 2020.",
    "The 1990s. The '90s.",
    "The year was '99. Good times.",
]


def main(responses_path, out_path):
    texts = list(CASES)
    with open(responses_path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i % 20 == 0:
                texts.append(json.loads(line)["response"])
    with open(out_path, "w", encoding="utf-8") as out:
        for t in texts:
            out.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
