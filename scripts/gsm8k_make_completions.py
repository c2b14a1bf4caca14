#!/usr/bin/env python3
"""Writes evals/tests/fixtures/gsm8k_completions.jsonl: synthetic model responses to GSM8K
problems, built to exercise every corner of lm-eval's answer extraction and exact match
(commas, $, trailing periods and newlines, negative numbers, decimals, several "####",
"The answer is" / "The final answer is" forms, no answer at all, look-alike digits), for each
variant. Deterministic: the same file every run (stdlib only).

Usage: python3 scripts/gsm8k_make_completions.py > evals/tests/fixtures/gsm8k_completions.jsonl
"""
import json
import random
import sys

VARIANTS = ["gsm8k", "gsm8k_cot", "gsm8k_cot_zeroshot", "gsm8k_cot_llama"]

# GSM8K-style answer fields: worked solution, calculator annotations, "#### N".
ANSWERS = [
    "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\nShe makes 9 * 2 = $<<9*2=18>>18 every day at the farmer\u2019s market.\n#### 18",
    "The total is 1000 + 18 = <<1000+18=1018>>1018 dollars.\n#### 1,018",
    "He ends 3 below zero: 5 - 8 = <<5-8=-3>>-3.\n#### -3",
    "Each gets 5 / 2 = <<5/2=2.5>>2.5 liters.\n#### 2.5",
    "Nothing is left: 7 - 7 = <<7-7=0>>0.\n#### 0",
    "So 70 * 1000 = <<70*1000=70000>>70000.\n#### 70000",
    "Price: $<<5=5>>5.\n#### $5",
    "Half a dollar.\n#### .5",
]

# Ways to write the number n (a string) in a response.
def spellings(n):
    out = {n, n + ".", "$" + n, n + ".00", n + ",", "-" + n, n.replace(",", ""), n + "\n"}
    if "," not in n and n.lstrip("-").isdigit() and len(n.lstrip("-")) > 3:
        d = n.lstrip("-")
        out.add(("-" if n.startswith("-") else "") + f"{int(d):,}")
    if n.startswith("-"):
        out.add(n[1:])
        out.add("$" + n)
        out.add("-$" + n[1:])
    if "." in n:
        out.add(n.replace(".", ","))
    out.add(n.translate(str.maketrans("0123456789", "\uff10\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18\uff19")))
    return sorted(out)

TEMPLATES = [
    "#### {x}",
    "####{x}",
    "####  {x}",
    "So the total is {x}.\n#### {x}",
    "#### 12\n#### {x}",
    "#### {x}\n#### 12",
    "#### {x} #### 7",
    "The answer is {x}.",
    "The answer is {x}",
    "The answer is: {x}.",
    "the answer is {x}.",
    "THE ANSWER IS {x}.",
    "The answer is {x}.\n\nThe answer is 4.",
    "The answer is {x}. The answer is 4",
    "The final answer is {x}",
    "The final answer is {x}.",
    "The final answer is ${x}",
    "The final answer is 1. The final answer is {x}",
    "Step 1: 3 + 4 = 7. Step 2: 7 * 2 = 14. So she has {x} left.",
    "{x}",
    "She paid {x} dollars for 3 items.",
    "It costs {x} in total, which is {x}.\n",
    "First 2.5 then 1,000 and finally {x}",
    "Answer: {x} (approximately)",
    "{x}.\n\n",
    "There are 15 trees. 21 - 15 = 6. The answer is 6.\nQ: next\n{x}",
]

FIXED = [
    "",
    " ",
    "I don't know.",
    "eighteen",
    "The answer is.",
    "The answer is .",
    "#### ",
    "####",
    "$$",
    "...",
    "-",
    "--5",
    "1.2.3",
    "The answer is 1.2.3.",
    "#### 1.2.3",
    "$1,000.50.",
    "The answer is -.5.",
    "#### -0",
    "#### 00018",
    "#### 18e3",
    "#### +18",
    "The answer is 18\n",
    "The answer is 18\n\n",
    "The answer is 18.\n",
    "The final answer is -3.",
    "The final answer is $.5",
    "\u0661\u0668",
    "answer: \u00bd",
    "#### 18.\n",
    "#### 18\n.",
    "18.\n",
    "18..",
    "18.,",
    ".18",
    "$18$",
    "The answer is 1,018.",
    "The answer is 1,018",
    "The answer is $1,018.00.",
]

FRAGMENTS = ["The answer is ", "The final answer is ", "#### ", "####", "$", "-", "1", "8",
             "0", "5", ",", ".", " ", "\n", "dollars", "2.5", "-3", "1,018", "\u00a0", "Q:",
             "is ", "answer", "\uff11"]


def main():
    rng = random.Random(6)
    rows = []
    for variant in VARIANTS:
        for answer in ANSWERS:
            n = answer.rsplit("#### ", 1)[-1]
            for tpl in TEMPLATES:
                for x in spellings(n):
                    if rng.random() < 0.25:
                        rows.append((variant, tpl.format(x=x), answer))
        for text in FIXED:
            rows.append((variant, text, rng.choice(ANSWERS)))
        for _ in range(60):
            k = rng.randint(1, 12)
            text = "".join(rng.choice(FRAGMENTS) for _ in range(k))
            rows.append((variant, text, rng.choice(ANSWERS)))
    for i, (variant, response, answer) in enumerate(rows):
        sys.stdout.write(json.dumps({"id": i, "variant": variant, "response": response,
                                     "answer": answer}, ensure_ascii=False) + "\n")
    print(len(rows), "completions", file=sys.stderr)


if __name__ == "__main__":
    main()
