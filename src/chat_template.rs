//! Chat templates: the model's Jinja template rendered with minijinja, set up the way
//! transformers sets up jinja2 (`trim_blocks`, `lstrip_blocks`, loop controls,
//! `raise_exception`, a Python-`json.dumps`-compatible `tojson`, `strftime_now`) plus Python
//! string methods (`.strip()`, `.startswith()`, `.split()` …) from minijinja-contrib.

use crate::alloc_guard::{self, BudgetError};
use crate::Error;
use minijinja::{Environment, ErrorKind, Value};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One message of a conversation: `system`, `user`, `assistant` (possibly with tool calls)
/// or `tool` (a tool's result, naming the tool).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
    /// An assistant's calls, as templates read them:
    /// `{"type": "function", "function": {"name": …, "arguments": {…}}}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<serde_json::Value>,
    /// A tool message's tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A tool message's answer to this call (OpenAI's `tool_call_id`; some templates show it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
            tool_calls: Vec::new(),
            name: None,
            tool_call_id: None,
        }
    }
}

pub struct ChatTemplate {
    env: Arc<Environment<'static>>,
    pub source: String,
    pub origin: PathBuf,
}

/// Upper bound on template work, so a hostile template cannot loop forever.
pub const TEMPLATE_FUEL: u64 = 50_000_000;
/// Upper bound on the memory a template may use while compiling or rendering.
pub const TEMPLATE_MEMORY: usize = 256 << 20;

static MEMORY_BUDGET: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(TEMPLATE_MEMORY);

/// Changes the template memory budget for this process. A template that hits it leaves its
/// worker thread parked holding up to the budget, so a process that renders many untrusted
/// templates (a fuzzer, a server) wants a small one.
pub fn set_memory_budget(bytes: usize) {
    MEMORY_BUDGET.store(bytes, std::sync::atomic::Ordering::Relaxed);
}
/// Upper bound on a rendered conversation (a 32K-token context is about 130 KB of text).
pub const MAX_RENDERED: usize = 16 << 20;

fn build_env(source: String) -> Result<Environment<'static>, String> {
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
        .map_err(|e| e.to_string())?;
    env.set_syntax(syntax);
    env.set_fuel(Some(TEMPLATE_FUEL));
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_filter("tojson", tojson);
    env.add_template_owned("chat", source)
        .map_err(|e| describe(&e))?;
    Ok(env)
}

/// Runs template work under [`TEMPLATE_MEMORY`] (see `alloc_guard`).
fn guarded<T: Send + 'static>(
    origin: &Path,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Error> {
    let budget = MEMORY_BUDGET.load(std::sync::atomic::Ordering::Relaxed);
    alloc_guard::run_with_budget(budget, f).map_err(|e| Error::Template {
        path: origin.to_path_buf(),
        reason: match e {
            BudgetError::Exceeded => format!(
                "needs more than {} MiB of memory to render (hostile or broken template)",
                budget >> 20
            ),
            BudgetError::Failed => "the template engine failed".into(),
        },
    })
}

