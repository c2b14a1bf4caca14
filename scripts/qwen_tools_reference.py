"""Renders conversations with tools through Qwen2.5's chat template (from the Qwen2.5-Coder
GGUF; fixtures/qwen2.5-tools/chat_template.jinja) with transformers' apply_chat_template, the
reference for pocket's `tools` rendering (tests/engine/structured.rs). Writes
fixtures/qwen2.5-tools/reference.json.

Usage: .venv/bin/python scripts/qwen_tools_reference.py"""
import json
import os

from transformers import PreTrainedTokenizerFast

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "fixtures", "qwen2.5-tools")

tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(ROOT, "fixtures", "tiny", "qwen2-tiny", "tokenizer.json"))
template = open(os.path.join(FIX, "chat_template.jinja"), encoding="utf-8").read()
tools = json.load(open(os.path.join(ROOT, "evals", "data", "structured", "tools.json"), encoding="utf-8"))
call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "巴黎", "unit": "celsius"}}}
cases = [
    {"name": "tools offered", "messages": [{"role": "user", "content": "What's the weather in Paris?"}]},
    {"name": "system prompt and tools", "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Wake me at 7."}]},
    {"name": "call, result, answer", "messages": [
        {"role": "user", "content": "巴黎天气怎么样？"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "get_weather", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "21 °C and clear."},
        {"role": "user", "content": "Thanks"}]},
    {"name": "two results in a row", "messages": [
        {"role": "user", "content": "Weather in Oslo and Rome?"},
        {"role": "assistant", "content": "Checking both.", "tool_calls": [call, call]},
        {"role": "tool", "name": "get_weather", "content": "{\"temp\": 3}"},
        {"role": "tool", "name": "get_weather", "content": "{\"temp\": 19}"}]},
]
out = []
for c in cases:
    for with_tools in (True, False):
        text = tok.apply_chat_template(c["messages"], tools=tools if with_tools else None,
                                       chat_template=template, tokenize=False,
                                       add_generation_prompt=True)
        out.append({"name": c["name"], "tools": with_tools, "messages": c["messages"], "rendered": text})
json.dump({"tools": tools, "cases": out}, open(os.path.join(FIX, "reference.json"), "w", encoding="utf-8"),
          ensure_ascii=False, indent=1)
print(f"{len(out)} renderings")
