//! OpenAI's response objects: `chat.completion` and its `chat.completion.chunk`s,
//! `text_completion`, `usage`, `logprobs` (the chat form and the legacy completions form) and
//! `tool_calls`. Built from the engine's events; no model code here beyond token spellings.

use crate::objects::{
    AssistantMessage, AssistantRole, ChatChoice, ChatCompletion, ChatLogprobs, ChatObject,
    ChatTokenLogprob, CompletionLogprobs, Finish, PromptTokensDetails, TextChoice, TextCompletion,
    TextObject, TopLogprob, Usage,
};
use pocket::constrain::tools::{parse_calls, CALL_OPEN};
use pocket::generate::FinishReason;
use pocket::loader::LoadedModel;
use pocket::serving::{Finished, TokenLogprob};
use serde_json::{json, Value};

/// Which endpoint an answer is for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Endpoint {
    Chat,
    Completion,
}

/// What every object of one answer repeats.
#[derive(Clone, Debug)]
pub struct Head {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub endpoint: Endpoint,
}

/// A build fingerprint, as OpenAI sends `system_fingerprint`: the pocket version and the
/// kernels the answers ran on (answers are deterministic per fingerprint and seed).
pub fn fingerprint(m: &LoadedModel) -> String {
    format!(
        "pocket-{}-{}",
        env!("CARGO_PKG_VERSION"),
        m.model.config.cpu.isa().name()
    )
}

impl Head {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.endpoint, chunk) {
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
            (Endpoint::Completion, _) => "text_completion",
        }
    }

    fn base(&self, chunk: bool, fp: &str) -> serde_json::Map<String, Value> {
        let mut o = serde_json::Map::new();
        o.insert("id".into(), json!(self.id));
        o.insert("object".into(), json!(self.object(chunk)));
        o.insert("created".into(), json!(self.created));
        o.insert("model".into(), json!(self.model));
        o.insert("system_fingerprint".into(), json!(fp));
        o
    }
}

/// A token's spelling: its bytes (a byte-level token may be part of a character) and that
/// text, lossily, as OpenAI reports `token` and `bytes`.
pub fn token_piece(m: &LoadedModel, id: u32) -> (String, Vec<u8>) {
    let bytes = match m.grammars() {
        // toktrie marks special tokens with a leading 0xFF: spell those by the tokenizer.
        Ok(g) => Some(g.token_bytes(id)).filter(|b| b.first() != Some(&0xFF) && !b.is_empty()),
        Err(_) => None,
    }
    .unwrap_or_else(|| m.tokenizer.decode(&[id], false).into_bytes());
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// One entry of a chat answer's `logprobs.content`.
pub fn chat_logprob(m: &LoadedModel, id: u32, lp: &TokenLogprob) -> ChatTokenLogprob {
    let (token, bytes) = token_piece(m, id);
    ChatTokenLogprob {
        token,
        logprob: lp.logprob,
        bytes,
        top_logprobs: lp
            .top
            .iter()
            .map(|&(t, logprob)| {
                let (token, bytes) = token_piece(m, t);
                TopLogprob {
                    token,
                    logprob,
                    bytes,
                }
            })
            .collect(),
    }
}

/// The legacy completions `logprobs` object for `tokens` (id and logprob) of `text`, which
/// starts at byte `offset` of the choice's text.
pub fn completion_logprobs(
    m: &LoadedModel,
    tokens: &[(u32, TokenLogprob)],
    mut offset: usize,
) -> CompletionLogprobs {
    let mut toks = Vec::new();
    let mut lps = Vec::new();
    let mut tops = Vec::new();
    let mut offsets = Vec::new();
    for (id, lp) in tokens {
        let (t, _) = token_piece(m, *id);
        offsets.push(offset);
        offset += t.len();
        toks.push(t);
        lps.push(lp.logprob);
        let mut top = serde_json::Map::new();
        for &(tid, l) in &lp.top {
            top.insert(token_piece(m, tid).0, json!(l));
        }
        tops.push(top);
    }
    CompletionLogprobs {
        tokens: toks,
        token_logprobs: lps,
        top_logprobs: tops,
        text_offset: offsets,
    }
}

pub fn usage(f: &Finished) -> Usage {
    Usage {
        prompt_tokens: f.prompt_tokens,
        completion_tokens: f.tokens.len(),
        total_tokens: f.prompt_tokens + f.tokens.len(),
        prompt_tokens_details: PromptTokensDetails {
            cached_tokens: f.cached_tokens,
        },
    }
}

/// OpenAI's reason: a full context is `length` too.
pub fn finish_reason(f: &Finished, called: bool) -> Finish {
    match f.reason {
        FinishReason::Stop if called => Finish::ToolCalls,
        FinishReason::Length | FinishReason::Context => Finish::Length,
        FinishReason::Stop | FinishReason::Interrupted => Finish::Stop,
    }
}

/// The calls in an answer (when tools were offered), as OpenAI's `tool_calls`, and the
/// answer's text without them.
pub struct Calls {
    pub content: String,
    pub calls: Vec<Value>,
}

pub fn split_calls(text: &str, tool_names: &[String], ids: &mut impl FnMut() -> String) -> Calls {
    if tool_names.is_empty() {
        return Calls {
            content: text.to_string(),
            calls: Vec::new(),
        };
    }
    let names: Vec<&str> = tool_names.iter().map(String::as_str).collect();
    let p = parse_calls(text, &names);
    Calls {
        content: p.content,
        calls: p
            .calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut call = c.openai(&ids());
                call["index"] = json!(i);
                call
            })
            .collect(),
    }
}

