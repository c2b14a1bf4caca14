#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora (fuzz/seeds/<target>/) from small real files.

Micro checkpoints (1 layer, hidden 64, vocab 384, bf16) of each supported family are written
here with the standard library only; the .pocket and GGUF seeds are made from them by `pocket
export` itself. Usage: python3 fuzz/make_seeds.py [path/to/pocket]
"""
import json, os, random, shutil, struct, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEEDS = os.path.join(ROOT, "fuzz", "seeds")
POCKET = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "release", "pocket")
TINY = os.path.join(ROOT, "fixtures", "tiny", "qwen3-tiny")
H, HEADS, KV, HD, FFN, VOCAB = 64, 2, 1, 32, 64, 384


def bf16(n, rng, scale=0.05):
    out = bytearray()
    for _ in range(n):
        out += struct.pack("<f", rng.gauss(0, scale))[2:]
    return bytes(out)


def safetensors(tensors):
    header, blobs, off = {}, [], 0
    for name, shape, data in tensors:
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def checkpoint(family, rng):
    cfg = {
        "architectures": [{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[family]],
        "model_type": family, "hidden_size": H, "intermediate_size": FFN, "num_hidden_layers": 1,
        "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": HD,
        "vocab_size": VOCAB, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2,
        "hidden_act": "silu", "torch_dtype": "bfloat16",
    }
    if family == "llama":
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
    t = [("model.embed_tokens.weight", [VOCAB, H], bf16(VOCAB * H, rng)),
         ("model.norm.weight", [H], bf16(H, rng, 1.0))]
    p = "model.layers.0."
    for name, rows, cols in [("self_attn.q_proj", HEADS * HD, H), ("self_attn.k_proj", KV * HD, H),
                             ("self_attn.v_proj", KV * HD, H), ("self_attn.o_proj", H, HEADS * HD),
                             ("mlp.gate_proj", FFN, H), ("mlp.up_proj", FFN, H), ("mlp.down_proj", H, FFN)]:
        t.append((p + name + ".weight", [rows, cols], bf16(rows * cols, rng)))
        if family == "qwen2" and name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
            t.append((p + name + ".bias", [rows], bf16(rows, rng)))
    t += [(p + "input_layernorm.weight", [H], bf16(H, rng, 1.0)),
          (p + "post_attention_layernorm.weight", [H], bf16(H, rng, 1.0))]
    if family == "qwen3":
        t += [(p + "self_attn.q_norm.weight", [HD], bf16(HD, rng, 1.0)),
              (p + "self_attn.k_norm.weight", [HD], bf16(HD, rng, 1.0))]
    return json.dumps(cfg, indent=1).encode(), safetensors(t)


def put(target, name, data):
    d = os.path.join(SEEDS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    rng = random.Random(0)
    shutil.rmtree(SEEDS, ignore_errors=True)
    work = tempfile.mkdtemp()
    template = open(os.path.join(TINY, "chat_template.jinja"), "rb").read()
    for family in ["llama", "qwen2", "qwen3"]:
        cfg, weights = checkpoint(family, rng)
        put("hf_checkpoint", family, struct.pack("<H", len(cfg)) + cfg + weights)
        d = os.path.join(work, family)
        os.makedirs(d)
        open(os.path.join(d, "config.json"), "wb").write(cfg)
        open(os.path.join(d, "model.safetensors"), "wb").write(weights)
        for f in ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"]:
            shutil.copy(os.path.join(TINY, f), d)
        exports = [("pocket_file", f"{family}-q4", ["--calib", "none"]),
                   ] + ([("pocket_file", "llama-f16", ["--quant", "f16"])] if family == "llama" else []) + [
                   ("gguf_file", f"{family}-q8_0", ["--format", "gguf", "--quant", "q8_0"])]
        if family == "llama":
            exports.append(("pocket_file", "llama-f16", ["--quant", "f16"]))
            exports.append(("gguf_file", "llama-q4_0", ["--format", "gguf", "--quant", "q4_0", "--calib", "none"]))
        for target, name, args in exports:
            out = os.path.join(work, name + (".gguf" if "gguf" in args else ".pocket"))
            subprocess.run([POCKET, "export", d, "-o", out, "--json"] + args, check=True,
                           stdout=subprocess.DEVNULL)
            data = open(out, "rb").read()
            put(target, name, data)
            if target == "gguf_file":
                put("gguf_tokenizer", name, data)
    # Chat templates: the fixtures' real ones and a few hostile shapes.
    for fam in ["llama-tiny", "qwen2-tiny", "qwen3-tiny"]:
        put("chat_template", fam, open(os.path.join(ROOT, "fixtures", "tiny", fam, "chat_template.jinja"), "rb").read())
    smol = os.path.join(ROOT, "models", "smollm2-135m-instruct", "chat_template.jinja")
    if os.path.exists(smol):
        put("chat_template", "smollm2", open(smol, "rb").read())
    put("chat_template", "recursion", b"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")
    put("chat_template", "loops", b"{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}")
    put("chat_template", "growth", b"{% set s = namespace(x='ab') %}{% for i in range(64) %}{% set s.x = s.x ~ s.x %}{% endfor %}{{ s.x }}")
    put("chat_template", "json", b"{{ messages | tojson(indent=2) }}{{ raise_exception('no') if not messages }}{{ strftime_now('%Y-%m-%d %A') }}")
    shutil.rmtree(work)
    structured_seeds()


def structured_seeds():
    """Schemas, grammars, regexes, tools and choices: a selector byte (fuzz/src/inputs.rs,
    split_structured), then the text."""
    kinds = {"--json-schema": 0, "--grammar": 1, "--regex": 2, "--tools": 3, "--choices": 4}
    def sput(name, flag, text):
        put("structured", name, bytes([kinds[flag]]) + text.encode())
    data = os.path.join(ROOT, "evals", "data", "structured")
    for line in open(os.path.join(data, "extraction.jsonl"), encoding="utf-8"):
        case = json.loads(line)
        if case["id"] in ("en_contact_signature", "zh_train_ticket", "en_invoice", "zh_express_address", "en_recipe_ingredients"):
            sput("schema-" + case["id"], "--json-schema", json.dumps(case["schema"], ensure_ascii=False))
    sput("schema-refs", "--json-schema", json.dumps({"$defs": {"p": {"type": "object", "properties": {"n": {"$ref": "#/$defs/p"}}}}, "$ref": "#/$defs/p"}))
    sput("schema-oneof", "--json-schema", json.dumps({"oneOf": [{"type": "string"}, {"type": "integer", "minimum": -3, "maximum": 3}]}))
    sput("lark", "--grammar", 'start: item ("," item)*\nitem: /[a-z]+/ | NUM | "红"\nNUM: /[0-9]{1,3}/\n')
    sput("lark-json", "--grammar", 'start: "<a>" obj "</a>"\nobj: %json {"type": "object", "properties": {"x": {"type": "integer"}}}\n')
    sput("gbnf", "--grammar", 'root ::= item ("," item)*\nitem ::= [a-z]+ | "\\u00e9" | ("x" | "y"){2,4}\n# comment\n')
    sput("regex", "--regex", r"(\+1 )?\d{3}-\d{4}|[A-Z]{2,}")
    sput("tools", "--tools", open(os.path.join(data, "tools.json"), encoding="utf-8").read())
    sput("choices", "--choices", "set_alarm,weather,天气,other")


if __name__ == "__main__":
    main()
