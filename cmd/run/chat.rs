//! `pocket run MODEL` with a terminal and no prompt: the interactive chat. Terminal I/O only —
//! the conversation itself (template, KV cache reuse, fitting the context) is
//! [`pocket::chat::ChatSession`].
//!
//! Answers go to stdout; everything else (banner, notes, stats) to stderr, so `2>/dev/null`
//! leaves the conversation's text.

use super::format::{choices_arg, grammar_arg, schema_arg, FormatArg};
use super::options::{sampling_line, stats_line, RunArgs, SamplingSource};
use super::{commands, typeahead};
use crate::term;
use anyhow::{bail, Context, Result};
use pocket::chat::{ChatSession, ChatSettings, Transcript, Turn};
use pocket::generate::{Control, FinishReason};
use pocket::loader::LoadedModel;
use rustyline::error::ReadlineError;
use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::commands::{ChatCommand, Input, Shape, HELP, SETTINGS};
use super::editor::{default_history_path, join_continuations, new_editor, ChatEditor};
use pocket::constrain::tools::ToolChoice;

pub fn main(
    args: &RunArgs,
    m: &LoadedModel,
    settings: ChatSettings,
    source: SamplingSource,
    ctx: usize,
    format: Option<FormatArg>,
    draft: Option<&LoadedModel>,
) -> Result<ExitCode> {
    if !args.raw && m.template.is_none() {
        bail!(
            "{}: the model has no chat template (a base model?): chat with --raw, or use -p TEXT --raw",
            m.path.display()
        );
    }
    let overridden = args.temp.is_some()
        || args.top_k.is_some()
        || args.top_p.is_some()
        || args.min_p.is_some()
        || args.repeat_penalty.is_some();
    let sampling = sampling_line(&settings, source, overridden);
    let mut session = ChatSession::new(m, ctx, settings);
    if let Some(bar) = super::progress::prefill_bar(false) {
        session.set_prefill_progress(bar);
    }
    session.context_shift = args.context_shift;
    session.speculate = args.spec.speculator(m, draft, ctx);
    session.set_raw(args.raw);
    session.set_system(args.system.clone());
    if let Some(f) = format {
        session.format = f.format;
    }

    // Ctrl-C while an answer streams (the terminal is in cooked mode, so it is a SIGINT)
    // raises this flag, and the generation callback stops at the next token. At the prompt the
    // line editor reads Ctrl-C as a key instead.
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = interrupted.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst))
        .context("installing the Ctrl-C handler")?;

    let mut chat = Chat {
        ui: Ui::new(),
        editor: new_editor().context("starting the line editor")?,
        history: history_file(args),
        interrupted,
        token_delay: Duration::from_millis(args.debug_token_delay_ms),
        last: None,
        typed: VecDeque::new(),
        partial: String::new(),
    };
    chat.load_history();
    let (_, capacity) = session.context();
    eprintln!(
        "pocket · {} · context {capacity} tokens · /help for commands, Ctrl-D to leave",
        m.path.display()
    );
    chat.ui.note(&sampling);
    chat.run(&mut session)?;
    Ok(ExitCode::SUCCESS)
}

/// Where colours go: only on terminals, and never with NO_COLOR set.
struct Ui {
    stdout_styled: bool,
    stderr_styled: bool,
    stderr_terminal: bool,
}

impl Ui {
    fn new() -> Ui {
        Ui {
            stdout_styled: std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none(),
            stderr_styled: term::stderr_styled(),
            stderr_terminal: std::io::stderr().is_terminal(),
        }
    }

    /// A message from the chat itself (not the model), dimmed.
    fn note(&self, text: &str) {
        eprintln!("{}", term::dim(text, self.stderr_styled));
    }

    /// The prompt: raw text for width, styled text to print.
    fn prompt(&self) -> (String, String) {
        let raw = "> ".to_string();
        let styled = if self.stdout_styled {
            format!("\x1b[1;32m{raw}\x1b[0m")
        } else {
            raw.clone()
        };
        (raw, styled)
    }
}

struct Chat {
    ui: Ui,
    editor: ChatEditor,
    history: Option<PathBuf>,
    interrupted: Arc<AtomicBool>,
    token_delay: Duration,
    /// The last answer's stats line, for `/stats`.
    last: Option<String>,
    /// Lines typed while an answer streamed, run next in order.
    typed: VecDeque<String>,
    /// Text typed after the last of them, which the next prompt starts with.
    partial: String,
}

