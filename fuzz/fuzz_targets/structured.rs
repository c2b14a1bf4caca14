//! Hostile schemas, grammars, regexes, tools files and choice lists: read, compile against a
//! small byte-level vocabulary, and follow the constraint for a few tokens chosen by the
//! input. Errors are fine; panics, hangs and runaway memory are not.
#![no_main]
use libfuzzer_sys::fuzz_target;
extern crate pocket_fuzz;
use pocket::constrain::tools::{call_constraint, parse_calls, parse_tools, ToolChoice};
use pocket::constrain::{Constraint, Grammars};
use pocket::tokenizer::TextTokenizer;
use pocket_fuzz::inputs::{split_structured, TOKENIZER_JSON};
use std::path::Path;
use std::sync::OnceLock;

fn grammars() -> &'static Grammars {
    static G: OnceLock<Grammars> = OnceLock::new();
    G.get_or_init(|| {
        let t = TextTokenizer::from_bytes(TOKENIZER_JSON, Path::new("tiny")).unwrap();
        let eos = t.token_to_id("<|im_end|>").unwrap();
        Grammars::new(&t, t.vocab_size(), &[eos]).unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let (flag, bytes) = split_structured(data);
    let text = String::from_utf8_lossy(bytes);
    let _ = parse_calls(&text, &["a", "get_weather"]);
    let constraint = match flag {
        "--json-schema" => Constraint::json_schema_text(&text),
        "--grammar" => Constraint::grammar(&text),
        "--regex" => Constraint::regex(&text),
        "--tools" => match parse_tools(&text) {
            Ok(tools) => call_constraint(&tools, &ToolChoice::Required, false),
            Err(e) => Err(e),
        },
        _ => Constraint::choices(text.split(',').map(str::to_string).collect()),
    };
    let Ok(c) = constraint else { return };
    let Ok(mut guide) = grammars().compile(&c) else {
        return;
    };
    let mut pick = data
        .iter()
        .fold(7u64, |h, &b| h.wrapping_mul(31).wrapping_add(b as u64));
    for _ in 0..16 {
        let forced = guide.forced();
        if guide.consume(&forced).is_err() || guide.stopped() {
            return;
        }
        let Ok(mask) = guide.mask() else { return };
        let n = mask.num_set();
        if n == 0 {
            return;
        }
        pick = pick
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut k = (pick >> 33) as usize % n;
        let mut token = None;
        mask.iter_set_entries(|i| {
            if k == 0 && token.is_none() {
                token = Some(i as u32);
            }
            k = k.wrapping_sub(1);
        });
        if guide.consume(&[token.unwrap()]).is_err() || guide.stopped() {
            return;
        }
    }
});
