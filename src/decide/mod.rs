//! Decisions in one forward pass: typed System One questions (`choice`, `noul`, `score`)
//! about a `state`, answered with probabilities read from the model, no token generated
//! (docs/decisions.md).
//!
//! A request is [`request::parse`]d, [`Decider::plan`]ned into prompts (one per question, or
//! two option orders), the prompts' shared beginning is prefilled once, and
//! [`readout::evaluate`] reads every question in one multi-row pass (and the keys readout's
//! answer texts in a second). [`answer`] applies the calibration (a softmax temperature per
//! question type) and writes the answers. The CLI (`pocket decide`), the server
//! (`POST /v1/systemone`) and `pocket eval decide` all go through [`Decider`].

pub mod answer;
pub mod fit;
pub mod head;
pub mod native;
pub mod readout;
pub mod render;
pub mod request;

use crate::generate::{common_prefix, PREFILL_CHUNK};
use crate::loader::LoadedModel;
use crate::model::{Logits, State};
use crate::Error;
pub use answer::Temperatures;
pub use head::{Head, Weights};
pub use readout::Scores;
pub use render::{Order, Plan, Style};
pub use request::{Invalid, Kind, Limits, Loc, Question, Request};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a [`Decider`] asks and reads; unset fields come from the head, else the defaults.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    pub style: Option<Style>,
    pub order: Option<Order>,
    /// Ask each choice question in both option orders and average (llama.cpp's `lev`).
    pub reverse: Option<bool>,
    pub head: Option<Arc<Head>>,
}

/// The readout when nothing says otherwise: the probability constrained decoding gives each
/// option (docs/decisions.md has the measurements that chose it: as accurate as the keys'
/// log-likelihood within noise, better calibrated, and one pass).
pub const DEFAULT_STYLE: Style = Style::Constrained;
pub const DEFAULT_ORDER: Order = Order::StateFirst;

pub struct Decider<'m> {
    pub model: &'m LoadedModel,
    builtin: render::Builtin<'m>,
    /// The GGUF's own decision type and `systemone` template, when it has them and no readout
    /// or head says otherwise.
    native: Option<native::Native<'m>>,
    pub head: Option<Arc<Head>>,
    pub temperatures: Temperatures,
    pub reverse: bool,
    pub limits: Limits,
}

/// Where a decision's time went.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timing {
    /// Running the prompts' shared beginning (what the cache did not hold).
    pub prefill: Duration,
    /// The readout passes.
    pub readout: Duration,
    /// Shared tokens that were already in the cache.
    pub cached: usize,
}

impl<'m> Decider<'m> {
    pub fn new(model: &'m LoadedModel, settings: Settings) -> Result<Decider<'m>, Error> {
        let mut settings = settings;
        let beside = model.path.join(head::IN_CHECKPOINT);
        if settings.head.is_none() && settings.style.is_none() && beside.is_file() {
            settings.head = Some(Arc::new(Head::load(&beside)?));
        }
        if settings.style.is_none() && settings.head.is_none() && settings.order.is_none() {
            if let Some(n) = native::Native::from_model(model)? {
                let mut limits = Limits::default();
                limits.max_options = n.max_options();
                return Ok(Decider {
                    builtin: render::Builtin::new(model, DEFAULT_ORDER, DEFAULT_STYLE),
                    temperatures: n.temperatures.clone(),
                    head: n.head.clone(),
                    reverse: false,
                    model,
                    native: Some(n),
                    limits,
                });
            }
        }
        let head = settings.head;
        let style = match (&head, settings.style) {
            (Some(h), Some(s)) if s != h.style => {
                return Err(Error::Invalid(format!(
                    "the head was fitted for the {} readout, not {}",
                    h.style.name(),
                    s.name()
                )))
            }
            (Some(h), _) => h.style,
            (None, Some(s)) => s,
            (None, None) => DEFAULT_STYLE,
        };
        if head.is_none() && matches!(style, Style::Pointer | Style::Probe) {
            return Err(Error::Invalid(format!(
                "the {} readout needs a head (--head FILE, from `pocket decide fit --train-head`)",
                style.name()
            )));
        }
        if let Some(h) = &head {
            if h.hidden != model.model.spec.hidden_size {
                return Err(Error::Invalid(format!(
                    "the head fits a hidden size of {}; this model's is {}",
                    h.hidden, model.model.spec.hidden_size
                )));
            }
        }
        let order = settings
            .order
            .or(head.as_ref().map(|h| h.order))
            .unwrap_or(DEFAULT_ORDER);
        let reverse = settings
            .reverse
            .or(head.as_ref().map(|h| h.reverse))
            .unwrap_or(false);
        let builtin = render::Builtin::new(model, order, style);
        let mut limits = Limits::default();
        if style == Style::Letters {
            limits.max_options = render::LETTERS.len();
        }
        Ok(Decider {
            temperatures: head
                .as_ref()
                .map(|h| h.temperatures.clone())
                .unwrap_or_default(),
            model,
            builtin,
            native: None,
            head,
            reverse,
            limits,
        })
    }

    pub fn style(&self) -> Style {
        self.builtin.style
    }

    /// The readout's name: the built-in style's, or the GGUF's decision type.
    pub fn readout_name(&self) -> &'static str {
        match &self.native {
            Some(n) => n.kind.name(),
            None => self.builtin.style.name(),
        }
    }

