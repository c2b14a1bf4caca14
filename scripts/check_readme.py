"""The README's examples on the demo model, as a newcomer runs them: each must give the answer
the README promises, on every path it names (the GGUF as it is, its `.pocket` export, the
default int8 activations and `--activations f32`, and the server through the
official openai client with the README's own Python lines). Each command is checked to appear
in README.md as written, so the README and this check cannot drift apart.
  scripts/py serve scripts/check_readme.py [--pocket target/release/pocket]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_common import ROOT, SMOLLM2, checks, ok, pocket_server  # noqa: E402

README = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
FRANCE = '-p "What is the capital of France?"'


def in_readme(text):
    ok(text in README, f"README shows: {text}")


def run(pocket, args, cwd):
    out = subprocess.run([pocket, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    ok(out.returncode == 0, f"pocket {' '.join(args)}: exit {out.returncode}: {out.stderr[-400:]}")
    return out.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pocket", default=os.path.join(ROOT, "target/release/pocket"))
    a = ap.parse_args()
    pocket = os.path.abspath(a.pocket)
    gguf = SMOLLM2
    work = tempfile.mkdtemp(prefix="pocket-readme-")

    # The set-up section: the demo's question, answered once.
    in_readme(f'scripts/demo.sh {FRANCE}')

    # The examples block, on the demo model ($GGUF).
    in_readme("pocket export $GGUF -o smollm2.pocket")
    out = run(pocket, ["export", gguf, "-o", "smollm2.pocket"], work)
    size = os.path.getsize(os.path.join(work, "smollm2.pocket"))
    ok("bit for bit" in out and size <= os.path.getsize(gguf),
       f"export keeps the GGUF's blocks ({size / 1e6:.2f} MB): {out.strip()[-200:]}")
    in_readme(f"pocket run smollm2.pocket {FRANCE}")
    paths = [
        ("the .pocket", ["run", "smollm2.pocket"]),
        ("the GGUF", ["run", gguf]),
        ("the GGUF, --activations f32", ["--activations", "f32", "run", gguf]),
    ]
    in_readme("--activations f32")
    for name, args in paths:
        answer = run(pocket, args + ["-p", "What is the capital of France?"], work)
        ok("Paris" in answer, f"{name} answers Paris: {answer.strip()!r}")
    in_readme("pocket inspect smollm2.pocket")
    out = run(pocket, ["inspect", "smollm2.pocket"], work)
    ok("kept bit for bit" in out or "ggml_q4_1" in out, f"inspect shows the kept blocks: {out[:300]!r}")
    labels = "set_alarm,weather,other"
    in_readme(f'pocket run $GGUF -p "Wake me at 7" --choices {labels}')
    answer = run(pocket, ["run", gguf, "-p", "Wake me at 7", "--choices", labels], work).strip()
    ok(answer in labels.split(","), f"--choices answers one label: {answer!r}")
    in_readme("pocket export $GGUF --format mnn -o smollm2-mnn/")
    run(pocket, ["export", gguf, "--format", "mnn", "-o", "smollm2-mnn/"], work)
    ok(os.path.exists(os.path.join(work, "smollm2-mnn", "llm.mnn")), "the MNN package is written")

    # Serving: the README's Python lines, as written but for the port and key.
    m = re.search(r"```python\n(from openai import OpenAI.*?)```", README, re.S)
    ok(m is not None, "README has the openai client example")
    code = m.group(1)
    key = "readme-key"
    with pocket_server(pocket, gguf, api_key=key, alias=None) as srv:
        code = code.replace("http://127.0.0.1:8080/v1", srv.base + "/v1").replace('"KEY"', repr(key))
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        ok(out.returncode == 0 and "Paris" in out.stdout,
           f"the README's openai example answers Paris: {out.stdout.strip()!r} {out.stderr[-300:]}")
        ok(srv.terminate() == 0, "the server exits 0 at SIGTERM")
    shutil.rmtree(work, ignore_errors=True)
    print(f"check_readme: {checks[0]} checks passed")


if __name__ == "__main__":
    main()
