//! The chat's slash commands: parsing what the user typed and changing settings by name. Kept
//! apart from the terminal loop so every command can be tested without a terminal.

use super::options::unescape;
use pocket::chat::ChatSettings;
use std::path::PathBuf;

pub const HELP: &str = "\
Type a message and press Enter. End a line with \\ to continue on the next one; pasted text may
span lines. Start a message with // to send one that begins with /.
  /help                 this list
  /reset                start the conversation over (keeps the system prompt and settings)
  /system TEXT          set the system prompt and start over (/system alone shows it)
  /set KEY VALUE        change a setting (/set alone lists them): temp, top_k, top_p, min_p,
                        repeat_penalty, presence_penalty, frequency_penalty, repeat_last_n,
                        max_tokens, seed, stop (a text that ends answers; `/set stop` clears)
  /stats                the last answer's speed, context use, and the settings
  /schema FILE|JSON     every answer is JSON valid under this schema (until /free)
  /choices A,B,C        every answer is exactly one of these labels
  /grammar FILE         every answer matches this Lark or GBNF grammar
  /regex RE             every answer matches this regular expression
  /free                 answers are free text again
  /tools FILE           offer the tools of an OpenAI tools JSON file (/tools off: none)
  /tool_choice CHOICE   auto, required, none or a tool's name (see --tool-choice)
  /tool NAME RESULT     give the model tool NAME's result (JSON or text) and let it go on
  /save FILE            write the conversation (system prompt, messages, settings) as JSON
  /load FILE            read a conversation written by /save
  /exit                 leave (or Ctrl-D)
Ctrl-C stops an answer; at the prompt it clears the line.";

/// The names `/set` accepts, for the list and for completion.
pub const SETTINGS: [&str; 11] = [
    "temp",
    "top_k",
    "top_p",
    "min_p",
    "repeat_penalty",
    "presence_penalty",
    "frequency_penalty",
    "repeat_last_n",
    "max_tokens",
    "seed",
    "stop",
];

/// The commands, for completion.
pub const COMMANDS: [&str; 17] = [
    "/help",
    "/reset",
    "/system",
    "/set",
    "/stats",
    "/schema",
    "/choices",
    "/grammar",
    "/regex",
    "/free",
    "/tools",
    "/tool_choice",
    "/tool",
    "/save",
    "/load",
    "/exit",
    "/quit",
];

/// A constraint named in the chat.
#[derive(Debug, PartialEq)]
pub enum Shape {
    Schema(String),
    Choices(Vec<String>),
    Grammar(PathBuf),
    Regex(String),
}

#[derive(Debug, PartialEq)]
pub enum ChatCommand {
    Help,
    Reset,
    /// `None`: show the current system prompt.
    System(Option<String>),
    /// `None`: list the settings.
    Set(Option<(String, String)>),
    Stats,
    /// Constrain every answer from now on.
    Shape(Shape),
    /// Drop the constraint.
    Free,
    /// A tool's result: the tool's name and the result text.
    Tool(String, String),
    /// Offer the tools of this file (`None`: offer none).
    Tools(Option<PathBuf>),
    /// `auto`, `required`, `none` or a tool's name.
    ToolChoice(String),
    Save(PathBuf),
    Load(PathBuf),
    Exit,
}

/// What one line of input asks for.
#[derive(Debug, PartialEq)]
pub enum Input {
    Message(String),
    Command(ChatCommand),
    /// A line starting with `/` that is not a command, or a command missing its argument;
    /// the text says what is wrong.
    Invalid(String),
}

