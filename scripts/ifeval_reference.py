#!/usr/bin/env python3
"""Scores IFEval responses with the pinned Python reference, one verdict line per response row.

The reference is lm-eval 0.4.13's `lm_eval/tasks/ifeval` (= google-research's
instruction_following_eval), run on nltk 3.10.4 with the English punkt_tab model and
langdetect 1.0.9. scripts/make-ifeval-fixtures.sh builds that environment and calls this.

Subcommands:
  verdicts INPUT_DATA RESPONSES OUT
      RESPONSES has one JSON object per line: {"key": int | "prompt": str, "response": str}.
      OUT gets, per row in order, {"row", "key", "strict": [bool], "loose": [bool]}, the
      instruction-level verdicts of utils.test_instruction_following_strict/_loose.
  outputs INPUT_DATA RESPONSES DIR
      DIR gets eval_results_strict.jsonl and eval_results_loose.jsonl, one line per response
      row, written as google-research's evaluation_main writes them
      (json.dumps(dataclasses.asdict(OutputExample))).
  tokens TEXTS OUT
      TEXTS has {"text": str} lines. OUT gets the NLTK pieces the checkers count, per text:
      {"text", "sentences": [...], "words": [...], "word_count": int} (Punkt sentences,
      nltk.word_tokenize tokens, RegexpTokenizer(r"\\w+") count).

Three things are pinned here that lm-eval leaves to chance (both are documented in
evals/src/ifeval/mod.rs, which follows the same choices):
  * `langdetect.DetectorFactory.seed = 0` (lm-eval leaves it unseeded: verdicts then vary
    from run to run);
  * langdetect's profiles are loaded in sorted file-name order instead of `os.listdir` order
    (which depends on the file system and changes the last bits of some probabilities);
  * keywords:letter_frequency with a `letter` that is not one ASCII letter (the data has "!"
    and "#"): the reference draws a random letter at each build; here the given character is
    counted, as the Rust port does.

Environment: LM_EVAL_ROOT is a directory holding lm_eval/tasks/ifeval/*.py; NLTK_DATA holds
tokenizers/punkt_tab/english/.
"""
import json
import os
import sys


def load_reference():
    root = os.environ["LM_EVAL_ROOT"]
    sys.path.insert(0, root)
    import langdetect
    from langdetect import detector_factory

    detector_factory.DetectorFactory.seed = 0
    real_listdir = os.listdir
    os.listdir = lambda path: sorted(real_listdir(path))
    try:
        detector_factory.init_factory()
    finally:
        os.listdir = real_listdir
    assert langdetect.detect("Ceci est une phrase en français.") == "fr"

    from lm_eval.tasks.ifeval import instructions, utils

    original_build = instructions.LetterFrequencyChecker.build_description

    def build_following_the_data(self, *, letter=None, let_frequency=None, let_relation=None):
        result = original_build(
            self, letter=letter, let_frequency=let_frequency, let_relation=let_relation
        )
        if isinstance(letter, str) and len(letter.strip()) == 1:
            self._letter = letter.strip().lower()
        return result

    instructions.LetterFrequencyChecker.build_description = build_following_the_data
    return utils


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def verdicts(input_path, responses_path, out_path):
    utils = load_reference()
    docs = read_jsonl(input_path)
    by_key = {d["key"]: d for d in docs}
    by_prompt = {d["prompt"]: d for d in docs}
    with open(out_path, "w", encoding="utf-8") as out:
        for row, r in enumerate(read_jsonl(responses_path)):
            doc = by_key[r["key"]] if "key" in r else by_prompt[r["prompt"]]
            inp = utils.InputExample(
                key=doc["key"],
                instruction_id_list=doc["instruction_id_list"],
                prompt=doc["prompt"],
                kwargs=doc["kwargs"],
            )
            strict = utils.test_instruction_following_strict(inp, r["response"])
            loose = utils.test_instruction_following_loose(inp, r["response"])
            out.write(json.dumps({
                "row": row,
                "key": doc["key"],
                "strict": strict.follow_instruction_list,
                "loose": loose.follow_instruction_list,
            }) + "\n")
            if row % 500 == 0:
                print(f"row {row}", file=sys.stderr)


def outputs(input_path, responses_path, out_dir):
    import dataclasses
    utils = load_reference()
    docs = read_jsonl(input_path)
    by_key = {d["key"]: d for d in docs}
    by_prompt = {d["prompt"]: d for d in docs}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "eval_results_strict.jsonl"), "w") as fs, \
            open(os.path.join(out_dir, "eval_results_loose.jsonl"), "w") as fl:
        for r in read_jsonl(responses_path):
            doc = by_key[r["key"]] if "key" in r else by_prompt[r["prompt"]]
            inp = utils.InputExample(
                key=doc["key"],
                instruction_id_list=doc["instruction_id_list"],
                prompt=doc["prompt"],
                kwargs=doc["kwargs"],
            )
            for f, test in [(fs, utils.test_instruction_following_strict),
                            (fl, utils.test_instruction_following_loose)]:
                f.write(json.dumps(dataclasses.asdict(test(inp, r["response"]))) + "\n")


def tokens(texts_path, out_path):
    load_reference()
    import nltk
    from lm_eval.tasks.ifeval import instructions_util

    sentence_tokenizer = instructions_util._get_sentence_tokenizer()
    with open(out_path, "w", encoding="utf-8") as out:
        for r in read_jsonl(texts_path):
            text = r["text"]
            out.write(json.dumps({
                "text": text,
                "sentences": sentence_tokenizer.tokenize(text),
                "words": nltk.word_tokenize(text),
                "word_count": instructions_util.count_words(text),
            }, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"verdicts": verdicts, "outputs": outputs, "tokens": tokens}[command](*args)
