//! The counting allocator counts what a round allocates, and names where
//! the first allocation came from.

use test_support::alloc::{allocations_after_warming, first_allocation_seen, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Boxes a value, a heap allocation of 8 bytes each call.
#[inline(never)]
#[allow(clippy::vec_box)] // The boxes are the point.
fn allocate_a_little(keep: &mut Vec<Box<u64>>) {
    keep.push(Box::new(7));
}

#[test]
fn a_round_that_allocates_is_counted_and_its_first_allocation_named() {
    let mut keep = Vec::with_capacity(1000);
    let n = allocations_after_warming(10, 20, || allocate_a_little(&mut keep));
    // Twenty boxes, and the backtrace recorded for the first of them.
    assert!(n >= 20, "{n}");
    let seen = first_allocation_seen();
    assert!(seen.starts_with("8 bytes on thread"), "{seen}");
    assert!(seen.contains("allocate_a_little"), "{seen}");

    let n = allocations_after_warming(10, 20, || {
        std::hint::black_box(keep.len());
    });
    assert_eq!(n, 0);
    assert_eq!(first_allocation_seen(), "none");
}
