//! Recursion as deep as the input, on whatever stack the caller has.
//!
//! Expressions are trees, and the passes over them (the NFA compiler, copies, comparisons, hashes,
//! drops) recurse once per level. Most trees are shallow, but depth is not bounded by anything a
//! caller chooses: an object with `n` optional members is an expression nested about `2n` deep
//! (its left-to-right construction keeps it linear in size, see `json_schema::objects`), an array
//! with `n` optional prefix items likewise, and the work and node budgets allow tens of thousands
//! of them. A level costs a few hundred bytes of stack, so 10,000 of them overflow a thread's
//! 8 MiB and abort the process: no error, no unwind, a crash in the engine that imported us.
//!
//! Rewriting every pass as an explicit-stack loop would obscure them all for the sake of inputs
//! nobody writes by hand. Instead each recursive step goes through [`deep`], which continues on a
//! fresh heap-allocated segment ([`SEGMENT`] bytes, freed on return, from the `stacker` crate that
//! the Rust compiler uses for the same reason) when less than [`RED_ZONE`] of the current one is
//! left.
//!
//! What it costs matters, because the schema compiler copies, hashes and drops millions of nodes:
//! asking `stacker` how much stack is left on every step made compilation 15% slower. So the
//! common case is one comparison: each thread keeps the address below which its current segment
//! runs into the red zone (its low-water mark), and a step whose own frame lies above that mark
//! runs at once. Only a step below it, or the first on a thread, asks `stacker`, and a step that
//! moves to a new segment sets the mark for that segment and restores the old one on the way out
//! (unwinding included).

use std::cell::Cell;

/// Stack that must be left for a recursive step to run on the current segment.
const RED_ZONE: usize = 128 * 1024;

/// Size of each extra segment, so that a new one is needed every few thousand levels.
const SEGMENT: usize = 4 * 1024 * 1024;

/// Marks a thread that has not measured its stack yet: every address is below it.
const UNKNOWN: usize = usize::MAX;

thread_local! {
    /// The lowest address a step may start at on the current segment (the stack grows down).
    static LOW_WATER: Cell<usize> = const { Cell::new(UNKNOWN) };
}

/// An address in the caller's frame: where the stack is now, give or take a frame.
#[inline(always)]
fn here() -> usize {
    let marker = 0u8;
    std::ptr::addr_of!(marker) as usize
}

/// Runs `f`, on a new stack segment if the current one is nearly used up.
#[inline(always)]
pub(crate) fn deep<R>(f: impl FnOnce() -> R) -> R {
    if here() > LOW_WATER.get() {
        return f();
    }
    deep_slow(f)
}

/// The low-water mark of the segment the caller runs on, if its size is known.
fn measure() -> usize {
    match stacker::remaining_stack() {
        Some(left) => here().saturating_sub(left).saturating_add(RED_ZONE),
        // An unknown stack cannot be checked: recursion goes on as it would without us.
        None => 0,
    }
}

#[cold]
#[inline(never)]
fn deep_slow<R>(f: impl FnOnce() -> R) -> R {
    if LOW_WATER.get() == UNKNOWN {
        LOW_WATER.set(measure());
        if here() > LOW_WATER.get() {
            return f();
        }
    }
    /// Puts back the mark of the segment being left, however the step ends.
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            LOW_WATER.set(self.0);
        }
    }
    let _restore = Restore(LOW_WATER.get());
    stacker::grow(SEGMENT, || {
        LOW_WATER.set(measure());
        f()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_of(n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // Enough locals that the frame cannot be folded away.
        let pad = std::hint::black_box([n; 64]);
        deep(|| 1 + depth_of(pad[0] - 1))
    }

    #[test]
    fn recursion_far_past_the_thread_stack_completes() {
        // A 256 KiB thread recursing 100,000 levels deep: tens of MiB of frames.
        let worker = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| (depth_of(100_000), LOW_WATER.get()))
            .unwrap();
        let (depth, mark) = worker.join().expect("no stack overflow");
        assert_eq!(depth, 100_000);
        // Back on the thread's own stack, its own mark is in place again.
        assert_ne!(mark, UNKNOWN);
    }

    #[test]
    fn a_panic_deep_down_restores_the_mark() {
        let worker = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                deep(|| ());
                let before = LOW_WATER.get();
                fn down(n: u32) {
                    let pad = std::hint::black_box([n; 64]);
                    deep(|| {
                        assert!(pad[0] > 0, "bottom");
                        down(pad[0] - 1)
                    })
                }
                let caught = std::panic::catch_unwind(|| down(100_000));
                (caught.is_err(), before, LOW_WATER.get())
            });
        let (panicked, before, after) = worker.unwrap().join().unwrap();
        assert!(panicked);
        assert_eq!(before, after);
    }
}
