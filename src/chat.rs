//! A multi-turn conversation over one KV cache: the state behind `pocket run`'s chat, free of
//! any terminal code so it can be tested and reused.
//!
//! Each turn re-renders the whole conversation through the chat template and runs only the
//! tokens after the longest prefix shared with what the cache already holds. Re-rendering
//! (rather than appending tokens) keeps the prompt exactly what the template would produce
//! from scratch, so an answer does not depend on whether the cache was reused; the shared
//! prefix makes that cheap.

use crate::chat_template::Message;
use crate::constrain::tools::{parse_calls, ToolCall};
use crate::constrain::AnswerFormat;
use crate::generate::common_prefix;
use crate::generate::{generate_text_with, Assist, Control, Generation, StopAt};
use crate::loader::LoadedModel;
use crate::model::State;
use crate::sampler::{Sampler, SamplerConfig};
use crate::speculate::Speculator;
use crate::Error;
use serde::{Deserialize, Serialize};

/// Settings a user can change during a chat; saved with the conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChatSettings {
    #[serde(flatten)]
    pub sampler: SamplerConfig,
    /// Most tokens per answer.
    pub max_tokens: usize,
    /// Texts that end an answer (not shown, not kept).
    pub stop: Vec<String>,
}

impl Default for ChatSettings {
    fn default() -> Self {
        ChatSettings {
            sampler: SamplerConfig::default(),
            max_tokens: 512,
            stop: Vec::new(),
        }
    }
}

/// A conversation as saved by `/save` and read by `/load`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Transcript {
    pub system: Option<String>,
    /// User and assistant messages in order (the system prompt is kept apart).
    pub messages: Vec<Message>,
    pub settings: ChatSettings,
}

/// What one turn did.
#[derive(Debug)]
pub struct Turn {
    pub generation: Generation,
    /// The answer as kept in the conversation (cut before a stop string).
    pub text: String,
    /// Prompt tokens run this turn (= `generation.prefill_tokens`).
    pub prefilled: usize,
    /// Prompt tokens taken from the KV cache instead of being run again.
    pub reused: usize,
    /// Oldest turns dropped so the conversation fits the context.
    pub dropped_turns: usize,
    /// Cached positions a context shift dropped (their turns' tokens) while the turns after
    /// them stayed in the cache, moved down (0 without `context_shift`, or when the shift could
    /// not apply and the kept turns ran again).
    pub shifted: usize,
    /// Positions in the KV cache after the answer.
    pub context_used: usize,
    /// Tools the answer called (when tools are offered), parsed out of its text.
    pub tool_calls: Vec<ToolCall>,
    /// False when the answer stopped (a limit, Ctrl-C) before completing its constraint.
    pub complete: bool,
}

pub struct ChatSession<'m> {
    model: &'m LoadedModel,
    system: Option<String>,
    messages: Vec<Message>,
    pub settings: ChatSettings,
    /// Plain-text continuation for base models: the messages are concatenated, no template.
    raw: bool,
    state: State,
    /// The token ids whose keys and values are in `state.cache`, position by position.
    cached: Vec<u32>,
    /// The shape every answer takes from now on (a schema, choices, tools), until changed.
    pub format: AnswerFormat,
    /// Speculative decoding for free answers (the same answers, fewer passes); answers under a
    /// constraint decode without it.
    pub speculate: Option<Speculator<'m>>,
    /// When the oldest turns must go: shift the KV cache (`Model::shift_cache`) instead of
    /// running the kept turns again. Faster on a long conversation; the kept turns keep what
    /// they computed with the dropped ones before them, so answers can differ from a fresh
    /// encoding (which is what the default does).
    pub context_shift: bool,
}

impl<'m> ChatSession<'m> {
    /// A conversation with room for `context` positions (at most the model's maximum).
    pub fn new(model: &'m LoadedModel, context: usize, settings: ChatSettings) -> ChatSession<'m> {
        let context = context.min(model.model.spec.max_position_embeddings).max(1);
        ChatSession {
            model,
            system: None,
            messages: Vec::new(),
            settings,
            raw: false,
            state: model.model.new_state(context),
            cached: Vec::new(),
            format: AnswerFormat::default(),
            speculate: None,
            context_shift: false,
        }
    }

    /// Reports each prompt's prefill progress (see [`State::on_prefill`]).
    pub fn set_prefill_progress(&mut self, f: Box<dyn FnMut(usize, usize) + Send>) {
        self.state.on_prefill = Some(f);
    }

    /// Base-model mode: each turn continues the plain text of everything so far.
    pub fn set_raw(&mut self, raw: bool) {
        self.raw = raw;
    }

    /// Sets (or clears) the system prompt and starts the conversation over: earlier answers
    /// were written under the old one.
    pub fn set_system(&mut self, system: Option<String>) {
        self.system = system;
        self.reset();
    }

    /// The model this conversation runs on.
    pub fn model(&self) -> &'m LoadedModel {
        self.model
    }

    pub fn system(&self) -> Option<&str> {
        self.system.as_deref()
    }

