//! The engine as the evals crate sees it: next-token logits with a rewindable context
//! ([`LogitModel`]), the harness's tokenization ([`Tokenize`]) and greedy generation until stop
//! strings ([`TextGenerator`]). Built on pocket's public API only.

use pocket::batch::{generate_text_queue, BatchItem};
use pocket::chat_template::Message;
use pocket::constrain::{Constraint, Guide};
use pocket::generate::{generate_text_with, Assist, Control, StopAt};
use pocket::loader::LoadedModel;
use pocket::model::{Logits, State};
use pocket::sampler::{Sampler, SamplerConfig};
use pocket::speculate::{SpecStats, Speculator};
use pocket_evals::{AnswerConstraint, GenRequest, LogitModel, Prompt, TextGenerator, Tokenize};

pub struct Engine<'m> {
    pub m: &'m LoadedModel,
    pub state: State,
    /// One state per sequence of a generation batch (made on first use).
    slots: Vec<State>,
    ctx: usize,
    /// Generated tokens and decode time, summed over requests.
    pub generated_tokens: usize,
    pub decode_seconds: f64,
    /// Prompt tokens of the batched requests, and those run (the rest came from a prompt
    /// they share their beginning with).
    pub prompt_tokens: usize,
    pub prompt_tokens_run: usize,
    /// Speculative decoding for one-at-a-time generation, and what it did over the requests.
    pub speculate: Option<Speculator<'m>>,
    pub speculation: SpecStats,
}

impl<'m> Engine<'m> {
    /// An engine whose context holds at most `ctx` positions.
    pub fn new(m: &'m LoadedModel, ctx: usize) -> Engine<'m> {
        Engine {
            m,
            state: m.model.new_state(ctx),
            slots: Vec::new(),
            ctx,
            generated_tokens: 0,
            decode_seconds: 0.0,
            prompt_tokens: 0,
            prompt_tokens_run: 0,
            speculate: None,
            speculation: SpecStats::default(),
        }
    }
}

/// The model's tokenizer used the way lm-eval's HF model uses it.
pub struct HarnessTokenizer<'m>(pub &'m LoadedModel);

impl Tokenize for HarnessTokenizer<'_> {
    /// The tokenizer's special tokens are added unless the text already starts with the BOS
    /// token's text (a chat template that writes it itself).
    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        let m = self.0;
        let starts_with_bos = m
            .tokenizer_meta
            .bos_token
            .as_deref()
            .is_some_and(|b| !b.is_empty() && text.starts_with(b));
        m.tokenizer
            .encode(text, !starts_with_bos)
            .map_err(|e| e.to_string())
    }
}

impl LogitModel for Engine<'_> {
    fn vocab_size(&self) -> usize {
        self.m.model.spec.vocab_size
    }
    fn reset(&mut self) {
        self.state.cache.clear();
    }
    fn logits(&mut self, tokens: &[u32]) -> Result<Vec<f32>, String> {
        self.m
            .model
            .forward_batch(&mut self.state, tokens, Logits::All)
            .map_err(|e| e.to_string())
    }
    /// The output head is the last thing a pass runs: skipping it leaves every stored
    /// position as `logits` stores it.
    fn advance(&mut self, tokens: &[u32]) -> Result<(), String> {
        self.m
            .model
            .forward_batch(&mut self.state, tokens, Logits::None)
            .map(drop)
            .map_err(|e| e.to_string())
    }
    /// The KV cache is per position, so dropping the positions after `len` restores the state
    /// of the shorter context exactly.
    fn rewind(&mut self, len: usize) -> bool {
        if len > self.state.cache.len() {
            return false;
        }
        self.state.cache.truncate(len);
        true
    }
    fn max_len(&self) -> Option<usize> {
        Some(self.state.cache.capacity())
    }
}

/// The engine's sampler settings for a request: greedy, or its sampling.
fn sampler_config(request: &GenRequest) -> SamplerConfig {
    match request.sampling {
        None => SamplerConfig::default(),
        Some(s) => SamplerConfig {
            temperature: s.temperature,
            top_p: s.top_p,
            seed: s.seed,
            ..SamplerConfig::default()
        },
    }
}

