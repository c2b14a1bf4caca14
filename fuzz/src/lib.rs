//! Shared by the fuzz targets: how a fuzz input becomes files on disk.
pub mod inputs;

/// As in the `pocket` binary: chat templates render under a memory budget.
#[global_allocator]
static ALLOC: pocket::alloc_guard::GuardedAlloc = pocket::alloc_guard::GuardedAlloc;

use pocket::chat_template::Message;
use pocket::loader::LoadedModel;
use std::path::Path;

/// What `pocket run` does with a file, in small: open it (weights, tokenizer, template), render
/// and encode a chat, and run two tokens through the engine. Errors are fine; panics, hangs and
/// runaway allocations are what the fuzzer looks for.
pub fn exercise(path: &Path) {
    let Ok(m) = LoadedModel::open(path) else {
        return;
    };
    let msgs = [Message::new("user", "Hi")];
    let Ok(ids) = m.encode_chat(&msgs, true) else {
        return;
    };
    let ctx = m.file.spec().max_position_embeddings.min(8);
    let mut state = m.model.new_state(ctx);
    for &id in ids.iter().take(2) {
        if m.model.step(&mut state, id, true).is_err() {
            return;
        }
    }
}
