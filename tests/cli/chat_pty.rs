//! `pocket run` as a person uses it: the chat driven through a pseudo-terminal (expectrl), on the
//! tiny qwen3 fixture (random weights: gibberish answers, but deterministic). The assertions
//! are on what the terminal shows.

#![cfg(unix)]

use expectrl::process::unix::WaitStatus;
use expectrl::{ControlCode, Eof, Expect, Regex, Session};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn fixture(name: &str) -> PathBuf {
    crate::common::root().join("fixtures/tiny").join(name)
}

/// A chat session plus everything the terminal showed so far, for failure messages.
struct Screen {
    session: expectrl::session::OsSession,
    shown: String,
}

impl Screen {
    /// `pocket run ARGS` in a terminal, with its default history under `state_home`.
    fn start(args: &[&str], state_home: &Path) -> Screen {
        let mut cmd = crate::common::pocket_command();
        cmd.arg("run")
            .args(args)
            .env("TERM", "xterm-256color")
            .env("XDG_STATE_HOME", state_home)
            .env_remove("NO_COLOR");
        let mut session = Session::spawn(cmd).expect("spawn pocket in a pty");
        session.set_expect_timeout(Some(Duration::from_secs(30)));
        Screen {
            session,
            shown: String::new(),
        }
    }

    /// Waits until the screen shows `needle` (a plain string or a `Regex`); returns what
    /// appeared since the previous call, up to and including the match.
    fn expect<N: expectrl::Needle>(&mut self, needle: N, what: &str) -> String {
        match self.session.expect(needle) {
            Ok(found) => {
                let text = String::from_utf8_lossy(found.before()).to_string()
                    + &String::from_utf8_lossy(&found[0]);
                self.shown.push_str(&text);
                text
            }
            Err(e) => panic!(
                "waiting for {what}: {e}\n--- the terminal showed ---\n{}",
                self.shown
            ),
        }
    }

    /// Types `text` and presses Enter.
    fn enter(&mut self, text: &str) {
        self.session.send(text).unwrap();
        self.session.send("\r").unwrap();
    }

    fn key(&mut self, code: ControlCode) {
        self.session.send(code).unwrap();
    }
}

