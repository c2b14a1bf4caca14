//! NLTK's English Punkt model (`punkt_tab`), embedded.
//!
//! The four files under `evals/data/punkt_english/` are NLTK's English punkt_tab data
//! (Apache-2.0, trained by Kiss & Strunk on the Wall Street Journal; see the NOTICE there).
//! They are read the way `nltk.tokenize.punkt.load_punkt_params` reads them: one entry per
//! line, tab-separated pairs, only the newline removed (the abbreviation `". . "` keeps its
//! trailing space).

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

/// Words seen sentence-initially in lower case.
pub const ORTHO_BEG_LC: u32 = 1 << 4;
/// Words seen sentence-internally in upper case.
pub const ORTHO_MID_UC: u32 = 1 << 2;
/// Any upper-case context (beginning, middle, unknown).
pub const ORTHO_UC: u32 = (1 << 1) | (1 << 2) | (1 << 3);
/// Any lower-case context.
pub const ORTHO_LC: u32 = (1 << 4) | (1 << 5) | (1 << 6);

/// Abbreviations, collocations, frequent sentence starters and orthographic contexts.
pub struct PunktParams {
    pub abbrev_types: HashSet<String>,
    pub collocations: HashSet<(String, String)>,
    pub sent_starters: HashSet<String>,
    pub ortho_context: HashMap<String, u32>,
}

impl PunktParams {
    /// The orthographic flags of a word type; 0 when never seen (NLTK's `defaultdict(int)`).
    pub fn ortho(&self, typ: &str) -> u32 {
        self.ortho_context.get(typ).copied().unwrap_or(0)
    }
}

fn lines(text: &str) -> impl Iterator<Item = &str> {
    text.strip_suffix('\n').unwrap_or(text).split('\n')
}

fn pairs(text: &str) -> impl Iterator<Item = (&str, &str)> {
    lines(text).filter_map(|l| l.split_once('\t'))
}

/// The English model, parsed once.
pub fn english() -> &'static PunktParams {
    static PARAMS: LazyLock<PunktParams> = LazyLock::new(|| {
        let dir = |name| match name {
            "abbrev" => include_str!("../../../data/punkt_english/abbrev_types.txt"),
            "colloc" => include_str!("../../../data/punkt_english/collocations.tab"),
            "starters" => include_str!("../../../data/punkt_english/sent_starters.txt"),
            _ => include_str!("../../../data/punkt_english/ortho_context.tab"),
        };
        PunktParams {
            abbrev_types: lines(dir("abbrev")).map(str::to_owned).collect(),
            collocations: pairs(dir("colloc"))
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .collect(),
            sent_starters: lines(dir("starters")).map(str::to_owned).collect(),
            // Every line of the embedded file is "type<TAB>integer"; a line that is not
            // (none is) would be skipped rather than panic.
            ortho_context: pairs(dir("ortho"))
                .filter_map(|(t, n)| Some((t.to_owned(), n.parse().ok()?)))
                .collect(),
        }
    });
    &PARAMS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn english_model_is_complete() {
        let p = english();
        assert_eq!(p.abbrev_types.len(), 156);
        assert!(p.abbrev_types.contains("dr") && p.abbrev_types.contains(". . "));
        assert_eq!(p.collocations.len(), 37);
        assert!(p
            .collocations
            .contains(&("j".to_owned(), "aron".to_owned())));
        assert_eq!(p.sent_starters.len(), 39);
        assert_eq!(p.ortho_context.len(), 20366);
        assert_eq!(p.ortho("a"), 126);
        assert_eq!(p.ortho("never-seen"), 0);
    }
}
