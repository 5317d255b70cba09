//! A call's threads kept awake from one kernel to the next.
//!
//! Handing each kernel's tasks to the pool on its own lets the other threads fall asleep
//! between kernels (rayon parks a thread that finds no work), and waking one costs more
//! than a short kernel's task: a call of a few kernels of a few hundred microseconds each
//! (the seed module at S, a decode step's hundreds of small kernels) waited on the wake-ups
//! (`BENCHMARKS.md`). A [`Crew`] is one call's calling thread and helpers that stay awake
//! until the call ends, spinning between kernels, each taking the current kernel's tasks
//! one at a time: which thread runs a task never changes its result, only when it runs.
//!
//! Nothing waits for a helper to arrive: the calling thread runs every task no helper has
//! taken, so a helper that never gets a thread (a busy pool) slows the call, never stops it.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::Mutex;

/// Idle polls of a spinning thread before it starts yielding its core at each poll (for
/// machines with more threads than cores).
const SPINS: u32 = 1 << 14;

/// The shared state of one call's threads.
#[derive(Default)]
pub struct Crew {
    /// The current kernel's number (high 32 bits, 0 before the first) and its next
    /// unclaimed task (low 32 bits): one word, so that a claim names its kernel.
    state: AtomicU64,
    /// The current kernel's task count.
    tasks: AtomicU64,
    /// The current kernel's tasks finished.
    done: AtomicU64,
    /// The current kernel's job: the address of a `&(dyn Fn(i64) + Sync)` on the calling
    /// thread's stack, alive while that kernel has unfinished tasks.
    job: AtomicPtr<()>,
    /// Set when the call has no more kernels: the helpers return.
    finished: AtomicBool,
    /// The first panic of a task of the current kernel, raised again on the calling
    /// thread once every task has finished (a task that unwound is counted as finished, so
    /// that no thread waits for it and no job outlives its kernel).
    panicked: Mutex<Option<Box<dyn Any + Send>>>,
}

/// A kernel's work: runs task `t`.
type Job<'a> = &'a (dyn Fn(i64) + Sync);

impl Crew {
    /// Runs tasks `0..tasks` of `job` on this thread and on every helper that joins,
    /// returning when all have finished. Called by one thread, the call's, kernel after
    /// kernel.
    pub fn run(&self, tasks: u32, job: Job) {
        let job_ref: &Job = &job;
        self.tasks.store(u64::from(tasks), Ordering::Relaxed);
        self.done.store(0, Ordering::Relaxed);
        self.job
            .store(job_ref as *const Job as *mut (), Ordering::Relaxed);
        let kernel = (self.state.load(Ordering::Relaxed) >> 32) + 1;
        // Release: a helper that sees the new kernel sees its task count and job, and
        // everything the earlier kernels wrote (which this thread acquired from `done`).
        self.state.store(kernel << 32, Ordering::Release);
        self.work(kernel);
        let mut idle = 0;
        while self.done.load(Ordering::Acquire) < u64::from(tasks) {
            pause(&mut idle);
        }
        if let Some(payload) = self.panicked.lock().unwrap_or_else(|e| e.into_inner()).take() {
            panic::resume_unwind(payload);
        }
    }

    /// A helper's part: the tasks of each kernel it sees, until [`gather`]'s body returns.
    pub fn help(&self) {
        let (mut seen, mut idle) = (0, 0);
        while !self.finished.load(Ordering::Acquire) {
            let kernel = self.state.load(Ordering::Acquire) >> 32;
            if kernel == seen {
                pause(&mut idle);
                continue;
            }
            seen = kernel;
            idle = 0;
            self.work(kernel);
        }
    }

    /// Claims and runs tasks of `kernel` while it is current and has tasks left.
    fn work(&self, kernel: u64) {
        loop {
            let state = self.state.load(Ordering::Acquire);
            let next = state & u64::from(u32::MAX);
            if state >> 32 != kernel || next >= self.tasks.load(Ordering::Relaxed) {
                return;
            }
            if self
                .state
                .compare_exchange_weak(state, state + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            // The claim succeeded, so `kernel` is still current and, with one of its tasks
            // unfinished, `run` has not returned: `job` is this kernel's (stored before the
            // kernel's number was released, and not stored again until its tasks are done).
            let job = self.job.load(Ordering::Acquire) as *const Job;
            // SAFETY: `job` points at `run`'s `job_ref`, a live `&dyn Fn` for as long as
            // this task is unfinished (above).
            let job = unsafe { *job };
            if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| job(next as i64))) {
                self.panicked
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(payload);
            }
            // Release: what the task wrote is seen by the thread that sees it done.
            self.done.fetch_add(1, Ordering::Release);
        }
    }
}