#[test]
fn chat_session_in_a_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let history = tmp.path().join("state/history");
    let saved = tmp.path().join("chat.json");
    let model = fixture("qwen3-tiny");
    let mut t = Screen::start(
        &[
            model.to_str().unwrap(),
            "--history",
            history.to_str().unwrap(),
            "--max-tokens",
            "8",
            "--temp",
            "0.8",
            "--seed",
            "3",
            // Slow the tiny model down to a human pace so Ctrl-C lands mid-answer.
            "--debug-token-delay-ms",
            "20",
        ],
        tmp.path(),
    );
    t.expect("/help for commands", "the banner");
    t.expect("> ", "the prompt");

    // Two turns: each answer ends with a stats line; the second reuses the first's cache.
    t.enter("Hello there");
    let first = t.expect(
        Regex(r"\[\d+ tokens, [0-9.]+ tok/s · prompt \d+, \d+ tok/s · context \d+/256"),
        "the first stats line",
    );
    assert!(!first.contains("cached"), "nothing to reuse yet: {first}");
    t.expect("> ", "the prompt");
    t.enter("Tell me more");
    t.expect(
        Regex(r"prompt \d+ new \+ \d+ cached, \d+ tok/s"),
        "KV reuse in the second stats line",
    );
    t.expect("> ", "the prompt");

    t.enter("/reset");
    t.expect("(conversation cleared)", "the reset message");
    t.enter("/set temp 0");
    t.expect("(temp = 0)", "the /set confirmation");
    t.enter("/set max_tokens 1000");
    t.expect("(max_tokens = 1000)", "the /set confirmation");

    // A long answer, stopped with Ctrl-C after it has started streaming.
    t.enter("Write a very long story.");
    t.expect("story.", "the message echoed");
    std::thread::sleep(Duration::from_millis(400));
    t.key(ControlCode::EndOfText);
    t.expect("(stopped)", "the stopped marker");
    t.expect(
        Regex(r"context \d+/256 · stopped\]"),
        "the stats line after Ctrl-C",
    );
    t.expect("> ", "the prompt after an interrupted answer");

    // Ctrl-C at the prompt clears the line and stays.
    t.session.send("half-typed").unwrap();
    t.key(ControlCode::EndOfText);
    t.expect(
        "(Ctrl-D or /exit to leave)",
        "the hint after Ctrl-C at the prompt",
    );

    // A trailing backslash continues the message on the next line.
    t.enter("/set max_tokens 3");
    t.expect("(max_tokens = 3)", "the /set confirmation");
    t.enter("first line \\");
    t.enter("second line");
    t.expect(
        Regex(r"\[\d+ tokens, .* · context \d+/256"),
        "the stats line of the two-line message",
    );
    // Pasted text (bracketed paste, as terminals send it) keeps its line breaks in one
    // message.
    t.enter("\x1b[200~pasted one\rpasted two\x1b[201~");
    t.expect(
        Regex(r"\[\d+ tokens, .* · context \d+/256"),
        "the stats line of the pasted message",
    );
    t.enter(&format!("/save {}", saved.display()));
    t.expect("(saved 6 messages to", "the /save confirmation");

    // Ctrl-D at the prompt leaves with status 0. (Wait for the prompt: a Ctrl-D that arrives
    // before the line editor has the terminal in raw mode is eaten by the tty's cooked mode.)
    t.expect("> ", "the prompt after /save");
    t.key(ControlCode::EndOfTransmission);
    t.expect(Eof, "the end of the session");
    let status = t.session.get_process().wait().unwrap();
    assert!(
        matches!(status, WaitStatus::Exited(_, 0)),
        "{status:?}\n{}",
        t.shown
    );
    assert!(!t.shown.contains("panicked"), "{}", t.shown);
    // The whole screen, for `cargo test --test chat_pty -- --nocapture`.
    println!("{}", t.shown);

    // The saved conversation: after /reset, the stopped answer and the two-line message.
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
    let messages = saved["messages"].as_array().unwrap();
    assert_eq!(messages[0]["content"], "Write a very long story.");
    assert_eq!(messages[2]["content"], "first line \nsecond line");
    assert_eq!(messages[4]["content"], "pasted one\npasted two");
    assert_eq!(saved["settings"]["temperature"], 0.0);
    assert_eq!(saved["settings"]["max_tokens"], 3);

    // The history file has what was typed, the two-line message as one entry.
    let history = std::fs::read_to_string(&history).unwrap();
    for typed in ["Hello there", "/reset", "/set temp 0", "second line"] {
        assert!(
            history.contains(typed),
            "{typed:?} not in history:\n{history}"
        );
    }
    assert!(!history.contains("half-typed"));
}

#[test]
fn unknown_commands_and_bad_settings_are_explained_not_fatal() {
    let state = tempfile::tempdir().unwrap();
    let model = fixture("qwen3-tiny");
    let mut t = Screen::start(&[model.to_str().unwrap()], state.path());
    t.expect("> ", "the prompt");
    t.enter("/frobnicate");
    t.expect("unknown command /frobnicate", "the unknown-command note");
    t.enter("/set temp hot");
    t.expect("temp: expected a number", "the bad-value note");
    t.enter("/load /nonexistent/chat.json");
    t.expect("(error: reading /nonexistent/chat.json", "the load error");
    t.enter("/help");
    t.expect("/save FILE", "the help text");
    t.enter("/exit");
    t.expect(Eof, "the end of the session");
    let status = t.session.get_process().wait().unwrap();
    assert!(matches!(status, WaitStatus::Exited(_, 0)), "{status:?}");
    // Without --history, the history goes to $XDG_STATE_HOME/pocket/history.
    let history = std::fs::read_to_string(state.path().join("pocket/history")).unwrap();
    assert!(history.contains("/frobnicate"), "{history}");

    // --no-history writes nothing.
    let state = tempfile::tempdir().unwrap();
    let mut t = Screen::start(&[model.to_str().unwrap(), "--no-history"], state.path());
    t.expect("> ", "the prompt");
    t.enter("/exit");
    t.expect(Eof, "the end of the session");
    assert!(!state.path().join("pocket").exists());
}