impl Chat {
    fn run(&mut self, session: &mut ChatSession) -> Result<()> {
        let prompt = self.ui.prompt();
        loop {
            let line = match self.next_line(&prompt) {
                Ok(line) => line,
                Err(ReadlineError::Interrupted) => {
                    self.ui.note("(Ctrl-D or /exit to leave)");
                    continue;
                }
                Err(ReadlineError::Eof) => return Ok(()),
                Err(e) => return Err(e).context("reading the terminal"),
            };
            if line.trim().is_empty() {
                continue;
            }
            self.remember(&line);
            match commands::parse(&join_continuations(&line)) {
                Input::Message(text) => self.answer(session, &text)?,
                Input::Command(ChatCommand::Exit) => return Ok(()),
                Input::Command(ChatCommand::Tool(name, result)) => {
                    self.respond(session, Reply::Tool(&name, &result))?
                }
                Input::Command(command) => self.command(session, command),
                Input::Invalid(why) => self.ui.note(&format!("({why})")),
            }
        }
    }

    /// The next input: a line typed ahead during the last answer (shown after the prompt as
    /// if typed now), else one read by the editor, which starts with any unfinished text.
    fn next_line(&mut self, prompt: &(String, String)) -> rustyline::Result<String> {
        if let Some(mut line) = self.typed.pop_front() {
            // A typed-ahead line ending in `\` continues with the next one, as at the prompt.
            while line.ends_with('\\') {
                match self.typed.pop_front() {
                    Some(next) => line = format!("{line}\n{next}"),
                    None => break,
                }
            }
            if !line.ends_with('\\') {
                println!("{}{}", prompt.1, line.replace('\n', "\n  "));
                return Ok(line);
            }
            self.partial = format!("{line}\n{}", self.partial);
        }
        let initial = std::mem::take(&mut self.partial);
        self.editor
            .readline_with_initial(prompt, (initial.as_str(), ""))
    }

    fn answer(&mut self, session: &mut ChatSession, text: &str) -> Result<()> {
        self.respond(session, Reply::User(text))
    }

    fn respond(&mut self, session: &mut ChatSession, reply: Reply) -> Result<()> {
        self.interrupted.store(false, Ordering::SeqCst);
        let hold = typeahead::Hold::start();
        let mut out = std::io::stdout().lock();
        let interrupted = &self.interrupted;
        let delay = self.token_delay;
        let ui = &self.ui;
        let capacity = session.context().1;
        let on_fit = |dropped: usize| {
            if dropped > 0 {
                ui.note(&format!(
                    "(to fit the {capacity}-token context, the oldest {} dropped)",
                    if dropped == 1 {
                        "turn was".to_string()
                    } else {
                        format!("{dropped} turns were")
                    }
                ));
            }
        };
        let on_text = |piece: &str| {
            // A closed stdout is not worth aborting an answer for; the chat ends at the next
            // prompt anyway.
            let _ = out.write_all(piece.as_bytes());
            let _ = out.flush();
            if !delay.is_zero() {
                std::thread::sleep(delay);
            }
            if interrupted.load(Ordering::SeqCst) {
                Control::Stop
            } else {
                Control::Continue
            }
        };
        let result = match reply {
            Reply::User(text) => session.turn_noting(text, on_fit, on_text),
            Reply::Tool(name, content) => session.tool_result(name, content, on_fit, on_text),
        };
        let typed = hold.finish();
        self.typed.extend(typed.lines);
        self.partial.push_str(&typed.partial);
        let turn = match result {
            Ok(turn) => turn,
            Err(e) => {
                drop(out);
                self.ui.note(&format!("(error: {e})"));
                return Ok(());
            }
        };
        writeln!(out).context("writing the answer")?;
        drop(out);
        self.after_answer(session, &turn);
        Ok(())
    }

