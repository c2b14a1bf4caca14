//! Constrained decoding: answers that parse. A JSON schema, a grammar, a regex or a list of
//! labels becomes a token mask at every step (llguidance computes it over pocket's own view of
//! the vocabulary), tokens the constraint forces are appended without sampling and run as one
//! batch, and the mask is computed on another thread while the forward pass runs.
//!
//! - [`spec`]: what the user wrote, checked before generation.
//! - [`gbnf`]: llama.cpp's GBNF grammars as Lark.
//! - [`vocab`]: token ids as bytes, for the grammar engine.
//! - [`guide`]: a compiled constraint following one answer.
//! - [`tools`]: OpenAI-style tool definitions, the constraint for a call, and parsing calls
//!   out of an answer.

pub mod gbnf;
pub mod guide;
pub mod spec;
pub mod tools;
pub mod vocab;

pub use guide::{Grammars, Guide};
pub use spec::{Constraint, ConstraintError};

use tools::{Tool, ToolChoice};

/// How an answer is shaped: at most one constraint on its text, and tools the model may call.
#[derive(Clone, Debug, PartialEq)]
pub struct AnswerFormat {
    pub constraint: Option<Constraint>,
    pub tools: Vec<Tool>,
    pub tool_choice: ToolChoice,
}

impl Default for AnswerFormat {
    fn default() -> Self {
        AnswerFormat {
            constraint: None,
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
        }
    }
}

impl AnswerFormat {
    /// The tools the model is told about: none under `--tool-choice none`.
    pub fn offered_tools(&self) -> &[Tool] {
        if self.tool_choice == ToolChoice::None {
            &[]
        } else {
            &self.tools
        }
    }

    /// The guide for one answer: the constraint; or with tools, a call (`required`, a name),
    /// or a call's arguments once the model opens one (`auto`). `None`: free text.
    /// `g` is the model's grammar engine ([`crate::loader::LoadedModel::grammars`]).
    pub fn guide(&self, g: &Grammars) -> Result<Option<Guide>, ConstraintError> {
        if let Some(c) = &self.constraint {
            return g.compile(c).map(Some);
        }
        if self.offered_tools().is_empty() {
            return Ok(None);
        }
        let lazy = self.tool_choice == ToolChoice::Auto;
        let c = tools::call_constraint(&self.tools, &self.tool_choice, lazy)?;
        if lazy {
            g.compile_lazy(&c, tools::CALL_OPEN).map(Some)
        } else {
            g.compile(&c).map(Some)
        }
    }
}