/// Output that refuses to grow past [`MAX_RENDERED`].
struct Capped(Vec<u8>);

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_RENDERED {
            self.0
                .extend_from_slice(&buf[..MAX_RENDERED + 1 - self.0.len().min(MAX_RENDERED)]);
            return Err(std::io::Error::other("rendered text too large"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl ChatTemplate {
    pub fn new(source: &str, origin: &Path) -> Result<ChatTemplate, Error> {
        let src = source.to_string();
        let env = guarded(origin, move || build_env(src))?.map_err(|reason| Error::Template {
            path: origin.to_path_buf(),
            reason,
        })?;
        Ok(ChatTemplate {
            env: Arc::new(env),
            source: source.to_string(),
            origin: origin.to_path_buf(),
        })
    }

    /// Renders a conversation. `bos_token`/`eos_token` are the tokenizer's special tokens, which
    /// templates insert themselves. A template gets [`TEMPLATE_FUEL`] instructions,
    /// [`TEMPLATE_MEMORY`] bytes and [`MAX_RENDERED`] bytes of output.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<String, Error> {
        self.render_with_tools(messages, None, add_generation_prompt, bos_token, eos_token)
    }

    /// [`render`](Self::render) with OpenAI-style tool definitions in the template's `tools`
    /// variable (as transformers passes them); `None` leaves it undefined.
    pub fn render_with_tools(
        &self,
        messages: &[Message],
        tools: Option<&[serde_json::Value]>,
        add_generation_prompt: bool,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<String, Error> {
        let env = self.env.clone();
        let messages = messages.to_vec();
        let tools = tools.map(|t| t.to_vec());
        let (bos, eos) = (bos_token.to_string(), eos_token.to_string());
        let out = guarded(&self.origin, move || -> Result<String, String> {
            let tmpl = env.get_template("chat").map_err(|e| describe(&e))?;
            let mut ctx = minijinja::context! {
                messages => Value::from(minijinja::value::Serde(&messages)),
                add_generation_prompt => add_generation_prompt,
                bos_token => bos,
                eos_token => eos,
            };
            if let Some(tools) = &tools {
                ctx = minijinja::context! { tools => Value::from(minijinja::value::Serde(tools)), ..ctx };
            }
            let mut out = Capped(Vec::new());
            match tmpl.render_captured_to(ctx, &mut out) {
                Ok(_) => String::from_utf8(out.0)
                    .map_err(|_| "rendered text is not valid UTF-8".to_string()),
                Err(_) if out.0.len() > MAX_RENDERED => Err(format!(
                    "renders more than {} MiB (hostile or broken template)",
                    MAX_RENDERED >> 20
                )),
                Err(e) => Err(describe(&e)),
            }
        })?;
        out.map_err(|reason| Error::Template {
            path: self.origin.clone(),
            reason,
        })
    }
}

impl ChatTemplate {
    /// Renders the template with the members of the JSON object `globals` as its variables (a
    /// decision prompt's `state`, `instructions`, `options` …), under the same fuel, memory
    /// and output limits as a conversation.
    pub fn render_globals(&self, globals: &serde_json::Value) -> Result<String, Error> {
        let env = self.env.clone();
        let globals = globals.clone();
        let out = guarded(&self.origin, move || -> Result<String, String> {
            let tmpl = env.get_template("chat").map_err(|e| describe(&e))?;
            let ctx = Value::from(minijinja::value::Serde(&globals));
            let mut out = Capped(Vec::new());
            match tmpl.render_captured_to(ctx, &mut out) {
                Ok(_) => String::from_utf8(out.0)
                    .map_err(|_| "rendered text is not valid UTF-8".to_string()),
                Err(_) if out.0.len() > MAX_RENDERED => Err(format!(
                    "renders more than {} MiB (hostile or broken template)",
                    MAX_RENDERED >> 20
                )),
                Err(e) => Err(describe(&e)),
            }
        })?;
        out.map_err(|reason| Error::Template {
            path: self.origin.clone(),
            reason,
        })
    }
}

impl ChatTemplate {
    /// The template renders `tools` itself (Qwen2.5/Qwen3, Llama 3.x, Hermes): the word
    /// appears in its source. Otherwise a caller describes the tools in the system prompt.
    pub fn takes_tools(&self) -> bool {
        self.source.contains("tools")
    }
}

fn describe(e: &minijinja::Error) -> String {
    match e.line() {
        Some(line) => format!(
            "{} (line {line})",
            e.detail().unwrap_or(&e.kind().to_string())
        ),
        None => e
            .detail()
            .map(str::to_string)
            .unwrap_or_else(|| e.kind().to_string()),
    }
}

fn raise_exception(message: String) -> Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=indent)`, i.e. Python's
/// separators (`", "`, `": "`), keys in insertion order, non-ASCII kept, no HTML escaping.
fn tojson(value: Value, kwargs: minijinja::value::Kwargs) -> Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(&value)
        .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let mut out = String::new();
    python_json(&json, indent, 0, &mut out);
    Ok(Value::from_safe_string(out))
}

/// `json.dumps(v, ensure_ascii=False, indent=indent)` as Python writes it.
pub fn python_json_string(v: &serde_json::Value, indent: Option<usize>) -> String {
    let mut out = String::new();
    python_json(v, indent, 0, &mut out);
    out
}

fn python_json(v: &serde_json::Value, indent: Option<usize>, depth: usize, out: &mut String) {
    use serde_json::Value as J;
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v {
        J::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                python_json(item, indent, depth + 1, out);
            }
            newline(out, depth);
            out.push(']');
        }
        J::Object(map) if !map.is_empty() => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                out.push_str(&serde_json::to_string(k).unwrap_or_default());
                out.push_str(": ");
                python_json(item, indent, depth + 1, out);
            }
            newline(out, depth);
            out.push('}');
        }
        J::Array(_) => out.push_str("[]"),
        J::Object(_) => out.push_str("{}"),
        J::Null => out.push_str("null"),
        other => out.push_str(&serde_json::to_string(other).unwrap_or_default()),
    }
}

/// `strftime_now(format)`: today's UTC date/time (Llama 3 templates put the date in the system
/// prompt). Supports %Y %m %d %e %H %M %S %b %B %a %A %j %%.
fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    strftime(secs, &format)
}

fn strftime(secs: i64, format: &str) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cum[(month - 1) as usize] + day + i64::from(leap && month > 2);
    let weekday = DAYS[days.rem_euclid(7) as usize];
    let mname = MONTHS[(month - 1) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&year.to_string()),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('e') => out.push_str(&format!("{day:2}")),
            Some('H') => out.push_str(&format!("{:02}", rem / 3600)),
            Some('M') => out.push_str(&format!("{:02}", rem / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", rem % 60)),
            Some('b') => out.push_str(&mname[..3]),
            Some('B') => out.push_str(mname),
            Some('a') => out.push_str(&weekday[..3]),
            Some('A') => out.push_str(weekday),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, msgs: &[Message]) -> Result<String, Error> {
        ChatTemplate::new(src, Path::new("t.jinja"))?.render(msgs, true, "<s>", "</s>")
    }

    #[test]
    fn python_methods_and_exceptions() {
        let src = "{% for m in messages %}{% if m.role == 'bad' %}{{ raise_exception('no ' + m.role) }}{% endif %}\
                   [{{ m.content.strip() }}|{{ m.content.startswith(' h') }}]{% endfor %}";
        let out = render(src, &[Message::new("user", " hi ")]).unwrap();
        assert_eq!(out, "[hi|True]");
        let err = render(src, &[Message::new("bad", "x")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("no bad") && err.contains("t.jinja"), "{err}");
    }

    #[test]
    fn tojson_matches_python_json_dumps() {
        let src = "{{ messages | tojson }}|{{ {'a': [1, 2.5, none, true], 'é': '<\"x\">'} | tojson }}|{{ [1] | tojson(indent=2) }}";
        let out = render(src, &[Message::new("user", "ü\n")]).unwrap();
        assert_eq!(
            out,
            "[{\"role\": \"user\", \"content\": \"ü\\n\"}]|{\"a\": [1, 2.5, null, true], \"é\": \"<\\\"x\\\">\"}|[\n  1\n]"
        );
    }

    #[test]
    fn strftime_known_dates() {
        assert_eq!(strftime(0, "%d %b %Y %A"), "01 Jan 1970 Thursday");
        assert_eq!(
            strftime(1_709_210_096, "%Y-%m-%d %H:%M:%S %j %B"),
            "2024-02-29 12:34:56 060 February"
        );
    }

    #[test]
    fn hostile_loop_runs_out_of_fuel() {
        let src =
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}";
        assert!(render(src, &[]).is_err());
    }
}