    fn after_answer(&mut self, session: &ChatSession, turn: &Turn) {
        let (used, capacity) = session.context();
        if turn.shifted > 0 {
            self.ui.note(&format!(
                "(context shift: {} positions of the dropped turns left the cache; the kept ones moved down)",
                turn.shifted
            ));
        }
        match turn.generation.finish_reason {
            FinishReason::Interrupted => self.ui.note("(stopped)"),
            FinishReason::Context => self.ui.note(&format!(
                "(cut: the {capacity}-token context is full; the oldest turns will be dropped next time)"
            )),
            FinishReason::Length => self.ui.note(&format!(
                "(cut at the {}-token limit; /set max_tokens N for longer answers)",
                session.settings.max_tokens
            )),
            FinishReason::Stop => {}
        }
        if !turn.complete {
            self.ui
                .note("(the answer is cut before it completes the constraint: it is not valid)");
        }
        for call in &turn.tool_calls {
            self.ui.note(&format!(
                "(tool call: {} {}; give its result with /tool {} RESULT)",
                call.name, call.arguments, call.name
            ));
        }
        let stats = stats_line(&turn.generation, turn.reused, used, capacity);
        if self.ui.stderr_terminal {
            self.ui.note(&stats);
        }
        self.last = Some(stats);
    }

    fn command(&mut self, session: &mut ChatSession, command: ChatCommand) {
        let ui = &self.ui;
        match command {
            ChatCommand::Help => eprintln!("{HELP}"),
            ChatCommand::Reset => {
                session.reset();
                ui.note("(conversation cleared)");
            }
            ChatCommand::System(None) => match (session.system(), session.template_system()) {
                (Some(s), _) => ui.note(&format!("(system prompt: {s})")),
                (None, Some(d)) => ui.note(&format!(
                    "(the chat template's own system prompt: {}; /system TEXT replaces it)",
                    d.trim()
                )),
                (None, None) => ui.note("(no system prompt: /system TEXT sets one)"),
            },
            ChatCommand::System(Some(text)) => {
                session.set_system(Some(text));
                ui.note("(system prompt set; conversation cleared)");
            }
            ChatCommand::Set(None) => ui.note(&settings_summary(&session.settings)),
            ChatCommand::Set(Some((key, value))) => {
                match commands::set(&mut session.settings, &key, &value) {
                    Ok(done) => ui.note(&done),
                    Err(why) => ui.note(&format!("({why})")),
                }
            }
            ChatCommand::Stats => {
                let (used, capacity) = session.context();
                ui.note(&format!(
                    "({} messages · context {used}/{capacity} · system prompt: {})",
                    session.messages().len(),
                    match (session.system(), session.template_system()) {
                        (Some(_), _) => "yours",
                        (None, Some(_)) => "the template's own",
                        (None, None) => "none",
                    }
                ));
                ui.note(self.last.as_deref().unwrap_or("(no answer yet)"));
                ui.note(&settings_summary(&session.settings));
            }
            ChatCommand::Save(path) => match save(session, &path) {
                Ok(()) => ui.note(&format!(
                    "(saved {} messages to {})",
                    session.messages().len(),
                    path.display()
                )),
                Err(e) => ui.note(&format!("(error: {e:#})")),
            },
            ChatCommand::Load(path) => match load(session, &path) {
                Ok(()) => ui.note(&format!(
                    "(loaded {} messages from {}{})",
                    session.messages().len(),
                    path.display(),
                    if session.system().is_some() {
                        ", with a system prompt"
                    } else {
                        ""
                    }
                )),
                Err(e) => ui.note(&format!("(error: {e:#})")),
            },
            ChatCommand::Exit => {}
            ChatCommand::Free => {
                session.format.constraint = None;
                ui.note("(answers are free text again)");
            }
            ChatCommand::Shape(shape) => {
                let parsed = match shape {
                    Shape::Schema(arg) => schema_arg("/schema", &arg),
                    Shape::Choices(labels) => choices_arg("/choices", labels),
                    Shape::Grammar(path) => grammar_arg("/grammar", &path),
                    Shape::Regex(re) => pocket::constrain::Constraint::regex(&re)
                        .map(|c| (c, "/regex".to_string()))
                        .map_err(|e| anyhow::anyhow!("/regex: {}", e.0)),
                };
                let mut next = session.format.clone();
                let checked = parsed.and_then(|(c, origin)| {
                    next.constraint = Some(c);
                    session
                        .model()
                        .guide_for(&next)
                        .map_err(|e| anyhow::anyhow!("{origin}: {}", e.0))?;
                    Ok(())
                });
                match checked {
                    Ok(()) => {
                        let what = next
                            .constraint
                            .as_ref()
                            .map(|c| c.describe())
                            .unwrap_or_default();
                        session.format = next;
                        ui.note(&format!("(answers follow the {what} until /free)"));
                    }
                    Err(e) => ui.note(&format!("(error: {e:#})")),
                }
            }
            ChatCommand::Tool(..) => {}
            ChatCommand::Tools(None) => {
                session.format.tools.clear();
                ui.note("(no tools offered)");
            }
            ChatCommand::Tools(Some(path)) => match read_tools(&path) {
                Ok(tools) => {
                    let names: Vec<String> = tools.iter().map(|t| t.name.clone()).collect();
                    let mut next = session.format.clone();
                    next.constraint = None;
                    next.tools = tools;
                    if let ToolChoice::Named(n) = &next.tool_choice {
                        if !names.contains(n) {
                            next.tool_choice = ToolChoice::Auto;
                        }
                    }
                    match session.model().guide_for(&next) {
                        Ok(_) => {
                            session.format = next;
                            ui.note(&format!("(tools offered: {})", names.join(", ")));
                        }
                        Err(e) => ui.note(&format!("(error: /tools {}: {})", path.display(), e.0)),
                    }
                }
                Err(e) => ui.note(&format!("(error: {e:#})")),
            },
            ChatCommand::ToolChoice(choice) => {
                let c = ToolChoice::parse(&choice);
                let known = match &c {
                    ToolChoice::Named(n) => session.format.tools.iter().any(|t| &t.name == n),
                    _ => true,
                };
                if !known {
                    ui.note(&format!(
                        "(/tool_choice {choice}: expected auto, required, none or a tool's name)"
                    ));
                } else {
                    session.format.tool_choice = c;
                    ui.note(&format!("(tool choice: {choice})"));
                }
            }
        }
    }

