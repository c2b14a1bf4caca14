//! Tool calls: OpenAI's `tools` array read and checked, the constraint a call must satisfy,
//! and calls parsed out of an answer.
//!
//! Calls are written the way Qwen2.5/Qwen3 (and Hermes-style templates) write them:
//! `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`. A template that takes `tools`
//! renders the definitions itself; for one that does not, [`system_text`] describes them in
//! the same words, in the system prompt.

use super::spec::{quote, with_options, Constraint, ConstraintError};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

pub const CALL_OPEN: &str = "<tool_call>";
pub const CALL_CLOSE: &str = "</tool_call>";

/// One function the model may call.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// A JSON schema for the arguments object.
    pub parameters: Value,
    /// The definition as the user gave it, for the chat template.
    pub raw: Value,
}

/// A call the model made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub name: String,
    pub arguments: Value,
}

impl ToolCall {
    /// OpenAI's shape of a call, the one `pocket serve` and `pocket run --json` both give:
    /// `{"id", "type": "function", "function": {"name", "arguments"}}`, the arguments as a
    /// JSON text.
    pub fn openai(&self, id: &str) -> Value {
        json!({"id": id, "type": "function",
               "function": {"name": self.name, "arguments": self.arguments.to_string()}})
    }
}

/// `--tool-choice`: may, must, or must not call; or must call this one.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolChoice {
    Auto,
    Required,
    None,
    Named(String),
}

impl ToolChoice {
    pub fn parse(s: &str) -> ToolChoice {
        match s {
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            "none" => ToolChoice::None,
            name => ToolChoice::Named(name.to_string()),
        }
    }
}

/// Reads an OpenAI `tools` array (`[{"type": "function", "function": {name, description,
/// parameters}}]`; a bare `{name, parameters}` is taken too). Errors name the entry.
pub fn parse_tools(text: &str) -> Result<Vec<Tool>, ConstraintError> {
    let v: Value = serde_json::from_str(text).map_err(|e| {
        ConstraintError(format!(
            "not valid JSON at line {} column {}: {e}",
            e.line(),
            e.column()
        ))
    })?;
    let items = match &v {
        Value::Array(a) => a,
        Value::Object(o) if o.get("tools").is_some_and(Value::is_array) => {
            o["tools"].as_array().expect("checked")
        }
        _ => return Err(ConstraintError("expected a JSON array of tools".into())),
    };
    if items.is_empty() {
        return Err(ConstraintError("the tools array is empty".into()));
    }
    let mut tools: Vec<Tool> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = |m: &str| ConstraintError(format!("tools[{i}]: {m}"));
        let f = match item.get("type").and_then(Value::as_str) {
            Some("function") => item
                .get("function")
                .filter(|f| f.is_object())
                .ok_or_else(|| at("\"function\" must be an object"))?,
            Some(other) => {
                return Err(at(&format!(
                    "type {other:?}: only \"function\" tools exist"
                )))
            }
            None if item.is_object() => item,
            None => return Err(at("expected an object")),
        };
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| at("\"name\" must be a string"))?;
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
        {
            return Err(at(&format!(
                "name {name:?}: use letters, digits, '_', '-' or '.'"
            )));
        }
        if tools.iter().any(|t| t.name == name) {
            return Err(at(&format!("name {name:?} is used twice")));
        }
        let description = match f.get("description") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(at("\"description\" must be a string")),
        };
        let parameters = match f.get("parameters") {
            None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
            Some(p @ Value::Object(_)) => p.clone(),
            Some(_) => return Err(at("\"parameters\" must be a JSON schema object")),
        };
        if let Some(t) = parameters.get("type") {
            if t != "object" {
                return Err(at(
                    "\"parameters\" must describe an object (type \"object\")",
                ));
            }
        }
        Constraint::json_schema(parameters.clone())
            .map_err(|e| at(&format!("parameters{}", prefix_pointer(&e.0))))?;
        let raw = if item.get("type").is_some() {
            item.clone()
        } else {
            json!({"type": "function", "function": item})
        };
        tools.push(Tool {
            name: name.to_string(),
            description,
            parameters,
            raw,
        });
    }
    Ok(tools)
}

