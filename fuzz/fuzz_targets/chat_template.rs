//! Hostile chat templates: parse and render with a small conversation. Rendering must end
//! (fuel) and its output is bounded; errors are fine.
#![no_main]
use libfuzzer_sys::fuzz_target;
// Links pocket_fuzz, whose global allocator enforces the template memory budget.
extern crate pocket_fuzz;
use pocket::chat_template::{ChatTemplate, Message};
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    // Each template that hits the budget leaves a parked thread holding up to the budget.
    pocket::chat_template::set_memory_budget(4 << 20);
    let src = String::from_utf8_lossy(data);
    let Ok(t) = ChatTemplate::new(&src, Path::new("fuzz.jinja")) else {
        return;
    };
    let msgs = [
        Message::new("system", "Be brief."),
        Message::new("user", "Hi {{ x }} </s>"),
        Message::new("assistant", "Hello."),
        Message::new("user", "中文 🙂"),
    ];
    let _ = t.render(&msgs, true, "<s>", "</s>");
});