    fn load_history(&mut self) {
        let Some(path) = &self.history else { return };
        if path.exists() {
            if let Err(e) = self.editor.load_history(path) {
                self.ui
                    .note(&format!("(history {} not read: {e})", path.display()));
            }
        }
    }

    /// Adds the input to the history and appends it to the file at once, so a crash or a
    /// second chat loses nothing. A file that cannot be written is reported once.
    fn remember(&mut self, line: &str) {
        let _ = self.editor.add_history_entry(line);
        let Some(path) = &self.history else { return };
        let written = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => std::fs::create_dir_all(dir)
                .map_err(|e| e.to_string())
                .and_then(|()| self.editor.append_history(path).map_err(|e| e.to_string())),
            _ => self.editor.append_history(path).map_err(|e| e.to_string()),
        };
        if let Err(e) = written {
            self.ui.note(&format!(
                "(history not saved to {}: {e}; use --history FILE or --no-history)",
                path.display()
            ));
            self.history = None;
        }
    }
}

fn history_file(args: &RunArgs) -> Option<PathBuf> {
    if args.no_history {
        return None;
    }
    args.history.clone().or_else(default_history_path)
}

fn settings_summary(s: &ChatSettings) -> String {
    let values: Vec<String> = SETTINGS
        .iter()
        .map(|k| format!("{k} {}", commands::show(s, k)))
        .collect();
    format!("({})", values.join(" · "))
}

fn save(session: &ChatSession, path: &Path) -> Result<()> {
    let json = serde_json::to_string_pretty(&session.transcript())?;
    pocket_formats::atomic::write_atomic(path, (json + "\n").as_bytes())?;
    Ok(())
}

fn load(session: &mut ChatSession, path: &Path) -> Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let transcript: Transcript = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a saved chat", path.display()))?;
    session
        .restore(transcript)
        .with_context(|| format!("{}: not a saved chat", path.display()))
}

/// An OpenAI tools file, read and checked as `--tools` reads it.
fn read_tools(path: &Path) -> Result<Vec<pocket::constrain::tools::Tool>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("/tools {}", path.display()))?;
    pocket::constrain::tools::parse_tools(&text)
        .map_err(|e| anyhow::anyhow!("/tools {}: {}", path.display(), e.0))
}

/// What the model answers: a user's message, or a tool's result.
enum Reply<'a> {
    User(&'a str),
    Tool(&'a str, &'a str),
}
