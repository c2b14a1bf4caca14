//! Stop strings over streamed text: what may be shown now, and what is held back because it
//! could still begin a stop string.

/// Streaming text checked against stop strings. Text that could be the start of a stop string
/// is held back until the next piece decides it, so a stop string is never shown, even when
/// it arrives split across tokens.
pub struct StopStrings<'s> {
    stops: std::borrow::Cow<'s, [String]>,
    held: String,
    stopped: bool,
}

impl<'s> StopStrings<'s> {
    pub fn new(stops: &'s [String]) -> StopStrings<'s> {
        StopStrings {
            stops: std::borrow::Cow::Borrowed(stops),
            held: String::new(),
            stopped: false,
        }
    }

    /// A scanner that owns its stop strings (a server's request keeps them).
    pub fn owned(stops: Vec<String>) -> StopStrings<'static> {
        StopStrings {
            stops: std::borrow::Cow::Owned(stops),
            held: String::new(),
            stopped: false,
        }
    }

    /// The stop strings scanned for.
    pub fn stops(&self) -> &[String] {
        &self.stops
    }

    /// Adds decoded text; returns what is now safe to show (possibly nothing). After a stop
    /// string, returns the text before it and then nothing more.
    pub fn push(&mut self, piece: &str) -> String {
        if self.stopped {
            return String::new();
        }
        self.held.push_str(piece);
        if let Some(at) = first_stop(&self.held, &self.stops) {
            self.stopped = true;
            self.held.truncate(at);
            return std::mem::take(&mut self.held);
        }
        let keep = self
            .stops
            .iter()
            .map(|s| partial_suffix(&self.held, s))
            .max()
            .unwrap_or(0);
        let shown: String = self.held.drain(..self.held.len() - keep).collect();
        shown
    }

    /// True once a stop string was seen.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// The text still held back (the answer ended without completing a stop string).
    pub fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        std::mem::take(&mut self.held)
    }
}

/// Byte offset of the earliest stop string in `text` (empty stop strings never match).
pub fn first_stop(text: &str, stops: &[String]) -> Option<usize> {
    stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text.find(s.as_str()))
        .min()
}

/// Length of the longest proper prefix of `stop` that `text` ends with.
fn partial_suffix(text: &str, stop: &str) -> usize {
    (1..stop.len())
        .rev()
        .find(|&k| {
            stop.is_char_boundary(k)
                && text.ends_with(&stop[..k])
                && text.is_char_boundary(text.len() - k)
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(stops: &[&str], pieces: &[&str]) -> (Vec<String>, bool) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut scan = StopStrings::new(&stops);
        let mut shown: Vec<String> = pieces.iter().map(|p| scan.push(p)).collect();
        shown.push(scan.finish());
        (shown, scan.stopped())
    }

    #[test]
    fn stop_string_split_across_pieces_is_never_shown() {
        let (shown, stopped) = stream(&["</s>"], &["Hello <", "/", "s> more"]);
        assert!(stopped);
        assert_eq!(shown, ["Hello ", "", "", ""]);
        assert_eq!(shown.concat(), "Hello ");
    }

    #[test]
    fn held_text_is_released_when_it_turns_out_not_to_stop() {
        let (shown, stopped) = stream(&["User:"], &["a U", "se", "ful", " thing", " Us"]);
        assert!(!stopped);
        assert_eq!(shown, ["a ", "", "Useful", " thing", " ", "Us"]);
    }

    #[test]
    fn earliest_of_several_stop_strings_wins_and_multibyte_is_kept_whole() {
        let (shown, stopped) = stream(&["。", "\n\n"], &["你好", "\n\n世界。"]);
        assert!(stopped);
        assert_eq!(shown.concat(), "你好");
        let (shown, _) = stream(&["😀!"], &["a😀", "b"]);
        assert_eq!(shown, ["a", "😀b", ""]);
    }

    #[test]
    fn no_stop_strings_passes_everything_through() {
        let (shown, stopped) = stream(&[], &["a", "b"]);
        assert!(!stopped);
        assert_eq!(shown, ["a", "b", ""]);
        assert_eq!(stream(&[""], &["a"]).0, ["a", ""]);
    }
}
