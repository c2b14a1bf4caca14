//! A small persistent worker pool for the hot loops (mat-vec bands, attention groups): one job
//! at a time, split into numbered tasks that the caller and the workers claim from one atomic
//! counter. Workers spin briefly after a job (decode issues hundreds of small jobs per token,
//! microseconds apart) and then park on a condition variable, so a pool never burns a core
//! that another process needs: a pure busy-wait collapses when cores are shared.

use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long an idle worker keeps spinning before it parks.
const SPIN: Duration = Duration::from_micros(100);

/// The job being run: a borrowed closure, alive until every task of its job has finished.
struct JobRef<'a> {
    f: &'a (dyn Fn(usize) + Sync),
}

/// `state` packs (epoch: 24 bits, tasks: 20 bits, next task: 20 bits) into one atomic, so a
/// claim is valid only for the job it was read from.
const BITS: u32 = 20;
const MASK: u64 = (1 << BITS) - 1;

fn unpack(v: u64) -> (u64, u64, u64) {
    (v >> (2 * BITS), (v >> BITS) & MASK, v & MASK)
}

struct Shared {
    state: AtomicU64,
    job: AtomicPtr<()>,
    done: AtomicUsize,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

impl Shared {
    /// Claims and runs tasks of the current job until none is left. Returns whether it ran one.
    fn work(&self) -> bool {
        let mut ran = false;
        loop {
            let v = self.state.load(Acquire);
            let (_, tasks, next) = unpack(v);
            if next >= tasks {
                return ran;
            }
            if self
                .state
                .compare_exchange_weak(v, v + 1, AcqRel, Relaxed)
                .is_err()
            {
                continue;
            }
            // SAFETY: a successful claim of task `next` < `tasks` means the job is still
            // running: `run` does not return (and its `JobRef` stays alive) until `done`
            // reaches `tasks`, which needs this task. The pointer was stored before the state
            // that announced the job (Release) and is read after the claim (Acquire).
            let job = unsafe { &*(self.job.load(Acquire) as *const JobRef) };
            (job.f)(next as usize);
            self.done.fetch_add(1, Release);
            ran = true;
        }
    }
}

pub struct Pool {
    shared: Arc<Shared>,
    threads: usize,
    /// Serialises callers: one job at a time.
    running: Mutex<()>,
    /// Run mat-vec row bands on rayon instead (a benchmark comparison; see [`init`]).
    bands_on_rayon: bool,
}

impl Pool {
    /// A pool of `threads` (the caller counts as one: `threads − 1` workers are started).
    pub fn new(threads: usize) -> Pool {
        let shared = Arc::new(Shared {
            state: AtomicU64::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            done: AtomicUsize::new(0),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        for i in 1..threads.max(1) {
            let s = shared.clone();
            std::thread::Builder::new()
                .name(format!("pocket-worker-{i}"))
                .spawn(move || worker(&s))
                .expect("cannot start a worker thread");
        }
        Pool {
            shared,
            threads: threads.max(1),
            running: Mutex::new(()),
            bands_on_rayon: false,
        }
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Whether mat-vec row bands go to rayon rather than this pool.
    pub fn bands_on_rayon(&self) -> bool {
        self.bands_on_rayon
    }

    /// Runs `f(0..tasks)` across the pool and returns when every task has finished.
    pub fn run(&self, tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        if tasks == 0 {
            return;
        }
        if self.threads == 1 || tasks == 1 {
            (0..tasks).for_each(f);
            return;
        }
        assert!(tasks as u64 <= MASK, "too many tasks for one job");
        let _one = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        let job = JobRef { f };
        s.job.store(&job as *const JobRef as *mut (), Release);
        s.done.store(0, Relaxed);
        let (epoch, _, _) = unpack(s.state.load(Relaxed));
        let epoch = (epoch + 1) & ((1 << (64 - 2 * BITS)) - 1);
        s.state
            .store((epoch << (2 * BITS)) | ((tasks as u64) << BITS), SeqCst);
        if s.sleepers.load(SeqCst) > 0 {
            let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        s.work();
        let mut spins = 0u32;
        while s.done.load(Acquire) < tasks {
            spins += 1;
            if spins < 1 << 14 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

fn worker(s: &Shared) {
    loop {
        if s.work() {
            continue;
        }
        // Idle: spin a little for the next job, then sleep until one is announced.
        let seen = s.state.load(Acquire);
        let start = Instant::now();
        let mut idle = true;
        while start.elapsed() < SPIN {
            for _ in 0..64 {
                std::hint::spin_loop();
            }
            if s.state.load(Acquire) != seen {
                idle = false;
                break;
            }
        }
        if idle {
            let mut g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.sleepers.fetch_add(1, SeqCst);
            while s.state.load(SeqCst) == seen {
                g = s.wake.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            s.sleepers.fetch_sub(1, SeqCst);
        }
    }
}

static GLOBAL: OnceLock<Pool> = OnceLock::new();

/// Sizes the global pool (the first call wins; later calls return false). With
/// `bands_on_rayon`, mat-vec row bands run on rayon instead of the pool's spin-then-park
/// workers (the CLI's `POCKET_POOL=rayon`, to measure what the pool buys).
pub fn init(threads: usize, bands_on_rayon: bool) -> bool {
    let mut pool = Pool::new(threads);
    pool.bands_on_rayon = bands_on_rayon;
    GLOBAL.set(pool).is_ok()
}

/// The global pool: sized by [`init`] (`--threads`), else by [`default_threads`].
pub fn global() -> &'static Pool {
    GLOBAL.get_or_init(|| Pool::new(default_threads()))
}

/// Threads when `--threads` is not given: one per physical core, the CPUs this process may use
/// divided by the hardware threads per core. Decode is bound by memory bandwidth and prefill by
/// each core's vector units; a second thread on the same core adds contention, not speed.
pub fn default_threads() -> usize {
    let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per_core =
        std::fs::read_to_string("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list")
            .map_or(1, |s| cpu_list_len(s.trim()));
    (logical / per_core.max(1)).max(1)
}

/// The number of CPUs in a Linux CPU list such as `0-3,8,10-11` (0 if it does not parse).
fn cpu_list_len(list: &str) -> usize {
    list.split(',')
        .map(|part| match part.split_once('-') {
            Some((a, b)) => match (a.parse::<usize>(), b.parse::<usize>()) {
                (Ok(a), Ok(b)) if a <= b => b - a + 1,
                _ => 0,
            },
            None => part.parse::<usize>().map_or(0, |_| 1),
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_once_across_many_jobs() {
        let pool = Pool::new(3);
        for tasks in [1usize, 2, 5, 64, 1000] {
            let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
            for _ in 0..50 {
                pool.run(tasks, &|i| {
                    hits[i].fetch_add(1, Relaxed);
                });
            }
            assert!(hits.iter().all(|h| h.load(Relaxed) == 50));
        }
    }

    #[test]
    fn cpu_lists_count_their_cpus() {
        assert_eq!(cpu_list_len("0"), 1);
        assert_eq!(cpu_list_len("0,4"), 2);
        assert_eq!(cpu_list_len("0-1"), 2);
        assert_eq!(cpu_list_len("0-3,8,10-11"), 7);
        assert_eq!(cpu_list_len("garbage"), 0);
        assert_eq!(cpu_list_len("3-1"), 0);
        assert!(default_threads() >= 1);
    }

    #[test]
    fn parked_workers_wake_up() {
        let pool = Pool::new(2);
        let n = AtomicUsize::new(0);
        pool.run(8, &|_| {
            n.fetch_add(1, Relaxed);
        });
        // Long enough for the worker to stop spinning and park.
        std::thread::sleep(Duration::from_millis(20));
        pool.run(8, &|_| {
            n.fetch_add(1, Relaxed);
        });
        assert_eq!(n.load(Relaxed), 16);
    }
}
