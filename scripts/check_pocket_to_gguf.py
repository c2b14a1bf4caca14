#!/usr/bin/env python3
"""One quantization, two formats: export a .pocket (Q4 blocks of 32 or 64) to GGUF Q4_0/Q4_1
with pocket, then check with gguf-py (llama.cpp's own reader) that every weight of the GGUF
dequantizes bit for bit to the .pocket's value. Reports the blocks that differ.
Usage: check_pocket_to_gguf.py POCKET_BIN MODEL.pocket OUT.gguf q4_1|q4_0   (venv with gguf)
"""
import json
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def main(bin_, pocket_file, out, quant):
    subprocess.run([bin_, "export", pocket_file, "-o", out, "--format", "gguf", "--quant", quant], check=True)
    info = json.loads(subprocess.run([bin_, "inspect", pocket_file, "--json"], check=True, capture_output=True, text=True).stdout)
    spec = info["spec"]
    hf_names = {t["name"]: t for t in info["tensors"]}
    parts = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate",
             "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}

    def gguf_name(n):
        if n in fixed:
            return fixed[n]
        layer, rest = n[len("model.layers."):].split(".", 1)
        module, kind = rest.rsplit(".", 1)
        return f"blk.{layer}.{parts[module]}.{kind}"

    reader = GGUFReader(out)
    by_name = {t.name: t for t in reader.tensors}
    total_blocks = bad_blocks = 0
    with tempfile.TemporaryDirectory() as td:
        for n, t in hf_names.items():
            if not t["dtype"].startswith("q4"):
                continue
            subprocess.run([bin_, "inspect", pocket_file, "--dump", n, "--to", td + "/x.f32"], check=True)
            ours = np.fromfile(td + "/x.f32", dtype=np.float32).reshape(t["shape"])
            g = by_name[gguf_name(n)]
            ref = dequantize(g.data, g.tensor_type).astype(np.float32).reshape(t["shape"])
            if spec["family"] == "llama" and ("q_proj" in n or "k_proj" in n):
                heads = spec["num_heads"] if "q_proj" in n else spec["num_kv_heads"]
                # GGUF rows are llama.cpp's interleaved order: undo it.
                ref = ref.reshape(heads, ref.shape[0] // heads // 2, 2, -1).swapaxes(1, 2).reshape(ref.shape)
            diff = (ours.view(np.uint32) != ref.view(np.uint32)).reshape(ours.shape[0], -1, 32).any(axis=2)
            total_blocks += diff.size
            bad_blocks += int(diff.sum())
    print(f"{out}: {total_blocks} Q4 blocks of 32; {bad_blocks} differ from the .pocket (gguf-py's dequantization)")
    sys.exit(0 if bad_blocks == 0 else 1)


if __name__ == "__main__":
    main(*sys.argv[1:])