    /// The system prompt the chat template puts in when the conversation sets none
    /// ([`LoadedModel::template_system_prompt`]); `None` with a system prompt of our own, in
    /// plain-text mode, or when the template adds none.
    pub fn template_system(&self) -> Option<String> {
        match self.system.is_some() || self.raw {
            true => None,
            false => self.model.template_system_prompt(),
        }
    }

    /// Forgets the messages, keeps the system prompt and settings. The KV cache is kept: the
    /// next turn reuses whatever prefix (e.g. the system prompt) still matches.
    pub fn reset(&mut self) {
        self.messages.clear();
    }

    /// The KV cache (what it holds, its bytes).
    pub fn cache(&self) -> &crate::kv_cache::KvCache {
        &self.state.cache
    }

    /// The token ids whose keys and values the cache holds, position by position.
    pub fn cached_ids(&self) -> &[u32] {
        &self.cached
    }

    /// User and assistant messages so far.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Context positions in use (the KV cache) and available in all.
    pub fn context(&self) -> (usize, usize) {
        (self.state.cache.len(), self.state.cache.capacity())
    }

    pub fn transcript(&self) -> Transcript {
        Transcript {
            system: self.system.clone(),
            messages: self.messages.clone(),
            settings: self.settings.clone(),
        }
    }

    /// Replaces the conversation and settings with a saved one. A leading system message is
    /// taken as the system prompt; other roles must be `user` or `assistant`.
    pub fn restore(&mut self, t: Transcript) -> Result<(), Error> {
        t.settings.sampler.validate().map_err(Error::Invalid)?;
        let mut system = t.system;
        let mut messages = t.messages;
        if system.is_none() && messages.first().is_some_and(|m| m.role == "system") {
            system = Some(messages.remove(0).content);
        }
        if let Some(m) = messages
            .iter()
            .find(|m| !matches!(m.role.as_str(), "user" | "assistant" | "tool"))
        {
            return Err(Error::Invalid(format!(
                "message role {:?}: expected \"user\", \"assistant\" or \"tool\"",
                m.role
            )));
        }
        self.system = system;
        self.messages = messages;
        self.settings = t.settings;
        Ok(())
    }

    /// Adds `user` and answers it, streaming the answer through `on_text` (return
    /// [`Control::Stop`] to interrupt; the partial answer is kept). On error the conversation
    /// is as it was before the call.
    pub fn turn(
        &mut self,
        user: &str,
        on_text: impl FnMut(&str) -> Control,
    ) -> Result<Turn, Error> {
        self.turn_noting(user, |_| {}, on_text)
    }

    /// [`turn`](Self::turn), calling `on_fit` with the number of oldest turns dropped to fit
    /// the context once that is known, before the answer starts, so a front end can say so
    /// before the text it affects.
    pub fn turn_noting(
        &mut self,
        user: &str,
        on_fit: impl FnOnce(usize),
        on_text: impl FnMut(&str) -> Control,
    ) -> Result<Turn, Error> {
        self.respond(Message::new("user", user), on_fit, on_text)
    }

    /// Gives the model tool `name`'s result (`content`, usually JSON) for its last call and
    /// lets it continue, as [`turn_noting`](Self::turn_noting) does for a user message.
    pub fn tool_result(
        &mut self,
        name: &str,
        content: &str,
        on_fit: impl FnOnce(usize),
        on_text: impl FnMut(&str) -> Control,
    ) -> Result<Turn, Error> {
        let mut m = Message::new("tool", content);
        m.name = Some(name.to_string());
        self.respond(m, on_fit, on_text)
    }

