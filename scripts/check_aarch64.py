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


def run(argv, env, model, ids, n):
    cmd = argv + ["run", model, "--json", "--first-logits", "--temperature", "0",
                  "-n", str(n), "--prompt-ids", ",".join(map(str, ids))]
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
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    ids = [1, 504, 3458, 282, 4649, 314, 5891, 30, 2]
    bad = 0
    print("| model | level | ids = x86 best | max abs Δ first logits vs x86 best |")
    print("|---|---|---|---|")
    for m in a.models:
        res = {}
        for isa in X86:
            env = dict(os.environ, POCKET_ISA=isa)
            res[f"x86 {isa}"] = run([a.x86], env, m, ids, a.n)
        for cpu, isa in ARM:
            env = dict(os.environ, POCKET_ISA=isa, QEMU_CPU=cpu)
            res[f"aarch64 {isa}"] = run(["qemu-aarch64", "-L", "/", a.arm], env, m, ids, a.n)
        ref_l, ref_ids = res["x86 avx512"]
        diff = {k: max(abs(x - y) for x, y in zip(ref_l, v[0])) for k, v in res.items()}
        spread = max(diff[f"x86 {i}"] for i in X86)
        tol = max(1.5 * spread, 1e-4)
        for k, (l, g) in res.items():
            same = g == ref_ids
            ok = k.startswith("x86") or (same and diff[k] <= tol)
            bad += not ok
            print(f"| {os.path.basename(m)} | {k} | {'yes' if same else 'NO'} | "
                  f"{diff[k]:.2e}{'' if ok else ' (over ' + format(tol, '.1e') + ')'} |")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
