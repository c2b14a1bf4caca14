//! The code-execution sandbox against hostile completions: each fails its own problem, the
//! machine around it is untouched (a canary directory outside the sandbox survives, a loopback
//! listener sees no connection, our process and its neighbours live), and the run goes on to
//! pass an honest completion after them.

use pocket_evals::code::run_programs;
use pocket_evals::code::sandbox::{Limits, Sandbox, Strength};
use std::net::TcpListener;

fn sandbox(timeout: f64, strength: Strength) -> Sandbox {
    let limits = Limits {
        timeout,
        ..Limits::default()
    };
    let s = Sandbox::with_strength(limits, strength).expect("python3 runs here");
    eprintln!("sandbox: {}", s.isolation());
    s
}

const CHECK: &str = "\ndef check(candidate):\n    assert candidate(2) == 4\n\ncheck(double)\n";

fn program(body: &str) -> String {
    format!("def double(x):\n{}\n{CHECK}", indent(body))
}

fn indent(body: &str) -> String {
    body.lines().map(|l| format!("    {l}\n")).collect()
}

#[test]
fn hostile_completions_fail_alone_and_the_run_goes_on() {
    hostile_run(Strength::Strongest, true);
}

/// The fallback of a machine without user namespaces: the socket guard in Python, Landlock, the
/// limits and (as root) the `nobody` user contain the same completions, even one that reloads
/// the socket module (Landlock refuses its TCP connect).
#[test]
fn without_namespaces_the_same_completions_fail_alone() {
    let s = sandbox(1.0, Strength::WithoutNamespaces);
    if !s.isolation().landlock.starts_with("landlock abi") {
        // The machine, not the data: CI's machine has Landlock, and POCKET_REQUIRE_DATA=1 (set
        // by CI) makes its absence a failure rather than a skip.
        assert!(
            std::env::var_os("POCKET_REQUIRE_DATA").is_none_or(|v| v != "1"),
            "no Landlock here ({}), and POCKET_REQUIRE_DATA=1 requires it",
            s.isolation()
        );
        eprintln!("skipped: no Landlock here ({})", s.isolation());
        return;
    }
    hostile_run(Strength::WithoutNamespaces, true);
}

/// The weakest fallback (no namespaces, no Landlock): what still holds is the socket guard for
/// Python's own socket functions, the limits, and as root the `nobody` user (no deleting our
/// files, no signals to our processes). A program that reloads the socket module gets a
/// connection there: docs/evals.md says so, and this run leaves that program out.
#[test]
fn without_namespaces_or_landlock_the_guard_and_limits_still_hold() {
    hostile_run(Strength::WithoutNamespacesOrLandlock, false);
}

/// One hostile run at a time: each checks that no sandboxed process is left anywhere.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn hostile_run(strength: Strength, reload_socket: bool) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let canary_root = tempfile::tempdir().unwrap();
    let canary = canary_root.path().join("canary");
    std::fs::create_dir(&canary).unwrap();
    std::fs::write(canary.join("keep.txt"), "alive").unwrap();
    // Readable by anyone, as a user's files usually are: only the sandbox stops deletion.
    use std::os::unix::fs::PermissionsExt;
    for p in [canary_root.path(), canary.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let canary_s = canary.display().to_string();

    let hostile: Vec<(&str, String)> =
        vec![
        // The guard's os.fork is None; libc's fork is not.
        (
            "fork bomb",
            "import ctypes\nlibc = ctypes.CDLL(None)\nwhile True:\n    libc.fork()".into(),
        ),
        (
            "rm -rf a canary outside the sandbox",
            format!(
                // `posix` is what `os` wraps; the guard only replaced `os`'s names.
                "import posix, time\n\
                 posix.posix_spawn('/bin/rm', ['rm', '-rf', {canary_s:?}], {{}})\n\
                 time.sleep(0.3)\n\
                 posix.unlink({canary_s:?} + '/keep.txt')\nreturn x * 2"
            ),
        ),
        (
            "a socket connect to a loopback listener",
            format!(
                "import importlib, socket\n{}\
                 s = socket.create_connection(('127.0.0.1', {port}), timeout=1)\n\
                 s.sendall(b'hello')\nreturn x * 2",
                if reload_socket {
                    "importlib.reload(socket)\n"
                } else {
                    ""
                }
            ),
        ),
        ("a 10 GB allocation", "b = bytearray(10 * 1024 ** 3)\nreturn x * 2".into()),
        ("sleep forever", "import time\ntime.sleep(10 ** 6)".into()),
        (
            "a loop that ignores the alarm",
            "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass"
                .into(),
        ),
        (
            "kill its parent and everyone it can",
            "import ctypes, os\nlibc = ctypes.CDLL(None)\nlibc.kill(os.getppid(), 9)\n\
             libc.kill(-1, 9)"
                .into(),
        ),
        (
            "fill the disk",
            "with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * (1 << 20))"
                .into(),
        ),
        ("exit the interpreter", "import os\nos._exit(0)".into()),
    ];
    let mut programs: Vec<String> = hostile.iter().map(|(_, body)| program(body)).collect();
    programs.push(program("return x * 2"));
    let s = sandbox(1.0, strength);
    let verdicts = run_programs(&s, &programs, 2, &|_| {}).unwrap();
    for ((name, _), v) in hostile.iter().zip(&verdicts) {
        eprintln!("{name}: {}", v.result);
        assert!(!v.passed, "{name} passed: {}", v.result);
    }
    let honest = verdicts.last().unwrap();
    assert!(honest.passed, "the honest completion: {}", honest.result);
    // Without namespaces or Landlock, only another user keeps our files safe.
    if strength != Strength::WithoutNamespacesOrLandlock || s.isolation().user.is_some() {
        assert_eq!(
            std::fs::read_to_string(canary.join("keep.txt")).unwrap(),
            "alive"
        );
    }
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the listener saw a connection: {other:?}"),
    }
    // Nothing the fork bomb started is left running.
    let strays: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("cmdline")).ok())
        .filter(|c| c.contains("pocket's code-execution driver"))
        .collect();
    assert!(
        strays.is_empty(),
        "{} sandboxed processes left",
        strays.len()
    );
}
