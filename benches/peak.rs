//! The machine's ceilings, measured the way the issues ask, so the other benchmarks' numbers
//! can stand beside them in one run: the float32 FMA peak (a loop of independent fused
//! multiply-adds on 512-, 256- and 128-bit vectors, 1 thread and every thread) and the
//! memory bandwidth (a large copy: each byte read once and written once).
//! `cargo bench --bench peak`; `ATTNC_THREADS` sets "every thread" (default 2).

use std::arch::x86_64::*;
use std::hint::black_box;
use std::time::Instant;

/// Independent accumulators: more than the FMA latency (4) times the ports (2).
const CHAINS: usize = 12;
const TRIPS: usize = 20_000_000;

/// Defines `$name(trips)`: GFLOP/s of `CHAINS` independent FMA chains of `$lanes`-lane
/// vectors on one thread, one function per width.
macro_rules! fma_chains {
    ($name:ident, $features:literal, $lanes:literal, $set1:ident, $fmadd:ident) => {
        /// GFLOP/s of `CHAINS` independent FMA chains on one thread, at one vector width.
        ///
        /// # Safety
        /// The CPU must have the features this function enables (the caller checks
        /// `is_x86_feature_detected!`).
        #[target_feature(enable = $features)]
        unsafe fn $name(trips: usize) -> f64 {
            let mut acc = [$set1(0.0); CHAINS];
            let (a, b) = ($set1(0.999_999), $set1(1e-7));
            let start = Instant::now();
            for _ in 0..trips {
                for x in acc.iter_mut() {
                    *x = $fmadd(*x, a, b);
                }
            }
            let s = start.elapsed().as_secs_f64();
            black_box(acc);
            (trips * CHAINS * $lanes * 2) as f64 / s / 1e9
        }
    };
}

fma_chains!(fma512, "avx512f", 16, _mm512_set1_ps, _mm512_fmadd_ps);
// The machine's width where it has no AVX-512.
fma_chains!(fma256, "avx,fma", 8, _mm256_set1_ps, _mm256_fmadd_ps);
// Cranelift's width.
fma_chains!(fma128, "fma", 4, _mm_set1_ps, _mm_fmadd_ps);

/// The sum over `threads` threads running `f` at once.
fn on_threads(threads: usize, f: impl Fn() -> f64 + Send + Copy + 'static) -> f64 {
    let handles: Vec<_> = (0..threads).map(|_| std::thread::spawn(f)).collect();
    handles.into_iter().map(|h| h.join().unwrap()).sum()
}

/// Prints the FMA peak of `fma`, a width's chains, on 1 thread and on `threads`, where
/// `available` (its features detected) says it may run.
fn report(bits: u32, available: bool, fma: unsafe fn(usize) -> f64, threads: usize) {
    if !available {
        return println!("FMA peak, {bits}-bit vectors: not on this CPU");
    }
    // SAFETY: the features `fma` enables were detected (`available`); every core of the
    // machine has the same features, so the worker threads have them too.
    let one = move || unsafe { fma(TRIPS) };
    println!(
        "FMA peak, {bits}-bit vectors: {:6.1} GFLOP/s on 1 thread, {:6.1} on {threads}",
        best(one),
        best(|| on_threads(threads, one))
    );
}

/// The best of three.
fn best(f: impl Fn() -> f64) -> f64 {
    (0..3).map(|_| f()).fold(0.0, f64::max)
}

/// GB/s of copying `bytes` (counted twice: read and written), split over `threads`.
fn copy_bandwidth(bytes: usize, threads: usize) -> f64 {
    let n = bytes / 4;
    let src = vec![1.0f32; n];
    let mut dst = vec![0.0f32; n];
    let chunk = n.div_ceil(threads);
    let mut best = 0.0f64;
    for _ in 0..5 {
        let start = Instant::now();
        std::thread::scope(|s| {
            for (d, c) in dst.chunks_mut(chunk).zip(src.chunks(chunk)) {
                s.spawn(move || d.copy_from_slice(c));
            }
        });
        best = best.max(2.0 * bytes as f64 / start.elapsed().as_secs_f64() / 1e9);
    }
    black_box(&dst);
    best
}

fn main() {
    let threads: usize = std::env::var("ATTNC_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2);
    report(512, is_x86_feature_detected!("avx512f"), fma512, threads);
    let avx2 = is_x86_feature_detected!("avx") && is_x86_feature_detected!("fma");
    report(256, avx2, fma256, threads);
    report(128, is_x86_feature_detected!("fma"), fma128, threads);
    println!(
        "memory bandwidth (copy of 1 GiB, read + written): {:6.1} GB/s on 1 thread, {:6.1} on {threads}",
        copy_bandwidth(1 << 30, 1),
        copy_bandwidth(1 << 30, threads)
    );
}
