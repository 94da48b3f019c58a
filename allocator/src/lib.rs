//! Memory a burst freed goes back to the system once the burst is over.
//!
//! mimalloc (the API's allocator) hands freed pages back to the kernel only after a
//! delay, and only when the thread that freed them next allocates or frees: a worker
//! thread that goes quiet after a burst keeps every page it used. Measured with the
//! benchmark's long polls (`bench/long-polls.md`): after 10,000 waiting requests were
//! answered, the API stayed at 276 MiB instead of returning to its 18 MiB. Asking for
//! the purge at once on every free (`MIMALLOC_PURGE_DELAY=0`) returned it, but cut
//! throughput to well under half (a system call per freed page). So instead each
//! worker collects its own heap when it runs out of work, at most once a second:
//! nothing on the hot path, and memory back within a second or two of the load ending.
//! A worker that goes idle within the second puts its collection off, and is woken to go
//! idle again once the second has passed (see `lectern_runtime::run_command_idling`):
//! without that, one whose last burst ended just after a collection kept what it freed
//! (33 MiB instead of 23 after 10,000 long polls, in 2 of 15 rounds; `bench/history.md`).

use std::cell::Cell;
use std::time::{Duration, Instant};

/// Least time between two collections on one thread.
pub const AT_MOST_EVERY: Duration = Duration::from_secs(1);

thread_local! {
    static LAST_COLLECTED: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Collects the calling thread's heap, handing back what it freed, unless it did so
/// within the last second; `false` when it put the collection off. Meant for a runtime's
/// "worker is idle" hook, which must then see that the worker goes idle again once
/// [`AT_MOST_EVERY`] has passed: a worker that stays idle after a collection it put off
/// would otherwise keep what it freed.
pub fn hand_back_freed_memory() -> bool {
    LAST_COLLECTED.with(|last| {
        if last.get().is_some_and(|at| at.elapsed() < AT_MOST_EVERY) {
            return false;
        }
        last.set(Some(Instant::now()));
        collect_this_thread();
        true
    })
}

#[expect(
    unsafe_code,
    reason = "mimalloc's collection is a foreign function; it takes no pointer and is safe on any thread"
)]
fn collect_this_thread() {
    // SAFETY: `mi_collect` takes no pointer; it walks the calling thread's own heap and
    // mimalloc's shared arenas under their own locks. Forced, so that pages freed less
    // than the purge delay ago go back too: a worker that stays idle parks only once.
    unsafe { libmimalloc_sys::mi_collect(true) }
}
