//! A checked request made into what the engine runs: prompt ids through the model's chat
//! template (tools offered as `pocket run --tools` offers them), sampling settings over the
//! server's defaults, and the compiled constraint for `response_format` or tool calls. Errors
//! are 400s naming the field; a prompt longer than a slot's context is OpenAI's
//! `context_length_exceeded`.

use crate::error::ApiError;
use crate::request::{
    ChatRequest, Common, CompletionRequest, InMessage, PromptIn, ResponseFormat, ToolChoiceIn,
};
use pocket::chat_template::Message;
use pocket::constrain::tools::{parse_tools, ToolChoice};
use pocket::constrain::{AnswerFormat, Constraint, Guide};
use pocket::loader::LoadedModel;
use pocket::sampler::SamplerConfig;
use serde_json::{json, Value};

/// Settings a request may leave out, fixed at start-up from the model's generation_config
/// (as `pocket run` reads it) or else OpenAI's defaults (temperature 1, top-p 1).
#[derive(Clone, Debug)]
pub struct Defaults {
    pub sampler: SamplerConfig,
    /// Most tokens an answer may have (`--max-tokens-limit`): a request's `max_tokens` is
    /// capped to it.
    pub max_tokens_limit: usize,
    /// The budget when the request sets none (`--max-tokens-default`, 1024): a model that
    /// loops stops after seconds rather than filling the context.
    pub max_tokens_default: usize,
    /// Positions a slot holds.
    pub context: usize,
}

impl Defaults {
    pub fn for_model(
        m: &LoadedModel,
        max_tokens_limit: usize,
        max_tokens_default: usize,
        context: usize,
    ) -> Defaults {
        let g = &m.generation;
        // OpenAI's defaults under the model's generation_config, by `pocket run`'s rule.
        let openai = SamplerConfig {
            temperature: 1.0,
            ..SamplerConfig::default()
        };
        Defaults {
            sampler: openai.with_generation_config(g, g.do_sample.unwrap_or(false)),
            max_tokens_limit,
            max_tokens_default: max_tokens_default.clamp(1, max_tokens_limit.max(1)),
            context,
        }
    }
}

/// A request ready for the engine.
pub struct Prepared {
    pub prompt: Vec<u32>,
    pub settings: Settings,
    pub stop: Vec<String>,
    pub guide: Option<Guide>,
    pub logprobs: Option<usize>,
    /// The tools offered (their calls are parsed out of the answer).
    pub tool_names: Vec<String>,
    /// Completions' `echo`: the prompt's text, put before the answer.
    pub echo: Option<String>,
}

/// What both endpoints decide the same way.
pub struct Settings {
    pub sampler: SamplerConfig,
    pub max_tokens: usize,
    pub logit_bias: Vec<(u32, f32)>,
}

/// Sampling, length and bias shared by both endpoints.
fn settings(m: &LoadedModel, d: &Defaults, c: &Common, seed: u64) -> Result<Settings, ApiError> {
    let s = &c.sampling;
    let mut cfg = SamplerConfig {
        temperature: s.temperature.unwrap_or(d.sampler.temperature),
        top_p: s.top_p.unwrap_or(d.sampler.top_p),
        top_k: s.top_k.unwrap_or(d.sampler.top_k),
        min_p: s.min_p.unwrap_or(d.sampler.min_p),
        repeat_penalty: s.repeat_penalty.unwrap_or(d.sampler.repeat_penalty),
        presence_penalty: s.presence_penalty.unwrap_or(0.0),
        frequency_penalty: s.frequency_penalty.unwrap_or(0.0),
        seed: s.seed.unwrap_or(seed),
        ..d.sampler.clone()
    };
    // top_p 0 keeps only the most likely token: greedy.
    if cfg.top_p <= 0.0 {
        cfg.top_p = 1.0;
        cfg.temperature = 0.0;
    }
    cfg.validate()
        .map_err(|e| ApiError::invalid("", format!("sampling settings: {e}")))?;
    let vocab = m.model.spec.vocab_size;
    if let Some(&(id, _)) = c.logit_bias.iter().find(|&&(id, _)| id as usize >= vocab) {
        return Err(ApiError::invalid(
            &format!("logit_bias.{id}"),
            format!("token id {id} is outside the vocabulary ({vocab})"),
        ));
    }
    let max_tokens = c
        .max_tokens
        .map_or(d.max_tokens_default, |n| {
            n.min(d.max_tokens_limit as u64) as usize
        })
        .max(1);
    Ok(Settings {
        sampler: cfg,
        max_tokens,
        logit_bias: c.logit_bias.clone(),
    })
}

fn check_context(d: &Defaults, n: usize, param: &str) -> Result<(), ApiError> {
    if n == 0 {
        return Err(ApiError::invalid(param, "the prompt has no tokens"));
    }
    if n >= d.context {
        return Err(ApiError::invalid(
            param,
            format!(
                "This model's maximum context length is {} tokens. However, your {} resulted in \
                 {n} tokens. Please reduce the length of the {}.",
                d.context,
                if param == "messages" {
                    "messages"
                } else {
                    "prompt"
                },
                if param == "messages" {
                    "messages"
                } else {
                    "prompt"
                },
            ),
        )
        .with_code("context_length_exceeded"));
    }
    Ok(())
}