    pub fn order(&self) -> Order {
        self.builtin.order
    }

    /// Reads a request body (all its problems, or the request).
    pub fn parse(&self, body: &Value) -> Result<Request, Vec<Invalid>> {
        request::parse(body, &self.limits)
    }

    /// The request's prompts, checked against the context and the head.
    pub fn plan(&self, req: &Request, context: usize) -> Result<Plan, Error> {
        if let Some(h) = &self.head {
            req.questions.iter().try_for_each(|q| h.check_question(q))?;
        }
        let plan = match &self.native {
            Some(n) => n.plan(req)?,
            None => self.builtin.plan(req, self.reverse)?,
        };
        let longest = plan
            .variants
            .iter()
            .map(|v| {
                v.tokens.len()
                    + match &v.read {
                        render::Read::Keys(k) | render::Read::Tree(k) => {
                            k.iter().map(Vec::len).max().unwrap_or(0)
                        }
                        _ => 0,
                    }
            })
            .max()
            .unwrap_or(0);
        if longest > context {
            return Err(Error::Invalid(format!(
                "the decision prompt takes {longest} tokens; the context holds {context} \
                 (shorten the state, or raise --ctx)"
            )));
        }
        Ok(plan)
    }

    /// The user turn a question is asked with (for `--show-prompt`).
    pub fn prompt_text(&self, plan: &Plan, variant: usize) -> String {
        self.model
            .tokenizer
            .decode(&plan.variants[variant].tokens, false)
    }

    /// Answers `plan` on `state`, whose cache holds `cached` (token ids, position by
    /// position): the shared beginning reuses what it can, runs the rest in prefill chunks,
    /// then the readout. `cached` follows the cache.
    pub fn run(
        &self,
        state: &mut State,
        cached: &mut Vec<u32>,
        plan: &Plan,
        hidden: bool,
    ) -> Result<(Scores, Timing), Error> {
        let model = &self.model.model;
        let t0 = Instant::now();
        let prefix = plan.prefix();
        let mut keep = common_prefix(cached, prefix).min(state.cache.len());
        if !model.prompt_cuts_exact() {
            keep = keep / PREFILL_CHUNK * PREFILL_CHUNK;
        }
        keep = state.cache.truncate(keep);
        cached.truncate(keep);
        for chunk in prefix[keep..].chunks(PREFILL_CHUNK) {
            if let Err(e) = model.forward_batch(state, chunk, Logits::None) {
                state.cache.clear();
                cached.clear();
                return Err(e);
            }
            cached.extend_from_slice(chunk);
        }
        let t1 = Instant::now();
        let scores = readout::evaluate(model, state, plan, self.head.as_deref(), hidden);
        cached.truncate(state.cache.len());
        let scores = scores.inspect_err(|_| {
            state.cache.clear();
            cached.clear();
        })?;
        Ok((
            scores,
            Timing {
                prefill: t1 - t0,
                readout: t1.elapsed(),
                cached: keep,
            },
        ))
    }

    /// Each question's probabilities over its options (request order), calibrated.
    pub fn probabilities(&self, req: &Request, plan: &Plan, scores: &Scores) -> Vec<Vec<f64>> {
        req.questions
            .iter()
            .enumerate()
            .map(|(qi, q)| {
                let variants: Vec<(Vec<f64>, bool)> = plan
                    .variants
                    .iter()
                    .zip(&scores.raw)
                    .filter(|(v, _)| v.question == qi)
                    .map(|(v, s)| (s.clone(), v.reversed))
                    .collect();
                let t = self.temperatures.get(q.kind, q.options.len());
                let rated = plan.variants.iter().any(|v| v.question == qi && v.ratings);
                if rated {
                    // A rating from 0 to n − 1: P(yes) is the expected rating / (n − 1).
                    let p =
                        answer::probabilities_with(&variants, t, self.temperatures.bias(q.kind));
                    let yes: f64 = p
                        .iter()
                        .enumerate()
                        .map(|(i, q)| q * i as f64 / (p.len() - 1) as f64)
                        .sum();
                    return vec![1.0 - yes, yes];
                }
                answer::probabilities_with(&variants, t, self.temperatures.bias(q.kind))
            })
            .collect()
    }

    /// The answers object: question name → answer.
    pub fn answers(&self, req: &Request, plan: &Plan, scores: &Scores) -> Value {
        let probs = self.probabilities(req, plan, scores);
        let answers: Map<String, Value> = req
            .questions
            .iter()
            .zip(&probs)
            .map(|(q, p)| (q.name.clone(), answer::answer(q, p)))
            .collect();
        Value::Object(answers)
    }

    /// The System One response.
    pub fn response(&self, model_name: &str, req: &Request, plan: &Plan, scores: &Scores) -> Value {
        json!({
            "model": model_name,
            "answers": self.answers(req, plan, scores),
            "usage": {"input_tokens": plan.input_tokens(), "output_tokens": 0},
        })
    }
}