/// `/choices`, `/schema` and `/free` in a terminal chat: constrained answers until `/free`,
/// and a bad schema explained without ending the chat.
#[test]
fn constraints_can_be_set_and_cleared_in_a_chat() {
    let state = tempfile::tempdir().unwrap();
    let model = fixture("qwen2-tiny");
    let mut t = Screen::start(
        &[model.to_str().unwrap(), "--temp", "0", "-n", "40"],
        state.path(),
    );
    t.expect("> ", "the prompt");
    t.enter("/choices red,green,blue");
    t.expect(
        "answers follow the 3 choices until /free",
        "the choices note",
    );
    t.expect("> ", "the prompt");
    t.enter("pick one");
    let shown = t.expect("> ", "the answer and the next prompt");
    let answer = plain(&shown);
    assert!(
        ["red", "green", "blue"]
            .iter()
            .any(|c| answer.lines().any(|l| l.trim() == *c)),
        "{answer}"
    );
    t.enter(r#"/schema {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["n"], "additionalProperties": false}"#);
    t.expect("answers follow the JSON schema", "the schema note");
    t.expect("> ", "the prompt");
    t.enter("a number please");
    let answer = plain(&t.expect("> ", "the JSON answer"));
    assert!(
        answer.lines().any(|l| {
            let l = l.trim();
            l.len() == 8 && l.starts_with("{\"n\": ") && l.ends_with('}')
        }),
        "{answer}"
    );
    t.enter(r#"/schema {"type": "array", "uniqueItems": true}"#);
    t.expect("uniqueItems", "the refusal");
    t.enter("/free");
    t.expect("free text again", "the free note");
    let tools = state.path().join("tools.json");
    std::fs::write(
        &tools,
        r#"[{"name": "get_weather", "parameters": {"type": "object"}}]"#,
    )
    .unwrap();
    t.enter(&format!("/tools {}", tools.display()));
    t.expect("tools offered: get_weather", "the tools note");
    t.enter("/tool_choice lookup");
    t.expect(
        "expected auto, required, none or a tool's name",
        "the bad choice note",
    );
    t.enter("/tool_choice get_weather");
    t.expect("tool choice: get_weather", "the choice note");
    t.enter("/tools off");
    t.expect("no tools offered", "the tools-off note");
    t.enter("/exit");
    t.expect(Eof, "the end of the session");
    let status = t.session.get_process().wait().unwrap();
    assert!(matches!(status, WaitStatus::Exited(_, 0)), "{status:?}");
}

/// Lines typed while an answer streams are not echoed into it; they run next, in order, and
/// text typed after the last Enter waits at the next prompt.
#[test]
fn lines_typed_during_an_answer_run_next_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let saved = tmp.path().join("chat.json");
    let model = fixture("qwen3-tiny");
    let mut t = Screen::start(
        &[
            model.to_str().unwrap(),
            "--no-history",
            "--temp",
            "0",
            "--max-tokens",
            "12",
            "--debug-token-delay-ms",
            "80",
        ],
        tmp.path(),
    );
    t.expect("> ", "the prompt");
    t.enter("first question");
    t.expect("first question", "the message echoed");
    // The answer takes about a second (12 tokens × 80 ms); type while it streams.
    std::thread::sleep(Duration::from_millis(250));
    t.enter("second question");
    t.session.send("third par").unwrap();
    let first = t.expect(Regex(r"\[\d+ tokens, [^\]]*\]"), "the first stats line");
    assert!(
        !first.contains("second") && !first.contains("third"),
        "typed-ahead text was echoed into the answer: {first:?}"
    );
    // The queued line is shown after the prompt, as if typed now, and answered.
    t.expect(
        Regex(r"> (?:\x1b\[[0-9;?]*[A-Za-z])*second question"),
        "the typed-ahead line at the prompt",
    );
    t.expect(Regex(r"\[\d+ tokens, [^\]]*\]"), "the second stats line");
    // The unfinished text waits at the next prompt; finishing it sends "third part".
    t.expect(
        Regex(r"> (?:\x1b\[[0-9;?]*[A-Za-z])*third par"),
        "the unfinished text at the prompt",
    );
    t.enter("t");
    t.expect(Regex(r"\[\d+ tokens, [^\]]*\]"), "the third stats line");
    t.enter(&format!("/save {}", saved.display()));
    t.expect("(saved 6 messages to", "the /save confirmation");
    t.enter("/exit");
    t.expect(Eof, "the end of the session");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
    let users: Vec<&str> = saved["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        users,
        ["first question", "second question", "third part"],
        "{}",
        t.shown
    );
}

/// An answer cut at its token limit inside a multi-byte character ends on the last whole
/// character (no U+FFFD), and the chat says it was cut.
#[test]
fn an_answer_cut_inside_a_character_ends_on_a_whole_one() {
    let model = fixture("qwen3-tiny");
    let message = "Hello there";
    // The greedy answer's tokens (the one-shot prompt is the chat's first prompt), and the
    // first length at which decoding them would end in an incomplete character.
    let out = crate::common::pocket_command()
        .args(["run", model.to_str().unwrap(), "-p", message, "--temp", "0"])
        .args(["-n", "60", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<u32> = v["generated_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect();
    let tok = pocket::tokenizer::TextTokenizer::from_file(&model.join("tokenizer.json")).unwrap();
    let cut = (1..=ids.len())
        .find(|&k| tok.decode(&ids[..k], true).ends_with('\u{FFFD}'))
        .expect("the fixture's greedy answer splits a character somewhere in 60 tokens");
    let whole = pocket::tokenizer::trim_incomplete_char(&tok.decode(&ids[..cut], true)).to_string();

    let tmp = tempfile::tempdir().unwrap();
    let n = cut.to_string();
    let mut t = Screen::start(
        &[
            model.to_str().unwrap(),
            "--no-history",
            "--temp",
            "0",
            "--max-tokens",
            &n,
        ],
        tmp.path(),
    );
    t.expect("> ", "the prompt");
    t.enter(message);
    let shown = t.expect(
        format!("(cut at the {cut}-token limit").as_str(),
        "the cut note",
    );
    let shown = plain(&shown);
    let answer = shown.split(message).last().unwrap();
    let text = answer.split("(cut at").next().unwrap().trim_end();
    // The screen shows what was streamed: the whole characters, no replacement character at
    // the end (the terminal turns \n into \r\n).
    let text = text.trim_start_matches(['\r', '\n']).replace("\r\n", "\n");
    assert!(
        !text.trim_end().ends_with('\u{FFFD}'),
        "cut after {cut} tokens: {text:?}"
    );
    assert!(
        text.trim_end().ends_with(whole.trim_end()),
        "{text:?} should end with {whole:?}"
    );
    t.enter("/exit");
    t.expect(Eof, "the end of the session");
}

/// Screen text without ANSI escape sequences (colours, cursor moves).
fn plain(screen: &str) -> String {
    let mut out = String::new();
    let mut chars = screen.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            if chars.peek() == Some(&'[') {
                chars.next();
                while let Some(x) = chars.next() {
                    if ('@'..='~').contains(&x) {
                        break;
                    }
                }
            } else {
                chars.next();
            }
        } else {
            out.push(c);
        }
    }
    out
}
