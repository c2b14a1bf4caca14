#!/usr/bin/env python3
"""Greedy ids and first-token logits of the aarch64 build (under qemu, at each level) against the
x86-64 build (at each level) on the same model files.

  scripts/check_aarch64.py --x86 target/release/pocket \
      --arm target/aarch64-unknown-linux-gnu/release/pocket MODEL...

For each model: every x86 level and every aarch64 level (qemu -cpu max: i8mm, cortex-a76:
dotprod, cortex-a72: neon, and scalar) runs the same prompt ids greedily. It reports, against
x86's best level, whether the generated ids are identical and the largest first-token logit
difference; the spread among the x86 levels themselves is the tolerance the ARM levels are held
to (they must stay within 1.5x of it, or of 1e-4 when the x86 levels agree exactly). Exits
non-zero on a mismatch.
"""
import argparse, json, os, subprocess, sys

X86 = ["avx512", "avx2", "scalar"]
ARM = [("max", "i8mm"), ("cortex-a76", "dotprod"), ("cortex-a72", "neon"), ("max", "scalar")]


def run(argv, env, model, prompt, n):
    cmd = argv + ["run", model, "--json", "--first-logits", "--temp", "0",
                  "-n", str(n), "-p", prompt]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: {out.stderr.strip()}")
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    return doc["first_logits"], doc["generated_ids"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--x86", required=True)
    ap.add_argument("--arm", required=True)
    ap.add_argument("-n", type=int, default=24)
    ap.add_argument("-p", "--prompt", default="What is the capital of France?",
                    help="chat prompt (through the model's template)")
    ap.add_argument("--act", choices=["int8", "f32"], default="int8",
                    help="activations (POCKET_ACT): f32 is the exact path, where the levels "
                    "differ by f32 rounding alone")
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    bad = 0
    print("| model | level | same ids as x86 | max abs Δ first logits: vs x86 avx512 / avx2 / scalar |")
    print("|---|---|---|---|")
    for m in a.models:
        res = {}
        for isa in X86:
            env = dict(os.environ, POCKET_ISA=isa, POCKET_ACT=a.act)
            res[f"x86 {isa}"] = run([a.x86], env, m, a.prompt, a.n)
        for cpu, isa in ARM:
            env = dict(os.environ, POCKET_ISA=isa, QEMU_CPU=cpu, POCKET_ACT=a.act)
            res[f"aarch64 {isa}"] = run(["qemu-aarch64", "-L", "/", a.arm], env, m, a.prompt, a.n)
        delta = lambda x, y: max(abs(p - q) for p, q in zip(x, y))
        # The x86 levels' own spread is the tolerance (int8 activations: a last-bit change
        # upstream can move a rounding step, so paths differ by quantization noise).
        spread = max(delta(res[f"x86 {i}"][0], res[f"x86 {j}"][0]) for i in X86 for j in X86)
        tol = max(1.5 * spread, 1e-4)
        for k, (l, g) in res.items():
            ds = [delta(l, res[f"x86 {i}"][0]) for i in X86]
            same = [i for i in X86 if res[f"x86 {i}"][1] == g]
            ok = k.startswith("x86") or (same and min(ds) <= tol)
            bad += not ok
            print(f"| {os.path.basename(m)} | {k} | {', '.join(same) or 'NONE'} | "
                  + " / ".join(f"{d:.2e}" for d in ds)
                  + ("" if ok else f" (tolerance {tol:.1e})") + " |", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