    fn respond(
        &mut self,
        message: Message,
        on_fit: impl FnOnce(usize),
        on_text: impl FnMut(&str) -> Control,
    ) -> Result<Turn, Error> {
        let mut guide = self
            .model
            .guide_for(&self.format)
            .map_err(|e| Error::Invalid(e.0))?;
        self.messages.push(message);
        let before = self.messages.clone();
        let (ids, dropped_turns) = match self.fit_context() {
            Ok(fit) => fit,
            Err(e) => {
                self.messages = before;
                self.messages.pop();
                return Err(e);
            }
        };
        on_fit(dropped_turns);
        let shifted = if self.context_shift && dropped_turns > 0 {
            self.shift_to(&ids)
        } else {
            0
        };
        // At least one token must run to get logits for the first answer token.
        // A sliding-window ring may not go back that far: then the cache starts over.
        let reused = self
            .state
            .cache
            .truncate(common_prefix(&self.cached, &ids).min(ids.len() - 1));
        self.cached.truncate(reused);
        // A fresh sampler per turn: the same conversation and settings give the same answer,
        // whether it was typed, loaded, or replayed with an empty cache.
        let mut sampler = Sampler::new(self.settings.sampler.clone());
        sampler.set_history(&ids[..reused]);
        let stop = StopAt {
            ids: &self.model.stop_ids,
            strings: &self.settings.stop,
            max_tokens: self.settings.max_tokens.max(1),
        };
        let assist = Assist {
            speculate: if guide.is_none() {
                self.speculate.as_mut()
            } else {
                None
            },
            guide: guide.as_mut(),
            context: &ids[..reused],
        };
        let result = generate_text_with(
            &self.model.model,
            &self.model.tokenizer,
            &mut self.state,
            &ids[reused..],
            &mut sampler,
            &stop,
            assist,
            on_text,
        );
        let out = match result {
            Ok(out) => out,
            Err(e) => {
                // The cache may hold part of this turn: forget it rather than trust it.
                let kept = self.state.cache.truncate(reused);
                self.cached.truncate(kept);
                self.messages = before;
                self.messages.pop();
                return Err(e);
            }
        };
        let complete = out.complete;
        let mut answer = Message::new("assistant", &out.text);
        let mut tool_calls = Vec::new();
        if !self.format.offered_tools().is_empty() {
            let names: Vec<&str> = self.format.tools.iter().map(|t| t.name.as_str()).collect();
            let parsed = parse_calls(&out.text, &names);
            answer.content = parsed.content;
            answer.tool_calls = parsed
                .calls
                .iter()
                .map(|c| {
                    serde_json::json!({"type": "function",
                        "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect();
            tool_calls = parsed.calls;
        }
        self.messages.push(answer);
        self.cached = ids;
        self.cached.extend(&out.generation.tokens);
        self.cached.truncate(self.state.cache.len());
        Ok(Turn {
            prefilled: out.generation.prefill_tokens,
            reused,
            dropped_turns,
            shifted,
            context_used: self.state.cache.len(),
            tool_calls,
            complete,
            text: out.text,
            generation: out.generation,
        })
    }

    /// Shifts the cache so it holds a prefix of `ids`: the cached prefix both share stays, the
    /// cached tokens up to where the cache continues `ids` again (the dropped turns) leave, and
    /// what matches after them moves down. Returns the positions dropped, or 0 (nothing changed) when no
    /// such splice exists (a template that renders kept turns differently once earlier ones
    /// are gone) or the cache cannot shift (a sliding-window ring).
    fn shift_to(&mut self, ids: &[u32]) -> usize {
        let a = common_prefix(&self.cached, ids);
        if a >= ids.len() {
            return 0;
        }
        // The cached position after `a` from which the cache continues ids[a..] the longest:
        // candidates start with ids[a] (a turn's opening token), a few per conversation. The
        // cache's tail past that match (the last answer's end, as the template renders it
        // differently) is dropped first and runs again.
        let best = (a + 1..self.cached.len())
            .filter(|&b| self.cached[b] == ids[a])
            .map(|b| (common_prefix(&self.cached[b..], &ids[a..]), b))
            .max_by_key(|&(m, b)| (m, std::cmp::Reverse(b)));
        let Some((m, b)) = best else {
            return 0;
        };
        if self.state.cache.truncate(b + m) != b + m {
            self.cached.truncate(self.state.cache.len());
            return 0;
        }
        self.cached.truncate(b + m);
        if !self.model.model.shift_cache(&mut self.state, a, b - a) {
            return 0;
        }
        self.cached.drain(a..b);
        b - a
    }

    /// The prompt ids of the conversation so far, ready for an answer.
    pub fn prompt_ids(&self) -> Result<Vec<u32>, Error> {
        if self.raw {
            let mut text = self.system.clone().unwrap_or_default();
            for m in &self.messages {
                text.push_str(&m.content);
            }
            return self.model.tokenizer.encode(&text, true);
        }
        let mut all = Vec::with_capacity(self.messages.len() + 1);
        if let Some(s) = &self.system {
            all.push(Message::new("system", s));
        }
        all.extend(self.messages.iter().cloned());
        self.model.encode_answer_prompt(&self.format, &all)
    }

    /// Drops the oldest turns until the prompt leaves room for an answer; the system prompt
    /// and the newest user message always stay, and whole turns go, never half of one.
    fn fit_context(&mut self) -> Result<(Vec<u32>, usize), Error> {
        let capacity = self.state.cache.capacity();
        // Room kept for the answer: its budget, but at most half the context so a long
        // budget does not empty a short context.
        let reserve = self.settings.max_tokens.min(capacity / 2);
        let mut dropped = 0;
        loop {
            let ids = self.prompt_ids()?;
            if ids.is_empty() {
                return Err(Error::Invalid("the prompt has no tokens".into()));
            }
            if ids.len() + reserve <= capacity {
                return Ok((ids, dropped));
            }
            // The oldest turn runs from index 0 to the next user message; the newest message
            // is a user message, so it is never part of the oldest turn.
            let next_user = self.messages[1..]
                .iter()
                .position(|m| m.role == "user")
                .map(|i| i + 1);
            match next_user {
                Some(i) => {
                    self.messages.drain(..i);
                    dropped += 1;
                }
                _ if ids.len() < capacity => return Ok((ids, dropped)),
                _ => {
                    return Err(Error::Invalid(format!(
                        "the message needs {} tokens with the system prompt, but the context \
                         holds {capacity}: shorten it or raise --ctx",
                        ids.len()
                    )))
                }
            }
        }
    }
}
