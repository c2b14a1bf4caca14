"""`pocket serve` against the official `openai` Python client, on a real model (SmolLM2-135M-
Instruct Q4_1 by default): every check is what an app or agent pipeline does with the client.

  - chat, streaming chat (deltas add up to the answer; usage in the last chunk), a completion;
  - greedy answers equal `pocket run --json` on the same messages, and `usage` equals the
    prompt and answer token counts pocket run reports (what actually ran);
  - `response_format` json_schema: every answer that ends by itself parses and validates under
    the `jsonschema` package (evals/data/structured/extraction.jsonl);
  - a tool call round trip: `tools` with tool_choice required, the call's arguments validated
    against the tool's parameters, the result sent back as a `tool` message, a final answer;
  - logprobs (one entry per answer token, greedy picks the top entry);
  - errors: the client's exception types and OpenAI's error fields for bad requests, an unknown
    model, a wrong API key;
  - the served `/openapi.json` (generated from the server's own types) against what the server
    does, by `jsonschema`: the bodies sent validate as the document's requests, a body the
    document refuses is refused, and each raw response validates as the document's response.

Usage: python scripts/check_serve.py --pocket target/release/pocket [--model GGUF]
Exit status 1 on the first failed check (it is named), 0 when all pass.
"""
import argparse
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import jsonschema
import openai
from openai import OpenAI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_common import ROOT, SMOLLM2, checks, ok, pocket_server  # noqa: E402

DATA = os.path.join(ROOT, "evals", "data", "structured")
KEY = "check-serve-key"
PROMPTS = [
    ("You are a concise assistant.", "What is the capital of France?"),
    (None, "Write a haiku about the sea."),
    ("Answer in one word.", "Is water wet?"),
    (None, "List three primary colors."),
]


def messages(system, user):
    m = [{"role": "system", "content": system}] if system else []
    return m + [{"role": "user", "content": user}]


def pocket_run(pocket, model, system, user, n):
    argv = [pocket, "run", model, "-p", user, "--temp", "0", "-n", str(n), "--json"]
    if system:
        argv += ["--system", system]
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def check_chat(client, pocket, model):
    for system, user in PROMPTS:
        ref = pocket_run(pocket, model, system, user, 48)
        r = client.chat.completions.create(model="model", messages=messages(system, user),
                                           temperature=0, max_tokens=48)
        c = r.choices[0]
        ok(c.message.content == ref["text"],
           f"greedy chat equals pocket run for {user!r}: {c.message.content!r} vs {ref['text']!r}")
        ok(r.usage.prompt_tokens == ref["prompt_tokens"],
           f"usage.prompt_tokens {r.usage.prompt_tokens} = pocket run's {ref['prompt_tokens']}")
        ok(r.usage.completion_tokens == ref["generated_tokens"],
           f"usage.completion_tokens {r.usage.completion_tokens} = {ref['generated_tokens']}")
        ok(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "total")
        want = {"stop": "stop", "length": "length", "context": "length"}[ref["finish_reason"]]
        ok(c.finish_reason == want, f"finish_reason {c.finish_reason} = {want}")
        # Streamed: the deltas add up to the same answer; usage on the closing chunk.
        stream = client.chat.completions.create(
            model="model", messages=messages(system, user), temperature=0, max_tokens=48,
            stream=True, stream_options={"include_usage": True})
        parts, usage, finish = [], None, None
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            for ch in chunk.choices:
                if ch.delta.content:
                    parts.append(ch.delta.content)
                finish = ch.finish_reason or finish
        ok("".join(parts) == ref["text"], f"streamed answer adds up for {user!r}")
        ok(usage is not None and usage.completion_tokens == ref["generated_tokens"],
           "streamed usage")
        ok(usage.prompt_tokens_details.cached_tokens > 0,
           "the resent conversation reused its cached prefix")
        ok(finish == want, "streamed finish_reason")
    print(f"chat: {len(PROMPTS)} greedy answers equal pocket run, streamed too, usage exact")