/// The request's messages as the chat template takes them: earlier calls carry their
/// arguments as JSON (as `pocket run` keeps them), and a tool result is named after the call
/// it answers.
fn messages(inp: &[InMessage]) -> Vec<Message> {
    let mut names: Vec<(String, String)> = Vec::new();
    inp.iter()
        .map(|im| {
            let mut m = Message::new(&im.role, &im.content);
            m.tool_calls = im
                .tool_calls
                .iter()
                .map(|(id, name, args)| {
                    names.push((id.clone(), name.clone()));
                    let arguments = serde_json::from_str::<Value>(args)
                        .unwrap_or_else(|_| Value::String(args.clone()));
                    json!({"id": id, "type": "function",
                           "function": {"name": name, "arguments": arguments}})
                })
                .collect();
            m.tool_call_id = im.tool_call_id.clone();
            m.name = im.name.clone().or_else(|| {
                let id = im.tool_call_id.as_ref()?;
                names.iter().find(|(i, _)| i == id).map(|(_, n)| n.clone())
            });
            m
        })
        .collect()
}

fn answer_format(r: &ChatRequest) -> Result<AnswerFormat, ApiError> {
    let constraint = match &r.response_format {
        ResponseFormat::Text => None,
        ResponseFormat::JsonObject => Some(
            Constraint::json_schema(json!({"type": "object"}))
                .map_err(|e| ApiError::invalid("response_format", e.0))?,
        ),
        ResponseFormat::JsonSchema { schema, .. } => {
            Some(Constraint::json_schema(schema.clone()).map_err(|e| {
                ApiError::invalid(
                    "response_format.json_schema.schema",
                    format!("the schema cannot be enforced: {}", e.0),
                )
            })?)
        }
    };
    let tools = match &r.tools {
        Some(t) => parse_tools(&t.to_string()).map_err(|e| ApiError::invalid("tools", e.0))?,
        None => Vec::new(),
    };
    let tool_choice = match &r.tool_choice {
        None | Some(ToolChoiceIn::Auto) => ToolChoice::Auto,
        Some(ToolChoiceIn::None) => ToolChoice::None,
        Some(ToolChoiceIn::Required) => ToolChoice::Required,
        Some(ToolChoiceIn::Named(n)) => {
            if !tools.iter().any(|t| &t.name == n) {
                return Err(ApiError::invalid(
                    "tool_choice.function.name",
                    format!("tool_choice names {n:?}, which is not among the tools"),
                ));
            }
            ToolChoice::Named(n.clone())
        }
    };
    if constraint.is_some() && !tools.is_empty() && tool_choice != ToolChoice::None {
        return Err(ApiError::invalid(
            "response_format",
            "a JSON response_format and tools the model may call do not combine: the answer \
             is either the JSON or a call (set tool_choice to \"none\", or drop one)",
        ));
    }
    Ok(AnswerFormat {
        constraint,
        tools,
        tool_choice,
    })
}

/// A chat request for the engine.
pub fn chat(
    m: &LoadedModel,
    d: &Defaults,
    r: &ChatRequest,
    seed: u64,
) -> Result<Prepared, ApiError> {
    let settings = settings(m, d, &r.common, seed)?;
    let format = answer_format(r)?;
    let msgs = messages(&r.messages);
    let prompt = m.encode_answer_prompt(&format, &msgs).map_err(|e| {
        ApiError::invalid(
            "messages",
            format!("the chat template cannot render them: {e}"),
        )
    })?;
    check_context(d, prompt.len(), "messages")?;
    let guide = m.guide_for(&format).map_err(|e| {
        let param = if format.constraint.is_some() {
            "response_format"
        } else {
            "tools"
        };
        ApiError::invalid(param, format!("the constraint cannot be compiled: {}", e.0))
    })?;
    Ok(Prepared {
        prompt,
        settings,
        stop: r.common.stop.clone(),
        guide,
        logprobs: r.logprobs.then_some(r.top_logprobs),
        tool_names: format
            .offered_tools()
            .iter()
            .map(|t| t.name.clone())
            .collect(),
        echo: None,
    })
}

/// A completion request for the engine: the prompt as plain text (special tokens added, as
/// `pocket run --raw` does), or token ids as given.
pub fn completion(
    m: &LoadedModel,
    d: &Defaults,
    r: &CompletionRequest,
    seed: u64,
) -> Result<Prepared, ApiError> {
    let settings = settings(m, d, &r.common, seed)?;
    let (prompt, text) = match &r.prompt {
        PromptIn::Text(t) => (
            m.tokenizer
                .encode(t, true)
                .map_err(|e| ApiError::invalid("prompt", e.to_string()))?,
            t.clone(),
        ),
        PromptIn::Ids(ids) => {
            let vocab = m.model.spec.vocab_size;
            if let Some((i, id)) = ids.iter().enumerate().find(|(_, &id)| id as usize >= vocab) {
                return Err(ApiError::invalid(
                    &format!("prompt[{i}]"),
                    format!("token id {id} is outside the vocabulary ({vocab})"),
                ));
            }
            (ids.clone(), m.tokenizer.decode(ids, true))
        }
    };
    check_context(d, prompt.len(), "prompt")?;
    Ok(Prepared {
        prompt,
        settings,
        stop: r.common.stop.clone(),
        guide: None,
        logprobs: r.logprobs,
        tool_names: Vec::new(),
        echo: r.echo.then_some(text),
    })
}