impl Engine<'_> {
    /// The prompt's token ids as the harness builds them: chat template, tokenization, and
    /// only the last (context − max_gen_toks) tokens kept.
    fn prompt_ids(&self, request: &GenRequest) -> Result<Vec<u32>, String> {
        let chat = |messages: &[pocket_evals::ChatMessage]| {
            let messages: Vec<Message> = messages
                .iter()
                .map(|m| Message::new(&m.role, &m.content))
                .collect();
            self.m
                .render_chat(&messages, true)
                .map_err(|e| e.to_string())
        };
        let text = match &request.prompt {
            Prompt::Text(t) => t.clone(),
            Prompt::Chat(messages) => chat(messages)?,
            Prompt::ChatContinued(messages, prefix) => chat(messages)? + prefix,
        };
        let mut ids = HarnessTokenizer(self.m).encode(&text)?;
        // As the harness: keep the last (context − max_gen_toks) prompt tokens.
        let capacity = self.state.cache.capacity();
        let room = capacity.saturating_sub(request.max_gen_toks).max(1);
        if ids.len() > room {
            ids.drain(..ids.len() - room);
        }
        if ids.is_empty() {
            return Err("the prompt has no tokens".into());
        }
        Ok(ids)
    }

    /// Greedy answers to `requests`, `batch` of them decoded together with continuous
    /// batching (see `pocket::batch`); `done(k, answer)` as request k finishes.
    pub fn generate_queue(
        &mut self,
        requests: &[&GenRequest],
        batching: crate::eval::Batching,
        mut done: impl FnMut(usize, String) -> Result<(), String>,
    ) -> Result<(), String> {
        let mut items = Vec::with_capacity(requests.len());
        for r in requests {
            items.push(BatchItem {
                prompt: self.prompt_ids(r)?,
                stop: StopAt {
                    ids: &self.m.stop_ids,
                    strings: &r.until,
                    max_tokens: r.max_gen_toks,
                },
            });
        }
        let slots = batching.size.clamp(1, items.len().max(1));
        while self.slots.len() < slots {
            self.slots.push(self.m.model.new_state(self.ctx));
        }
        let start = std::time::Instant::now();
        let mut tokens = 0usize;
        let mut run = 0usize;
        let mut failure = None;
        // The batch admits items in order, one sampler each.
        let mut configs = requests.iter().map(|r| sampler_config(r));
        let r = generate_text_queue(
            &self.m.model,
            &self.m.tokenizer,
            &mut self.slots[..slots],
            || Sampler::new(configs.next().unwrap_or_default()),
            &items,
            batching.share_prefix,
            |k, g| {
                tokens += g.generation.tokens.len();
                run += g.generation.prefill_tokens;
                done(k, g.text).map_err(|e| {
                    failure = Some(e.clone());
                    pocket::Error::Invalid(e)
                })
            },
        );
        self.decode_seconds += start.elapsed().as_secs_f64();
        self.generated_tokens += tokens;
        self.prompt_tokens_run += run;
        self.prompt_tokens += items.iter().map(|i| i.prompt.len()).sum::<usize>();
        match (r, failure) {
            (_, Some(e)) => Err(e),
            (Err(e), None) => Err(e.to_string()),
            (Ok(()), None) => Ok(()),
        }
    }
}

/// A task's constraint compiled over the model's vocabulary.
pub fn compile_constraint(m: &LoadedModel, c: &AnswerConstraint) -> Result<Guide, String> {
    let c = match c {
        AnswerConstraint::JsonSchema(s) => Constraint::json_schema(s.clone()),
        AnswerConstraint::Regex(r) => Constraint::regex(r),
        AnswerConstraint::Choices(labels) => Constraint::choices(labels.clone()),
        AnswerConstraint::Grammar(g) => Constraint::grammar(g),
    }
    .map_err(|e| e.to_string())?;
    m.grammars()
        .and_then(|g| g.compile(&c))
        .map_err(|e| e.to_string())
}

impl TextGenerator for Engine<'_> {
    /// One answer at a time; under a constraint, each token is chosen among those it allows
    /// (stop strings then do not apply: the constraint decides where the answer ends).
    fn generate(&mut self, request: &GenRequest) -> Result<String, String> {
        let ids = self.prompt_ids(request)?;
        self.state.cache.clear();
        let mut sampler = Sampler::new(sampler_config(request));
        let mut guide = match &request.constraint {
            Some(c) => Some(compile_constraint(self.m, c)?),
            None => None,
        };
        let stop = StopAt {
            ids: &self.m.stop_ids,
            strings: if guide.is_some() { &[] } else { &request.until },
            max_tokens: request.max_gen_toks,
        };
        let answer = generate_text_with(
            &self.m.model,
            &self.m.tokenizer,
            &mut self.state,
            &ids,
            &mut sampler,
            &stop,
            match guide.as_mut() {
                Some(g) => Assist::guided(Some(g)),
                None => Assist {
                    speculate: self.speculate.as_mut(),
                    ..Assist::default()
                },
            },
            |_| Control::Continue,
        )
        .map_err(|e| e.to_string())?;
        if let Some(s) = &answer.generation.speculation {
            self.speculation.add(s);
        }
        self.generated_tokens += answer.generation.tokens.len();
        self.decode_seconds +=
            (answer.generation.prefill_time + answer.generation.decode_time).as_secs_f64();
        Ok(answer.text)
    }
}
