//! The chat's line editor (rustyline): a trailing backslash continues the input on the next
//! line, Tab completes commands and setting names, and history lives in a file.

use super::commands::{COMMANDS, SETTINGS};
use rustyline::completion::Completer;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::FileHistory;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Config, Context, Editor, Helper};
use std::path::PathBuf;

pub type ChatEditor = Editor<ChatHelper, FileHistory>;

pub struct ChatHelper;

impl Helper for ChatHelper {}
impl Highlighter for ChatHelper {}

impl Hinter for ChatHelper {
    type Hint = String;
}

impl Validator for ChatHelper {
    /// Enter on a line ending in `\` inserts a newline instead of sending, as in a shell.
    fn validate(&self, ctx: &mut ValidationContext) -> rustyline::Result<ValidationResult> {
        Ok(if ctx.input().ends_with('\\') {
            ValidationResult::Incomplete
        } else {
            ValidationResult::Valid(None)
        })
    }
}

impl Completer for ChatHelper {
    type Candidate = String;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<String>)> {
        let head = &line[..pos];
        if !head.starts_with('/') {
            return Ok((0, Vec::new()));
        }
        if let Some(key) = head.strip_prefix("/set ") {
            if !key.contains(' ') {
                let found = SETTINGS
                    .iter()
                    .filter(|s| s.starts_with(key))
                    .map(|s| format!("{s} "))
                    .collect();
                return Ok((5, found));
            }
            return Ok((0, Vec::new()));
        }
        if head.contains(' ') {
            return Ok((0, Vec::new()));
        }
        let found = COMMANDS
            .iter()
            .filter(|c| c.starts_with(head))
            .map(|c| c.to_string())
            .collect();
        Ok((0, found))
    }
}

pub fn new_editor() -> rustyline::Result<ChatEditor> {
    let config = Config::builder()
        .max_history_size(1000)?
        .history_ignore_dups(true)?
        .auto_add_history(false)
        .bracketed_paste(true)
        .build();
    let mut editor = ChatEditor::with_config(config)?;
    editor.set_helper(Some(ChatHelper));
    Ok(editor)
}

/// The text a submitted input stands for: each `\` + newline that continued a line becomes a
/// plain newline.
pub fn join_continuations(input: &str) -> String {
    input.replace("\\\r\n", "\n").replace("\\\n", "\n")
}

/// `$XDG_STATE_HOME/pocket/history`, else `~/.local/state/pocket/history` (the XDG base
/// directory default); `None` when neither variable is set.
pub fn default_history_path() -> Option<PathBuf> {
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let state = nonempty("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| nonempty("HOME").map(|h| PathBuf::from(h).join(".local/state")))?;
    Some(state.join("pocket").join("history"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuation_backslashes_become_newlines() {
        assert_eq!(join_continuations("one\\\ntwo\\\nthree"), "one\ntwo\nthree");
        assert_eq!(join_continuations("pasted\nlines"), "pasted\nlines");
        assert_eq!(join_continuations("a \\ b"), "a \\ b");
    }

    #[test]
    fn commands_and_setting_names_complete() {
        let history = FileHistory::new();
        let ctx = Context::new(&history);
        let h = ChatHelper;
        assert_eq!(
            h.complete("/re", 3, &ctx).unwrap(),
            (0, vec!["/reset".to_string(), "/regex".to_string()])
        );
        assert_eq!(
            h.complete("/sc", 3, &ctx).unwrap(),
            (0, vec!["/schema".to_string()])
        );
        assert_eq!(
            h.complete("/set te", 7, &ctx).unwrap(),
            (5, vec!["temp ".to_string()])
        );
        assert!(h.complete("hello /re", 9, &ctx).unwrap().1.is_empty());
    }
}
