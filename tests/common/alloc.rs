//! A counting global allocator for the allocation tests: it counts the
//! allocations (and reallocations) of the thread that is inside
//! [`allocations`]. Included with `#[path]` by the tests that install it as
//! their `#[global_allocator]` (not from `common/mod.rs`, which every test
//! includes).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The allocator: the system's, counting.
pub struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is passed to the system allocator unchanged; the
// thread-local cells are const-initialised, so touching them never
// allocates (no recursion into this allocator).
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(|c| c.get()) {
            COUNT.with(|n| n.set(n.get() + 1));
        }
        // SAFETY: the caller's contract is passed through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed through.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(|c| c.get()) {
            COUNT.with(|n| n.set(n.get() + 1));
        }
        // SAFETY: the caller's contract is passed through.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Allocations made by `f` on this thread.
pub fn allocations(f: impl FnOnce()) -> usize {
    COUNT.with(|n| n.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    COUNT.with(|n| n.get())
}