def check_completion(client, pocket, model):
    r = client.completions.create(model="model", prompt="The three primary colors are",
                                  max_tokens=20, temperature=0, logprobs=2)
    c = r.choices[0]
    ok(isinstance(c.text, str) and c.text, "completion text")
    ok(len(c.logprobs.tokens) == r.usage.completion_tokens, "one logprob per completion token")
    ok("".join(c.logprobs.tokens) == c.text, "the tokens spell the text")
    raw = subprocess.run([pocket, "run", model, "--raw", "-p", "The three primary colors are",
                          "--temp", "0", "-n", "20", "--json"], capture_output=True, text=True,
                         check=True)
    ref = json.loads(raw.stdout)
    ok(c.text == ref["text"], f"completion equals pocket run --raw: {c.text!r} vs {ref['text']!r}")
    ok(r.usage.prompt_tokens == ref["prompt_tokens"], "completion prompt_tokens")
    print("completion: equals pocket run --raw; logprobs spell the text")


def check_logprobs(client):
    r = client.chat.completions.create(model="model", messages=messages(None, "Say hello."),
                                       temperature=0, max_tokens=12, logprobs=True,
                                       top_logprobs=3)
    lp = r.choices[0].logprobs.content
    ok(len(lp) == r.usage.completion_tokens, "one logprobs entry per answer token")
    for e in lp:
        ok(len(e.top_logprobs) == 3, "top_logprobs has 3 entries")
        ok(e.token == e.top_logprobs[0].token, "greedy picks the most likely token")
        ok(e.logprob <= 0 and e.bytes is not None, "a logprob and the token's bytes")
    print(f"logprobs: {len(lp)} entries, greedy = top entry")


