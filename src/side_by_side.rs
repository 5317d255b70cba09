//! Independent pieces of work on every core: the compiler's own parallelism (Cranelift
//! compiling a plan's functions, the optimizer a model's distinct pieces), apart from the
//! runtime's rayon pool, whose threads are the user's `--threads`.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// `work` of each item, in the items' order, computed on this thread and one helper per
/// other core, each taking the next item not yet taken. This thread works too rather than
/// wait for a pool: on a busy machine where no helper gets a core, it does them all itself,
/// never later than doing them in order would (rayon's pool measured up to 13 ms of waiting
/// for 3 ms of Cranelift's compiling under load). An item whose work panicked is `None`.
pub fn side_by_side<T: Send, R: Send>(items: Vec<T>, work: impl Fn(T) -> R + Sync) -> Vec<Option<R>> {
    let count = items.len();
    let todo: Vec<Mutex<Option<T>>> = items.into_iter().map(|t| Mutex::new(Some(t))).collect();
    let done: Vec<Mutex<Option<R>>> = todo.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let worker = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(slot) = todo.get(i) else { break };
        let taken = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(item) = taken {
            // Caught so that a panic on this thread, too, leaves its item `None` and the
            // others done.
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| work(item))).ok();
            *done[i].lock().unwrap_or_else(|e| e.into_inner()) = result;
        }
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..cores.min(count))
            .filter_map(|_| std::thread::Builder::new().spawn_scoped(scope, worker).ok())
            .collect();
        worker();
        for h in helpers {
            let _ = h.join();
        }
    });
    done.into_iter()
        .map(|r| r.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::side_by_side;

    #[test]
    fn results_come_in_the_items_order_and_a_panic_is_none() {
        let got = side_by_side((0..50).collect(), |i: u32| {
            assert_ne!(i, 7, "the item that fails");
            i * i
        });
        assert_eq!(got.len(), 50);
        assert_eq!(got[7], None);
        for (i, r) in got.iter().enumerate().filter(|(i, _)| *i != 7) {
            assert_eq!(*r, Some((i * i) as u32));
        }
    }
}
