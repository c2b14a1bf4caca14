//! A memory budget for code that runs a stranger's program: the chat template that ships inside
//! a model file. minijinja bounds a template's time (fuel) but not its memory: twenty lines of
//! `{% set x = x ~ x %}` ask for 2⁶⁴ bytes. Jinja's own maintainers answer "use OS limits"; a CLI
//! that renders on every turn needs a clean error instead.
//!
//! [`GuardedAlloc`] is the system allocator plus one thread-local check: inside
//! [`run_with_budget`], every byte the worker thread allocates is counted, and an allocation that
//! would pass the budget never happens — the worker raises a flag and sleeps forever (it holds
//! no lock: the allocation it was asked for was never made). The caller sees the flag and
//! returns an error; the parked thread keeps at most the budget. Without `GuardedAlloc`
//! installed as the global allocator (`cmd/main.rs`, the fuzz targets) the budget is not
//! enforced, and `run_with_budget` only adds a thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

pub struct GuardedAlloc;

thread_local! {
    /// Bytes this thread may still allocate; `isize::MAX` outside a budget.
    static LEFT: Cell<isize> = const { Cell::new(isize::MAX) };
    /// Raised (and never lowered) when this thread hits its budget.
    static FLAG: Cell<*const AtomicBool> = const { Cell::new(std::ptr::null()) };
}

/// Counts `grow` bytes against the thread's budget; parks the thread forever if it is spent.
fn charge(grow: usize) {
    let left = LEFT.with(Cell::get);
    if left == isize::MAX {
        return;
    }
    let left = left.saturating_sub(isize::try_from(grow).unwrap_or(isize::MAX));
    if left >= 0 {
        LEFT.with(|c| c.set(left));
        return;
    }
    let flag = FLAG.with(Cell::get);
    if !flag.is_null() {
        // SAFETY: `run_with_budget` keeps the flag alive (an Arc moved into this thread's
        // closure, which never returns from here).
        unsafe { &*flag }.store(true, Ordering::SeqCst);
    }
    loop {
        // No allocation, no lock held: the request that would pass the budget is never made.
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn refund(bytes: usize) {
    LEFT.with(|c| {
        let v = c.get();
        if v != isize::MAX {
            c.set(v.saturating_add(isize::try_from(bytes).unwrap_or(0)));
        }
    });
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the only
// addition is bookkeeping in const-initialised thread-locals (which never allocate) and, past
// the budget, a thread that sleeps instead of returning.
unsafe impl GlobalAlloc for GuardedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        charge(layout.size());
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        charge(layout.size());
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        refund(layout.size());
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            charge(new_size - layout.size());
        } else {
            refund(layout.size() - new_size);
        }
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Why [`run_with_budget`] has no result.
#[derive(Debug, PartialEq, Eq)]
pub enum BudgetError {
    /// The work wanted more memory than its budget (its thread is left parked).
    Exceeded,
    /// The worker thread could not start or did not finish normally.
    Failed,
}

/// Runs `f` on a worker thread (16 MiB of stack) that may allocate at most `budget` bytes net.
pub fn run_with_budget<T: Send + 'static>(
    budget: usize,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, BudgetError> {
    let flag = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let worker_flag = flag.clone();
    let spawned = std::thread::Builder::new()
        .name("pocket-budget".into())
        .stack_size(16 << 20)
        .spawn(move || {
            FLAG.with(|c| c.set(Arc::as_ptr(&worker_flag)));
            LEFT.with(|c| c.set(isize::try_from(budget).unwrap_or(isize::MAX - 1)));
            let out = f();
            LEFT.with(|c| c.set(isize::MAX));
            let _ = tx.send(out);
            drop(worker_flag);
        });
    if spawned.is_err() {
        return Err(BudgetError::Failed);
    }
    loop {
        match rx.recv_timeout(Duration::from_millis(2)) {
            Ok(v) => return Ok(v),
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(BudgetError::Failed),
            Err(mpsc::RecvTimeoutError::Timeout) if flag.load(Ordering::SeqCst) => {
                return Err(BudgetError::Exceeded)
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
}