/// Runs `body` on `pool` with a crew of the calling pool thread and `helpers` helpers
/// spawned on the pool; the helpers return when `body` does, even by a panic.
pub fn gather<T: Send>(pool: &rayon::ThreadPool, helpers: usize, body: impl FnOnce(&Crew) -> T + Send) -> T {
    /// Tells the helpers that the call has no more kernels when dropped.
    struct Finish<'a>(&'a AtomicBool);
    impl Drop for Finish<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    pool.install(|| {
        let crew = Crew::default();
        rayon::scope(|s| {
            for _ in 0..helpers {
                s.spawn(|_| crew.help());
            }
            let _finish = Finish(&crew.finished);
            body(&crew)
        })
    })
}

/// One idle poll: a spin hint, and past [`SPINS`] polls, the core yielded too.
fn pause(idle: &mut u32) {
    if *idle < SPINS {
        *idle += 1;
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::gather;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Kernels `0..kernels`, each of `tasks(k)` tasks, run by a crew of the pool's threads:
    /// task `t` of kernel `k` adds the value kernel `k - 1`'s task `t` left (written on
    /// whichever thread ran it) plus 1, and counts its runs.
    fn chain(
        threads: usize,
        helpers: usize,
        kernels: usize,
        tasks: fn(usize) -> u32,
    ) -> (Vec<u64>, Vec<u64>) {
        let width = (0..kernels).map(tasks).max().unwrap_or(0) as usize;
        let values: Vec<AtomicU64> = (0..width).map(|_| AtomicU64::new(0)).collect();
        let runs: Vec<AtomicU64> = (0..width).map(|_| AtomicU64::new(0)).collect();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        gather(&pool, helpers, |crew| {
            for k in 0..kernels {
                crew.run(tasks(k), &|t| {
                    let t = t as usize;
                    let v = values[t].load(Ordering::Relaxed);
                    // A task long enough that another kernel's run of task `t` started
                    // before this one ended would lose an update.
                    (0..200).for_each(|_| std::hint::spin_loop());
                    values[t].store(v + 1, Ordering::Relaxed);
                    runs[t].fetch_add(1, Ordering::Relaxed);
                });
            }
        });
        let take = |v: Vec<AtomicU64>| v.into_iter().map(AtomicU64::into_inner).collect();
        (take(values), take(runs))
    }

    #[test]
    fn every_task_of_every_kernel_runs_once_after_the_kernel_before() {
        // Kernels of 2 to 40 tasks, some of one task, so that helpers often find none left.
        let tasks = |k: usize| [37, 2, 1, 40, 5][k % 5];
        let kernels = 2000;
        for (threads, helpers) in [(4, 3), (2, 1), (3, 5)] {
            let (values, runs) = chain(threads, helpers, kernels, tasks);
            for t in 0..values.len() {
                let want = (0..kernels).filter(|&k| (t as u32) < tasks(k)).count() as u64;
                assert_eq!(values[t], want, "task {t}, {threads} threads");
                assert_eq!(runs[t], want, "task {t}, {threads} threads");
            }
        }
    }

    #[test]
    fn the_calling_thread_runs_every_task_no_helper_took() {
        let (values, _) = chain(2, 0, 50, |_| 9);
        assert_eq!(values, vec![50; 9]);
    }

    /// A task's panic, on whichever thread, is raised on the calling thread once all the
    /// kernel's tasks have run (the helpers return and the call ends: no hang). Ten rounds,
    /// so that a helper runs the failing task in some.
    #[test]
    fn a_panicking_task_reaches_the_caller_after_the_kernel_and_the_helpers_return() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        for round in 0..10 {
            let runs = AtomicU64::new(0);
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                gather(&pool, 2, |crew| {
                    crew.run(64, &|t| {
                        std::thread::sleep(std::time::Duration::from_micros(50));
                        runs.fetch_add(1, Ordering::Relaxed);
                        assert_ne!(t, 17, "task 17 fails");
                    });
                    assert_eq!(runs.load(Ordering::Relaxed), 64, "a task ran after `run`");
                })
            }));
            let payload = caught.expect_err("the task's panic reaches the caller");
            let message = payload.downcast_ref::<String>().cloned().unwrap_or_default();
            assert!(message.contains("task 17 fails"), "round {round}: {message}");
            assert_eq!(runs.into_inner(), 64, "round {round}");
        }
    }
}