def check_schema(client):
    n = valid = cut = 0
    with open(os.path.join(DATA, "extraction.jsonl")) as f:
        cases = [json.loads(line) for line in f if line.strip()]
    for case in cases:
        r = client.chat.completions.create(
            model="model", messages=[{"role": "user", "content": case["prompt"]}],
            temperature=0, max_tokens=400,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "extract", "schema": case["schema"],
                                             "strict": True}})
        c = r.choices[0]
        n += 1
        if c.finish_reason == "length":
            cut += 1
            continue
        ok(c.finish_reason == "stop", f"{case['id']}: finish_reason {c.finish_reason}")
        obj = json.loads(c.message.content)
        jsonschema.validate(obj, case["schema"], cls=jsonschema.Draft202012Validator)
        valid += 1
    ok(valid > 0, "some schema answers ended by themselves")
    # json_object: any JSON object.
    r = client.chat.completions.create(
        model="model", messages=[{"role": "user", "content": "Describe a cat as JSON."}],
        temperature=0, max_tokens=200, response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        ok(isinstance(json.loads(r.choices[0].message.content), dict), "json_object is an object")
    print(f"json_schema: {valid} of {n} answers valid under jsonschema ({cut} cut at 400 tokens)")


def check_tools(client):
    with open(os.path.join(DATA, "tools.json")) as f:
        tools = json.load(f)
    params = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    with open(os.path.join(DATA, "tool_prompts.jsonl")) as f:
        prompts = [json.loads(line) for line in f if line.strip()][:6]
    for p in prompts:
        msgs = [{"role": "user", "content": p["prompt"]}]
        r = client.chat.completions.create(model="model", messages=msgs, tools=tools,
                                           tool_choice="required", temperature=0, max_tokens=200)
        c = r.choices[0]
        ok(c.finish_reason == "tool_calls", f"{p['id']}: finish_reason {c.finish_reason}")
        call = c.message.tool_calls[0]
        ok(call.id.startswith("call_") and call.type == "function", "call id and type")
        args = json.loads(call.function.arguments)
        jsonschema.validate(args, params[call.function.name])
        # The round trip: the call and its result go back; the model answers in text.
        msgs.append(c.message.model_dump(exclude_none=True))
        msgs.append({"role": "tool", "tool_call_id": call.id,
                     "content": json.dumps({"result": "ok", "detail": "22 C, sunny"})})
        r2 = client.chat.completions.create(model="model", messages=msgs, tools=tools,
                                            temperature=0, max_tokens=60)
        c2 = r2.choices[0]
        ok(c2.finish_reason in ("stop", "length", "tool_calls"), "second turn ends")
        ok(r2.usage.prompt_tokens > r.usage.prompt_tokens, "the second prompt holds the first")
        # The streamed form of the first request: calls arrive as tool_calls deltas, never as
        # content.
        stream = client.chat.completions.create(model="model", messages=msgs[:1], tools=tools,
                                                tool_choice="required", temperature=0,
                                                max_tokens=200, stream=True)
        content, calls, finish = "", [], None
        for chunk in stream:
            for ch in chunk.choices:
                content += ch.delta.content or ""
                calls += ch.delta.tool_calls or []
                finish = ch.finish_reason or finish
        ok("<tool_call>" not in content, "no call text in streamed content")
        ok(finish == "tool_calls" and calls and calls[0].function.name == call.function.name,
           "streamed tool call")
        ok(json.loads(calls[0].function.arguments) == args, "streamed arguments equal")
    print(f"tools: {len(prompts)} round trips (required call validated, result sent back, "
          "streamed calls equal)")


def check_errors(base, client):
    try:
        client.chat.completions.create(model="model", messages=messages(None, "hi"), n=2)
        ok(False, "n=2 refused")
    except openai.BadRequestError as e:
        ok(e.status_code == 400 and e.body and e.body.get("param") == "n", f"n=2: {e.body}")
    try:
        client.chat.completions.create(model="gpt-4o", messages=messages(None, "hi"))
        ok(False, "unknown model refused")
    except openai.NotFoundError as e:
        ok(e.body.get("code") == "model_not_found", f"unknown model: {e.body}")
    try:
        client.chat.completions.create(model="model", messages=[])
        ok(False, "empty messages refused")
    except openai.BadRequestError as e:
        ok(e.body.get("param") == "messages", f"empty messages: {e.body}")
    bad = OpenAI(base_url=base + "/v1", api_key="wrong", max_retries=0)
    try:
        bad.models.list()
        ok(False, "wrong key refused")
    except openai.AuthenticationError as e:
        ok(e.status_code == 401, "401")
    models = client.models.list()
    ok([m.id for m in models.data] == ["model"], "models.list")
    print("errors: BadRequestError / NotFoundError / AuthenticationError with OpenAI's fields")


def http(base, method, path, body=None, key=KEY):
    """(status, parsed JSON body) of one raw request."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method, headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def check_openapi(base):
    """The document the server publishes describes what it does: requests it answers validate
    as its request schemas, one it refuses does not, and every response validates as the
    document's schema for that operation and status (jsonschema, draft 2020-12)."""
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012
    status, doc = http(base, "GET", "/openapi.json")
    ok(status == 200 and doc.get("openapi", "").startswith("3.1"), f"/openapi.json: {status}")
    reg = Registry().with_resource("urn:doc", Resource.from_contents(
        doc, default_specification=DRAFT202012))

    def valid(schema_ref, value):
        v = jsonschema.Draft202012Validator({"$ref": "urn:doc" + schema_ref}, registry=reg)
        errs = sorted(v.iter_errors(value), key=lambda e: list(e.path))
        return [f"{list(e.path)}: {e.message}" for e in errs]

    def response_ref(path, method, code):
        r = doc["paths"][path][method]["responses"][str(code)]
        return "#" + "/".join(["", "paths", path.replace("/", "~1"), method, "responses",
                               str(code), "content", "application~1json", "schema"]) \
            if "content" in r else None

    cases = [
        ("/v1/chat/completions", {"model": "model", "max_tokens": 8, "temperature": 0,
                                  "messages": messages("Be brief.", "Name a color.")}, 200),
        ("/v1/chat/completions", {"model": "model", "max_tokens": 8, "logprobs": True,
                                  "top_logprobs": 2, "stop": ["\n"], "seed": 3,
                                  "messages": [{"role": "user", "content": [
                                      {"type": "text", "text": "Say hi."}]}]}, 200),
        ("/v1/completions", {"model": "model", "prompt": "The sky is", "max_tokens": 6,
                             "logprobs": 2, "echo": False}, 200),
        ("/v1/completions", {"model": "model", "prompt": [[1, 2, 3]], "max_tokens": 2}, 200),
        ("/v1/chat/completions", {"model": "model", "messages": [{"role": "bot",
                                                                  "content": "x"}]}, 400),
        ("/v1/chat/completions", {"model": "model", "temperature": 3,
                                  "messages": messages(None, "hi")}, 400),
        ("/v1/completions", {"model": "model"}, 400),
    ]
    request_ref = {"/v1/chat/completions": "#/components/schemas/ChatRequest",
                   "/v1/completions": "#/components/schemas/CompletionRequest"}
    for path, body, want in cases:
        errs = valid(request_ref[path], body)
        ok(not errs if want == 200 else bool(errs),
           f"{path} {json.dumps(body)[:80]}: the document {'refuses' if errs else 'accepts'} it "
           f"({errs[:2]}), the server should answer {want}")
        status, got = http(base, "POST", path, body)
        ok(status == want, f"{path}: {status}, want {want}: {got}")
        ref = response_ref(path, "post", status)
        errs = valid(ref, got)
        ok(not errs, f"{path} {status} response against the document: {errs[:3]}")
    for path, key, want in [("/v1/models", KEY, 200), ("/v1/models/model", KEY, 200),
                            ("/v1/models/other", KEY, 404), ("/v1/models", "wrong", 401),
                            ("/health", KEY, 200), ("/lora-adapters", KEY, 200)]:
        status, got = http(base, "GET", path, key=key)
        ok(status == want, f"GET {path}: {status}, want {want}")
        doc_path = "/v1/models/{id}" if path.startswith("/v1/models/") else path
        errs = valid(response_ref(doc_path, "get", status), got)
        ok(not errs, f"GET {path} {status} against the document: {errs[:3]}")
    print(f"openapi: {len(cases)} requests and 6 GETs, each as the served document says")


def check_default_budget(client):
    """A request without max_tokens gets --max-tokens-default (64 here), not the context."""
    r = client.chat.completions.create(
        model="model", messages=messages(None, "Count from 1 to 500, one number per line."),
        temperature=0)
    ok(r.usage.completion_tokens == 64 and r.choices[0].finish_reason == "length",
       f"no max_tokens: cut at --max-tokens-default ({r.usage.completion_tokens} tokens, "
       f"{r.choices[0].finish_reason})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pocket", default=os.path.join(ROOT, "target/release/pocket"))
    ap.add_argument("--model", default=SMOLLM2)
    a = ap.parse_args()
    with pocket_server(a.pocket, a.model, "--parallel", "4", "--max-tokens-default", "64",
                       api_key=KEY) as srv:
        client = OpenAI(base_url=srv.base + "/v1", api_key=KEY, max_retries=0, timeout=300)
        check_chat(client, a.pocket, a.model)
        check_completion(client, a.pocket, a.model)
        check_logprobs(client)
        check_schema(client)
        check_tools(client)
        check_errors(srv.base, client)
        check_default_budget(client)
        check_openapi(srv.base)
        code = srv.terminate()
        ok(code == 0, f"exit status after SIGTERM: {code}")
        ok(KEY not in srv.log(), "the API key is not logged")
    print(f"check_serve: {checks[0]} checks passed (openai {openai.__version__})")


if __name__ == "__main__":
    main()