pub fn parse(line: &str) -> Input {
    let trimmed = line.trim();
    if let Some(literal) = trimmed.strip_prefix("//") {
        return Input::Message(format!("/{literal}"));
    }
    if !trimmed.starts_with('/') {
        return Input::Message(trimmed.to_string());
    }
    let (name, arg) = match trimmed.split_once(char::is_whitespace) {
        Some((name, arg)) => (name, arg.trim()),
        None => (trimmed, ""),
    };
    let path = |what: &str| {
        if arg.is_empty() {
            Input::Invalid(format!("{name} needs a file name"))
        } else {
            Input::Command(match what {
                "save" => ChatCommand::Save(PathBuf::from(arg)),
                _ => ChatCommand::Load(PathBuf::from(arg)),
            })
        }
    };
    match name {
        "/help" | "/?" => Input::Command(ChatCommand::Help),
        "/reset" | "/clear" => Input::Command(ChatCommand::Reset),
        "/system" => Input::Command(ChatCommand::System(
            (!arg.is_empty()).then(|| arg.to_string()),
        )),
        "/set" if arg.is_empty() => Input::Command(ChatCommand::Set(None)),
        "/set" => {
            let (key, value) = arg.split_once(char::is_whitespace).unwrap_or((arg, ""));
            Input::Command(ChatCommand::Set(Some((
                key.to_string(),
                value.trim().to_string(),
            ))))
        }
        "/stats" => Input::Command(ChatCommand::Stats),
        "/free" => Input::Command(ChatCommand::Free),
        "/schema" | "/choices" | "/grammar" | "/regex" if arg.is_empty() => Input::Invalid(
            match name {
                "/schema" => "/schema needs a file or a schema: /schema person.json",
                "/choices" => "/choices needs labels: /choices yes,no,maybe",
                "/grammar" => "/grammar needs a file: /grammar list.gbnf",
                _ => "/regex needs an expression: /regex [0-9]{4}",
            }
            .to_string(),
        ),
        "/schema" => Input::Command(ChatCommand::Shape(Shape::Schema(arg.to_string()))),
        "/choices" => Input::Command(ChatCommand::Shape(Shape::Choices(
            arg.split(',').map(|c| c.trim().to_string()).collect(),
        ))),
        "/grammar" => Input::Command(ChatCommand::Shape(Shape::Grammar(PathBuf::from(arg)))),
        "/regex" => Input::Command(ChatCommand::Shape(Shape::Regex(arg.to_string()))),
        "/tools" if arg.is_empty() => {
            Input::Invalid("/tools needs a file: /tools tools.json (or /tools off)".into())
        }
        "/tools" if arg == "off" => Input::Command(ChatCommand::Tools(None)),
        "/tools" => Input::Command(ChatCommand::Tools(Some(PathBuf::from(arg)))),
        "/tool_choice" if arg.is_empty() => Input::Invalid(
            "/tool_choice needs auto, required, none or a tool's name".into(),
        ),
        "/tool_choice" => Input::Command(ChatCommand::ToolChoice(arg.to_string())),
        "/tool" => match arg.split_once(char::is_whitespace) {
            Some((name, result)) if !result.trim().is_empty() => Input::Command(
                ChatCommand::Tool(name.to_string(), result.trim().to_string()),
            ),
            _ => Input::Invalid(
                "/tool needs a tool name and its result: /tool get_weather {\"temp\": 21}".into(),
            ),
        },
        "/save" => path("save"),
        "/load" => path("load"),
        "/exit" | "/quit" | "/bye" => Input::Command(ChatCommand::Exit),
        _ => Input::Invalid(format!(
            "unknown command {name}: /help lists them (start with // to send a message beginning with /)"
        )),
    }
}

/// Applies `/set KEY VALUE`; returns the confirmation to show, or what is wrong.
pub fn set(settings: &mut ChatSettings, key: &str, value: &str) -> Result<String, String> {
    let mut next = settings.clone();
    let s = &mut next.sampler;
    let bad = |what: &str| format!("{key}: expected {what}, got {value:?}");
    let float = || value.parse::<f32>().map_err(|_| bad("a number"));
    let count = || value.parse::<usize>().map_err(|_| bad("a whole number"));
    match key {
        "temp" | "temperature" => s.temperature = float()?,
        "top_k" => s.top_k = count()?,
        "top_p" => s.top_p = float()?,
        "min_p" => s.min_p = float()?,
        "repeat_penalty" => s.repeat_penalty = float()?,
        "presence_penalty" => s.presence_penalty = float()?,
        "frequency_penalty" => s.frequency_penalty = float()?,
        "repeat_last_n" => s.repeat_last_n = count()?,
        "seed" => s.seed = value.parse::<u64>().map_err(|_| bad("a whole number"))?,
        "max_tokens" => match count()? {
            0 => return Err(bad("at least 1")),
            n => next.max_tokens = n,
        },
        "stop" if value.is_empty() => next.stop.clear(),
        "stop" => next.stop = vec![unescape(value)],
        _ => {
            return Err(format!(
                "unknown setting {key:?}: one of {}",
                SETTINGS.join(", ")
            ))
        }
    }
    next.sampler.validate()?;
    *settings = next;
    Ok(match key {
        "stop" if settings.stop.is_empty() => "(stop strings cleared)".to_string(),
        _ => format!("({key} = {})", show(settings, key)),
    })
}

