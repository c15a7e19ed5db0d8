//! A global allocator that forwards to the system's and counts: calls
//! (`n_allocs`), the largest block asked for (`largest`), and the live and
//! peak heap bytes of the threads that have not opted out (`live_bytes`,
//! `peak_bytes`). A test binary installs it with
//!
//! ```
//! #[global_allocator]
//! static GLOBAL: test_support::alloc::Counting = test_support::alloc::Counting;
//! # fn main() {}
//! ```
//!
//! and is best the only test in its binary, so that the harness is quiet
//! while it counts. The counters are relaxed atomics: one locked add per
//! call, which is all a test that counts can afford.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The allocator; see the module's documentation.
pub struct Counting;

static N_ALLOCS: AtomicUsize = AtomicUsize::new(0);
static LARGEST: AtomicUsize = AtomicUsize::new(0);
static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

/// While set, the first allocation made records where it came from.
static WATCHING: AtomicBool = AtomicBool::new(false);
/// The thread and backtrace of the first allocation seen while watching.
static FIRST_SEEN: Mutex<Option<String>> = Mutex::new(None);

thread_local! {
    /// False on a thread whose bytes are not the server's (a test's
    /// client): `live_bytes` and `peak_bytes` leave them out.
    static IN_LIVE: Cell<bool> = const { Cell::new(true) };
    /// True while this thread records a backtrace (which allocates).
    static RECORDING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `round` `n_warm` times (pools, caches and buffers fill), then `n`
/// times more; returns the allocations made meanwhile, on every thread.
/// When there were some, `first_allocation_seen` says where the first came
/// from.
pub fn allocations_after_warming(n_warm: usize, n: usize, mut round: impl FnMut()) -> usize {
    for _ in 0..n_warm {
        round();
    }
    *FIRST_SEEN.lock().unwrap_or_else(|e| e.into_inner()) = None;
    let before = n_allocs();
    WATCHING.store(true, Ordering::SeqCst);
    for _ in 0..n {
        round();
    }
    WATCHING.store(false, Ordering::SeqCst);
    n_allocs() - before
}

/// The thread and backtrace of the first allocation counted by the last
/// `allocations_after_warming`, or "none"; for a test's failure message.
pub fn first_allocation_seen() -> String {
    FIRST_SEEN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .unwrap_or_else(|| "none".to_owned())
}

/// Records the first allocation made while watching. The backtrace
/// allocates: `RECORDING` keeps that from recursing, and `swap` lets one
/// thread record.
fn note_allocation(size: usize) {
    if !WATCHING.load(Ordering::Relaxed) || RECORDING.try_with(Cell::get).unwrap_or(true) {
        return;
    }
    if !WATCHING.swap(false, Ordering::SeqCst) {
        return;
    }
    RECORDING.with(|r| r.set(true));
    let thread = std::thread::current();
    let report = format!(
        "{size} bytes on thread {:?}\n{}",
        thread.name().unwrap_or("?"),
        std::backtrace::Backtrace::force_capture()
    );
    *FIRST_SEEN.lock().unwrap_or_else(|e| e.into_inner()) = Some(report);
    RECORDING.with(|r| r.set(false));
}

/// Allocations and reallocations so far, on every thread.
pub fn n_allocs() -> usize {
    N_ALLOCS.load(Ordering::SeqCst)
}

/// The largest block allocated or reallocated since the last
/// `reset_largest`, on every thread.
pub fn largest() -> usize {
    LARGEST.load(Ordering::SeqCst)
}

pub fn reset_largest() {
    LARGEST.store(0, Ordering::SeqCst);
}

/// Heap bytes allocated and not yet freed by the threads counted (the
/// absolute value means nothing; differences do).
pub fn live_bytes() -> isize {
    LIVE.load(Ordering::SeqCst)
}

/// The highest `live_bytes` since the last `reset_peak`.
pub fn peak_bytes() -> isize {
    PEAK.load(Ordering::SeqCst)
}

/// Starts the peak again from the live bytes now.
pub fn reset_peak() {
    PEAK.store(LIVE.load(Ordering::SeqCst), Ordering::SeqCst);
}

/// Leaves the calling thread's bytes out of `live_bytes` and `peak_bytes`
/// from now on (a test calls it on its own thread, the client's).
pub fn leave_this_thread_out() {
    IN_LIVE.with(|c| c.set(false));
}

fn add_live(delta: isize) {
    // `try_with`: a thread being torn down counts no more.
    if IN_LIVE.try_with(Cell::get).unwrap_or(false) {
        let now = LIVE.fetch_add(delta, Ordering::Relaxed) + delta;
        PEAK.fetch_max(now, Ordering::Relaxed);
    }
}

// SAFETY: forwards every call to the system allocator unchanged; only
// counts, with atomics and a const thread-local that never allocates, and
// once per count records a backtrace (guarded against recursion).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        N_ALLOCS.fetch_add(1, Ordering::Relaxed);
        note_allocation(layout.size());
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        add_live(layout.size() as isize);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        add_live(-(layout.size() as isize));
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        N_ALLOCS.fetch_add(1, Ordering::Relaxed);
        note_allocation(new_size);
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        add_live(new_size as isize - layout.size() as isize);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Waits until a thread of this process named `name` (as the kernel shows
/// it: the first 15 bytes) is running its own code. A thread allocates once
/// as it starts (std records its name for the stack-overflow handler), so a
/// thread spawned just before a count, and scheduled late, would be
/// counted: the archive's watcher was, about one run in three on a loaded
/// machine.
pub fn wait_for_thread(name: &str) {
    let comm = &name.as_bytes()[..name.len().min(15)];
    crate::wait_until(&format!("thread {name} started"), || {
        std::fs::read_dir("/proc/self/task")
            .into_iter()
            .flatten()
            .flatten()
            .any(|task| {
                std::fs::read(task.path().join("comm")).is_ok_and(|c| c.strip_suffix(b"\n").unwrap_or(&c) == comm)
            })
    });
}