/// The non-streaming chat answer.
pub fn whole_chat(
    head: &Head,
    fp: &str,
    f: &Finished,
    text: String,
    calls: Vec<Value>,
    logprobs: Option<Vec<ChatTokenLogprob>>,
) -> ChatCompletion {
    let called = !calls.is_empty();
    ChatCompletion {
        id: head.id.clone(),
        object: ChatObject::ChatCompletion,
        created: head.created,
        model: head.model.clone(),
        system_fingerprint: fp.to_string(),
        choices: vec![ChatChoice {
            index: 0,
            message: AssistantMessage {
                role: AssistantRole::Assistant,
                content: (!called || !text.is_empty()).then_some(text),
                refusal: None,
                tool_calls: calls,
            },
            logprobs: logprobs.map(|content| ChatLogprobs {
                content,
                refusal: None,
            }),
            finish_reason: finish_reason(f, called),
        }],
        usage: Some(usage(f)),
    }
}

/// The non-streaming completion.
pub fn whole_text(
    head: &Head,
    fp: &str,
    f: &Finished,
    text: String,
    logprobs: Option<CompletionLogprobs>,
) -> TextCompletion {
    TextCompletion {
        id: head.id.clone(),
        object: TextObject::TextCompletion,
        created: head.created,
        model: head.model.clone(),
        system_fingerprint: fp.to_string(),
        choices: vec![TextChoice {
            index: 0,
            text,
            logprobs,
            finish_reason: finish_reason(f, false),
        }],
        usage: Some(usage(f)),
    }
}

/// One streamed chunk: a chat `delta` (or completions `text`), logprobs, and the finish
/// reason on the last. `usage: null` rides on every chunk when the client asked for usage.
pub fn chunk(
    head: &Head,
    fp: &str,
    delta: Value,
    logprobs: Option<Value>,
    finish: Option<&str>,
    usage_null: bool,
) -> Value {
    let mut o = head.base(true, fp);
    let choice = match head.endpoint {
        Endpoint::Chat => json!({"index": 0, "delta": delta,
            "logprobs": logprobs.map(|c| json!({"content": c, "refusal": null})),
            "finish_reason": finish}),
        Endpoint::Completion => json!({"index": 0,
            "text": delta.get("content").cloned().unwrap_or(json!("")),
            "logprobs": logprobs, "finish_reason": finish}),
    };
    o.insert("choices".into(), json!([choice]));
    if usage_null {
        o.insert("usage".into(), Value::Null);
    }
    Value::Object(o)
}

/// The closing chunk with `usage` (`stream_options.include_usage`): no choices.
pub fn usage_chunk(head: &Head, fp: &str, f: &Finished) -> Value {
    let mut o = head.base(true, fp);
    o.insert("choices".into(), json!([]));
    o.insert("usage".into(), json!(usage(f)));
    Value::Object(o)
}

/// Streamed text when tools are offered: text that may be (the start of) a call is held back,
/// so a call never reaches the client as `content`, and comes out as `tool_calls` at the end.
/// Held: everything from a `<tool_call>` (or a prefix of one at the end) on, and an answer
/// that starts as a bare JSON object or a code fence (a call small models write untagged).
#[derive(Default)]
pub struct CallFilter {
    shown: String,
    held: String,
    holding: bool,
}

impl CallFilter {
    /// Takes a piece of answer text; returns what can be shown now.
    pub fn push(&mut self, piece: &str) -> String {
        self.held.push_str(piece);
        if self.holding {
            return String::new();
        }
        let lead = format!("{}{}", self.shown, self.held);
        let start = lead.trim_start();
        if start.starts_with('{') || start.starts_with("```") {
            self.holding = true;
            return String::new();
        }
        let cut = match self.held.find(CALL_OPEN) {
            Some(at) => {
                self.holding = true;
                at
            }
            None => self.held.len() - partial_suffix(&self.held, CALL_OPEN),
        };
        // Whitespace waits until text follows it: the answer's `content` is trimmed.
        let cut = self.held[..cut].trim_end().len();
        let mut out: String = self.held.drain(..cut).collect();
        if self.shown.is_empty() {
            // As the answer's `content`, which is trimmed.
            out = out.trim_start().to_string();
        }
        self.shown.push_str(&out);
        out
    }

    /// What is left to show once the answer's `content` (without calls) is known.
    pub fn finish(&mut self, content: &str) -> String {
        let shown = self.shown.trim_start();
        match content.strip_prefix(shown) {
            Some(rest) if !shown.is_empty() || !content.is_empty() => rest.to_string(),
            _ => String::new(),
        }
    }
}

/// Length of the longest proper prefix of `pat` that `text` ends with.
fn partial_suffix(text: &str, pat: &str) -> usize {
    (1..pat.len())
        .rev()
        .find(|&k| text.ends_with(&pat[..k]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(pieces: &[&str], content: &str) -> String {
        let mut f = CallFilter::default();
        let mut out: String = pieces.iter().map(|p| f.push(p)).collect();
        out.push_str(&f.finish(content));
        out
    }

    #[test]
    fn calls_never_stream_as_content() {
        // Text, then a tagged call split across pieces: only the text is shown.
        let shown = run(
            &[
                "Let me",
                " check. <tool",
                "_call>\n{\"name\"",
                "}</tool_call>",
            ],
            "Let me check.",
        );
        assert_eq!(shown, "Let me check.");
        // A bare call object is held whole.
        assert_eq!(run(&[" {\"name\":", " \"f\"}"], ""), "");
        // Text that only looks like a tag's start is released.
        assert_eq!(run(&["a <to", "y> b"], "a <toy> b"), "a <toy> b");
        // An answer that turns out not to be a call is shown at the end.
        assert_eq!(run(&["{\"a\":", " 1}"], "{\"a\": 1}"), "{\"a\": 1}");
    }
}