/// One setting's current value as `/set` would take it.
pub fn show(settings: &ChatSettings, key: &str) -> String {
    let s = &settings.sampler;
    match key {
        "temp" | "temperature" => s.temperature.to_string(),
        "top_k" => s.top_k.to_string(),
        "top_p" => s.top_p.to_string(),
        "min_p" => s.min_p.to_string(),
        "repeat_penalty" => s.repeat_penalty.to_string(),
        "presence_penalty" => s.presence_penalty.to_string(),
        "frequency_penalty" => s.frequency_penalty.to_string(),
        "repeat_last_n" => s.repeat_last_n.to_string(),
        "seed" => s.seed.to_string(),
        "max_tokens" => settings.max_tokens.to_string(),
        "stop" => format!("{:?}", settings.stop),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_commands_are_told_apart() {
        assert_eq!(parse("  hello  "), Input::Message("hello".into()));
        assert_eq!(parse("//json {}"), Input::Message("/json {}".into()));
        assert_eq!(parse("/reset"), Input::Command(ChatCommand::Reset));
        assert_eq!(parse("/exit"), Input::Command(ChatCommand::Exit));
        assert_eq!(
            parse("/system Be brief.  "),
            Input::Command(ChatCommand::System(Some("Be brief.".into())))
        );
        assert_eq!(parse("/system"), Input::Command(ChatCommand::System(None)));
        assert_eq!(
            parse("/set temp 0.7"),
            Input::Command(ChatCommand::Set(Some(("temp".into(), "0.7".into()))))
        );
        assert_eq!(parse("/set"), Input::Command(ChatCommand::Set(None)));
        assert_eq!(
            parse("/save my chat.json"),
            Input::Command(ChatCommand::Save("my chat.json".into()))
        );
        assert!(matches!(parse("/load"), Input::Invalid(m) if m.contains("file name")));
        assert!(matches!(parse("/frob"), Input::Invalid(m) if m.contains("/help")));
        assert_eq!(
            parse("/choices yes, no ,maybe"),
            Input::Command(ChatCommand::Shape(Shape::Choices(vec![
                "yes".into(),
                "no".into(),
                "maybe".into()
            ])))
        );
        assert_eq!(
            parse("/schema {\"type\": \"object\"}"),
            Input::Command(ChatCommand::Shape(Shape::Schema(
                "{\"type\": \"object\"}".into()
            )))
        );
        assert_eq!(parse("/free"), Input::Command(ChatCommand::Free));
        assert_eq!(
            parse("/tool get_weather {\"t\": 21}"),
            Input::Command(ChatCommand::Tool(
                "get_weather".into(),
                "{\"t\": 21}".into()
            ))
        );
        assert!(matches!(parse("/tool get_weather"), Input::Invalid(m) if m.contains("result")));
        assert!(matches!(parse("/schema"), Input::Invalid(_)));
        assert_eq!(
            parse("/tools my tools.json"),
            Input::Command(ChatCommand::Tools(Some("my tools.json".into())))
        );
        assert_eq!(
            parse("/tools off"),
            Input::Command(ChatCommand::Tools(None))
        );
        assert_eq!(
            parse("/tool_choice required"),
            Input::Command(ChatCommand::ToolChoice("required".into()))
        );
        assert!(matches!(parse("/tool_choice"), Input::Invalid(_)));
    }

    #[test]
    fn set_changes_one_setting_and_rejects_bad_values() {
        let mut s = ChatSettings::default();
        assert_eq!(set(&mut s, "temp", "0.7").unwrap(), "(temp = 0.7)");
        assert_eq!(s.sampler.temperature, 0.7);
        set(&mut s, "max_tokens", "64").unwrap();
        set(&mut s, "repeat_penalty", "1.1").unwrap();
        set(&mut s, "seed", "7").unwrap();
        set(&mut s, "stop", "\\n\\n").unwrap();
        assert_eq!(
            (s.max_tokens, s.sampler.repeat_penalty, s.sampler.seed),
            (64, 1.1, 7)
        );
        assert_eq!(s.stop, ["\n\n"]);
        set(&mut s, "stop", "").unwrap();
        assert!(s.stop.is_empty());
        let before = s.clone();
        assert!(set(&mut s, "temp", "-1").unwrap_err().contains("temp"));
        assert!(set(&mut s, "top_p", "abc")
            .unwrap_err()
            .contains("a number"));
        assert!(set(&mut s, "max_tokens", "0").is_err());
        assert!(set(&mut s, "warmth", "1").unwrap_err().contains("temp"));
        assert_eq!(s, before, "a rejected /set changes nothing");
    }
}
