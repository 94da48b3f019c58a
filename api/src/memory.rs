//! The process's heap stays in 4 KiB pages: no transparent huge pages.
//!
//! mimalloc (the allocator, declared in `main.rs`) reserves its arenas a gigabyte at a
//! time and asks the kernel to back them with 2 MiB pages. Every 2 MiB page that holds
//! one live object is then resident whole: a cached first page, a connection's
//! buffer or a response body spread over the arenas keeps far more memory resident than
//! it uses. Measured with the benchmark's scenarios run one after the other against one
//! process (bench/history.md, 2026-11-25): peak RSS 101 to 103 MiB with huge pages, 80 to 81 MiB
//! without, for 1 to 2 µs more CPU per request (more TLB misses) and 1.5 to 4 % fewer
//! requests a second where the API alone is the limit (cached first pages, retrieves).
//!
//! Two switches, because hosts differ: the `no_thp` build of mimalloc no longer asks for
//! huge pages (enough where the kernel's THP mode is `madvise`, the Debian and Ubuntu
//! default), and the process opts out of THP altogether (`PR_SET_THP_DISABLE`), for
//! hosts whose mode is `always` and would hand out huge pages unasked.

/// Opts the whole process out of transparent huge pages; pages faulted from now on are
/// 4 KiB. A kernel that refuses costs memory, not correctness: it is logged, not fatal.
pub fn keep_heap_in_small_pages() {
    #[cfg(target_os = "linux")]
    if let Err(error) = nix::sys::prctl::set_thp_disable(true) {
        tracing::warn!(%error, "could not opt out of transparent huge pages; resident memory may be higher");
    }
}