/// A JSON-pointer error ("/properties/x: …") read as a continuation of "parameters".
fn prefix_pointer(msg: &str) -> String {
    if msg.starts_with('/') {
        msg.to_string()
    } else {
        format!(": {msg}")
    }
}

/// The schema of one call object `{"name": …, "arguments": …}` to any of `tools`.
fn call_schema(tools: &[&Tool]) -> Value {
    let one = |t: &Tool| {
        json!({
            "type": "object",
            "properties": {"name": {"const": t.name}, "arguments": t.parameters},
            "required": ["name", "arguments"],
            "additionalProperties": false,
        })
    };
    match tools {
        [t] => one(t),
        many => json!({"anyOf": many.iter().map(|t| one(t)).collect::<Vec<_>>()}),
    }
}

/// The constraint on a whole answer that must be one call (`required`, or a name), or, with
/// `after_open`, on what follows a `<tool_call>` the model wrote itself (`auto`).
pub fn call_constraint(
    tools: &[Tool],
    choice: &ToolChoice,
    after_open: bool,
) -> Result<Constraint, ConstraintError> {
    let chosen: Vec<&Tool> = match choice {
        ToolChoice::Named(n) => vec![tools.iter().find(|t| &t.name == n).ok_or_else(|| {
            ConstraintError(format!(
                "--tool-choice {n:?}: no such tool (the tools are {})",
                tools
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?],
        _ => tools.iter().collect(),
    };
    let schema = with_options(&call_schema(&chosen));
    let open = if after_open {
        String::new()
    } else {
        format!("{} ", quote(CALL_OPEN))
    };
    Ok(Constraint::Lark(format!(
        "start: {open}\"\\n\" call \"\\n\" {}\ncall: %json {schema}\n",
        quote(CALL_CLOSE)
    )))
}

/// The definitions described in the system prompt, for templates that do not take `tools`
/// (the words Qwen2.5's template uses).
pub fn system_text(tools: &[Tool]) -> String {
    let mut s = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for t in tools {
        s.push('\n');
        s.push_str(&t.raw.to_string());
    }
    s.push_str(
        "\n</tools>\n\nFor each function call, return a json object with function name and \
         arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": \
         <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    );
    s
}

/// An answer split into its text and its calls. A `<tool_call>` block whose contents are
/// not a call object is left in the text and reported in `errors`.
#[derive(Debug, Default, PartialEq)]
pub struct Parsed {
    pub content: String,
    pub calls: Vec<ToolCall>,
    pub errors: Vec<String>,
}

/// Calls in `answer`: `<tool_call>` blocks; or, when there are none, an answer that is
/// nothing but a call object to one of `names` (small models often drop the tags).
pub fn parse_calls(answer: &str, names: &[&str]) -> Parsed {
    let out = tagged_calls(answer);
    if !out.calls.is_empty() || !out.errors.is_empty() {
        return out;
    }
    match read_call(unfenced(answer.trim())) {
        Ok(call) if names.contains(&call.name.as_str()) => Parsed {
            content: String::new(),
            calls: vec![call],
            errors: Vec::new(),
        },
        _ => out,
    }
}

/// The inside of a Markdown code fence (```` ```json … ``` ````) around the whole text, else the
/// text: code-tuned models write a call that way.
fn unfenced(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let Some(body) = rest.strip_suffix("```") else {
        return text;
    };
    match body.split_once('\n') {
        Some((lang, inner)) if lang.trim().chars().all(|c| c.is_ascii_alphanumeric()) => {
            inner.trim()
        }
        _ => text,
    }
}

fn tagged_calls(answer: &str) -> Parsed {
    let mut out = Parsed::default();
    let mut rest = answer;
    while let Some(start) = rest.find(CALL_OPEN) {
        out.content.push_str(&rest[..start]);
        let after = &rest[start + CALL_OPEN.len()..];
        let (body, next) = match after.find(CALL_CLOSE) {
            Some(end) => (&after[..end], &after[end + CALL_CLOSE.len()..]),
            None => (after, ""),
        };
        match read_call(body.trim()) {
            Ok(call) => out.calls.push(call),
            Err(e) => {
                out.errors.push(e);
                out.content.push_str(&rest[start..rest.len() - next.len()]);
            }
        }
        rest = next;
    }
    out.content.push_str(rest);
    out.content = out.content.trim().to_string();
    out
}

fn read_call(body: &str) -> Result<ToolCall, String> {
    let v: Value = serde_json::from_str(body).map_err(|e| format!("tool call is not JSON: {e}"))?;
    let name = v
        .get("name")
        .and_then(Value::as_str)
        .ok_or("tool call has no \"name\" string")?;
    let arguments = match v.get("arguments") {
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
        Some(a) => a.clone(),
        None => json!({}),
    };
    Ok(ToolCall {
        name: name.to_string(),
        arguments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOOLS: &str = r#"[{"type": "function", "function": {"name": "get_weather",
        "description": "Weather now", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
        {"name": "ping"}]"#;

    #[test]
    fn tools_parse_in_both_shapes_and_bad_entries_are_named() {
        let t = parse_tools(TOOLS).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[1].raw["function"]["name"], "ping");
        for (text, want) in [
            ("[]", "empty"),
            ("{}", "array"),
            (
                "[{\"type\": \"function\", \"function\": {}}]",
                "tools[0]: \"name\"",
            ),
            ("[{\"name\": \"a b\"}]", "tools[0]: name"),
            (
                "[{\"name\": \"a\"}, {\"name\": \"a\"}]",
                "tools[1]: name \"a\" is used twice",
            ),
            (
                "[{\"name\": \"a\", \"parameters\": {\"type\": \"string\"}}]",
                "describe an object",
            ),
            (
                "[{\"name\": \"a\", \"parameters\": {\"oneOf\": [{}, {}]}}]",
                "tools[0]: parameters/oneOf",
            ),
            ("[1", "line 1 column"),
        ] {
            let e = parse_tools(text).unwrap_err().0;
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn calls_are_parsed_out_of_the_text() {
        let names = ["get_weather", "x"];
        let p = parse_calls(
            "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"巴黎\"}}\n</tool_call>",
            &names,
        );
        assert_eq!(p.content, "Sure.");
        assert_eq!(p.calls[0].name, "get_weather");
        assert_eq!(p.calls[0].arguments["city"], "巴黎");
        let p = parse_calls(
            "<tool_call>{\"name\": \"x\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
            &names,
        );
        assert_eq!(p.calls[0].arguments["a"], 1);
        let p = parse_calls("a <tool_call>{oops</tool_call> b", &names);
        assert!(p.calls.is_empty() && p.errors.len() == 1);
        assert_eq!(p.content, "a <tool_call>{oops</tool_call> b");
        // Untagged: a bare call object to a known tool is a call; to an unknown one, text.
        let bare = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}";
        assert_eq!(parse_calls(bare, &names).calls[0].arguments["city"], "Oslo");
        let fenced = format!("```json\n{bare}\n```");
        assert_eq!(parse_calls(&fenced, &names).calls[0].name, "get_weather");
        assert!(parse_calls("```json\n{\"a\": 1}\n```", &names)
            .calls
            .is_empty());
        let joke = "{\"name\": \"Joke\", \"arguments\": {}}";
        assert!(parse_calls(joke, &names).calls.is_empty());
    }

    #[test]
    fn named_choice_must_exist() {
        let t = parse_tools(TOOLS).unwrap();
        let e = call_constraint(&t, &ToolChoice::Named("nope".into()), false)
            .unwrap_err()
            .0;
        assert!(e.contains("get_weather, ping"), "{e}");
        let c = call_constraint(&t, &ToolChoice::Required, false).unwrap();
        assert!(
            c.lark().starts_with("start: \"<tool_call>\" \"\\n\" call"),
            "{}",
            c.lark()
        );
    }
}
