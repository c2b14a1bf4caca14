//! Keys typed while an answer streams. The terminal is in cooked mode between two prompts, so
//! by default such keys are echoed into the answer's text, and the line editor, when it starts
//! again, may or may not see them. Instead, echo and line buffering are turned off for the
//! answer ([`Hold::start`]); afterwards every pending byte is read ([`Hold::finish`]) and split
//! into finished lines, which the chat runs in order, and an unfinished rest, which the next
//! prompt starts with. Ctrl-C still raises SIGINT (ISIG stays on) and stops the answer.

/// What was typed during an answer.
#[derive(Debug, Default, PartialEq)]
pub struct TypedAhead {
    /// Lines ended with Enter, oldest first.
    pub lines: Vec<String>,
    /// Text typed after the last Enter.
    pub partial: String,
}

/// Splits raw terminal input into lines, applying Backspace and leaving out escape sequences
/// (arrow keys, bracketed-paste markers) and other control bytes, which cannot be replayed.
pub fn split_typed(bytes: &[u8]) -> TypedAhead {
    let mut out = TypedAhead::default();
    let mut line: Vec<u8> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        i += 1;
        match b {
            b'\r' | b'\n' => {
                out.lines.push(String::from_utf8_lossy(&line).into_owned());
                line.clear();
                // A terminal that sends CR LF for Enter makes one line, not two.
                if b == b'\r' && bytes.get(i) == Some(&b'\n') {
                    i += 1;
                }
            }
            0x7f | 0x08 => {
                // Drop the last whole character.
                while let Some(last) = line.pop() {
                    if last & 0xC0 != 0x80 {
                        break;
                    }
                }
            }
            0x1b => {
                // CSI: ESC [ parameters… final byte in 0x40..=0x7e; SS3: ESC O x; else ESC x.
                match bytes.get(i) {
                    Some(b'[') => {
                        i += 1;
                        while i < bytes.len() && !(0x40..=0x7e).contains(&bytes[i]) {
                            i += 1;
                        }
                        i += 1;
                    }
                    Some(b'O') => i += 2,
                    Some(_) => i += 1,
                    None => {}
                }
            }
            b'\t' => line.push(b),
            c if c < 0x20 => {}
            c => line.push(c),
        }
    }
    out.partial = String::from_utf8_lossy(&line).into_owned();
    out
}

#[cfg(unix)]
mod tty {
    use super::{split_typed, TypedAhead};
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use nix::sys::termios::{tcgetattr, tcsetattr, LocalFlags, SetArg, Termios};
    use std::io::IsTerminal;
    use std::os::fd::AsFd;

    /// The terminal held quiet for one answer; `finish` (or drop) restores it.
    pub struct Hold {
        saved: Option<Termios>,
    }

    impl Hold {
        /// Turns off echo and line buffering on a terminal stdin; does nothing otherwise.
        pub fn start() -> Hold {
            let stdin = std::io::stdin();
            if !stdin.is_terminal() {
                return Hold { saved: None };
            }
            let Ok(saved) = tcgetattr(stdin.as_fd()) else {
                return Hold { saved: None };
            };
            let mut quiet = saved.clone();
            quiet
                .local_flags
                .remove(LocalFlags::ECHO | LocalFlags::ICANON);
            // TCSANOW, not TCSAFLUSH: what is already typed must stay in the queue.
            if tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &quiet).is_err() {
                return Hold { saved: None };
            }
            Hold { saved: Some(saved) }
        }

        /// Reads everything typed since `start` without waiting, and restores the terminal.
        pub fn finish(mut self) -> TypedAhead {
            let typed = if self.saved.is_some() {
                split_typed(&pending_input())
            } else {
                TypedAhead::default()
            };
            self.restore();
            typed
        }

        fn restore(&mut self) {
            if let Some(saved) = self.saved.take() {
                let _ = tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, &saved);
            }
        }
    }

    impl Drop for Hold {
        fn drop(&mut self) {
            self.restore();
        }
    }

    /// The bytes waiting on stdin, read from the descriptor itself: std's buffered `Stdin`
    /// would keep a remainder the line editor never sees.
    fn pending_input() -> Vec<u8> {
        let stdin = std::io::stdin();
        let fd = stdin.as_fd();
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::ZERO) {
                Ok(n) if n > 0 => {}
                _ => break,
            }
            match nix::unistd::read(fd, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => all.extend_from_slice(&buf[..n]),
            }
            if all.len() > 1 << 20 {
                break;
            }
        }
        all
    }
}

#[cfg(unix)]
pub use tty::Hold;

/// Elsewhere the terminal is left as it is.
#[cfg(not(unix))]
pub struct Hold;

#[cfg(not(unix))]
impl Hold {
    pub fn start() -> Hold {
        Hold
    }
    pub fn finish(self) -> TypedAhead {
        TypedAhead::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_the_unfinished_rest() {
        let t = split_typed(b"first\rsecond\r\nthird");
        assert_eq!(t.lines, ["first", "second"]);
        assert_eq!(t.partial, "third");
        assert_eq!(split_typed(b""), TypedAhead::default());
        assert_eq!(split_typed(b"\r").lines, [""]);
    }

    #[test]
    fn backspace_removes_whole_characters_and_escapes_are_dropped() {
        let t = split_typed("héé\x7f!\x1b[A\x1b[200~ok\x1b[201~\x1bOB\x01".as_bytes());
        assert_eq!(t.partial, "hé!ok");
        assert_eq!(split_typed("中\x7f\x7fa".as_bytes()).partial, "a");
    }
}
