#!/usr/bin/env python3
"""The trained SmolLM2 adapter (scripts/train_lora_smollm2.py) at work, standard library only:

  - `pocket run` on 20 held-out prompts, greedy: how many answers are one JSON object with an
    "answer" key, with the adapter (PEFT directory; its GGUF LoRA) and without it;
  - `pocket serve --lora json=ADAPTER:0`: the 20 prompts sent twice at once, half with
    `"lora": [{"id": "json", "scale": 1}]` and half without, sharing the batch: each answer
    equals `pocket run`'s alone, text for text.

Usage: scripts/check_lora_behaviour.py POCKET MODEL.gguf ADAPTER_DIR  (ADAPTER_DIR: peft/,
adapter.gguf, heldout.json). Prints a JSON report; exit 1 when an answer differs.
"""
import json
import os
import subprocess
import sys
import threading
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_common import free_port, Server  # noqa: E402

N = 48


def is_json_answer(text):
    try:
        v = json.loads(text.strip())
    except ValueError:
        return False
    return isinstance(v, dict) and "answer" in v


def run(pocket, model, prompt, lora):
    argv = [pocket, "run", model, "-p", prompt, "--temp", "0", "-n", str(N), "--json"]
    for l in lora:
        argv += ["--lora", l]
    return json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)["text"]


def main():
    pocket, model, adir = sys.argv[1:4]
    prompts = json.load(open(os.path.join(adir, "heldout.json")))
    peft, gguf = os.path.join(adir, "peft"), os.path.join(adir, "adapter.gguf")
    answers = {}
    for name, lora in [("base", []), ("peft", [peft]), ("gguf", [gguf] if os.path.exists(gguf) else None)]:
        if lora is None:
            continue
        answers[name] = [run(pocket, model, p, lora) for p in prompts]
    report = {k: sum(map(is_json_answer, v)) for k, v in answers.items()}
    print(f"JSON answers out of {len(prompts)}: " + ", ".join(f"{k} {v}" for k, v in report.items()),
          file=sys.stderr)
    for i in range(3):
        print(f"  {prompts[i]!r}: base {answers['base'][i][:60]!r} | adapter {answers['peft'][i][:60]!r}",
              file=sys.stderr)
    # The server: both kinds in one batch.
    port = free_port()
    argv = [pocket, "serve", model, "--port", str(port), "--parallel", "8", "--alias", "m",
            "--lora", f"json={peft}:0"]
    served = {}
    with Server(argv, port) as srv:
        def ask(i, with_lora):
            body = {"model": "m", "messages": [{"role": "user", "content": prompts[i]}],
                    "temperature": 0, "max_tokens": N}
            if with_lora:
                body["lora"] = [{"id": "json", "scale": 1}]
            req = urllib.request.Request(srv.base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=300) as r:
                    served[(i, with_lora)] = json.loads(r.read())["choices"][0]["message"]["content"]
            except Exception as e:  # counted as a difference below
                served[(i, with_lora)] = f"<{e}>"
        ts = [threading.Thread(target=ask, args=(i, w)) for i in range(len(prompts)) for w in (False, True)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        srv.terminate()
    same = sum(served[(i, False)] == answers["base"][i] and served[(i, True)] == answers["peft"][i]
               for i in range(len(prompts)))
    print(f"served in one batch, equal to pocket run alone: {same} of {len(prompts)} pairs", file=sys.stderr)
    print(json.dumps({"json_answers": report, "prompts": len(prompts), "served_equal_pairs": same,
                      "examples": [{"prompt": p, "base": b, "adapter": a}
                                   for p, b, a in zip(prompts, answers["base"], answers["peft"])]}, indent=1))
    sys.exit(0 if same == len(prompts) else 1)


if __name__ == "__main__":
    main()
