//! `pocket run` as a person uses it: the chat driven through a pseudo-terminal (expectrl), on the
//! tiny qwen3 fixture (random weights: gibberish answers, but deterministic). The assertions
//! are on what the terminal shows.

#![cfg(unix)]

use expectrl::process::unix::WaitStatus;
use expectrl::{ControlCode, Eof, Expect, Regex, Session};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/tiny")
        .join(name)
}

/// A chat session plus everything the terminal showed so far, for failure messages.
struct Screen {
    session: expectrl::session::OsSession,
    shown: String,
}

impl Screen {
    /// `pocket run ARGS` in a terminal, with its default history under `state_home`.
    fn start(args: &[&str], state_home: &Path) -> Screen {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pocket"));
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

    // Ctrl-D leaves with status 0.
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
