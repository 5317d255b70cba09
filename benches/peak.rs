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

/// GFLOP/s of `CHAINS` independent 16-lane FMA chains on one thread.
///
/// # Safety
/// The CPU must have AVX-512F (the caller checks `is_x86_feature_detected!`).
#[target_feature(enable = "avx512f")]
unsafe fn fma512(trips: usize) -> f64 {
    let mut acc = [_mm512_set1_ps(0.0); CHAINS];
    let (a, b) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
    let start = Instant::now();
    for _ in 0..trips {
        for x in acc.iter_mut() {
            *x = _mm512_fmadd_ps(*x, a, b);
        }
    }
    let s = start.elapsed().as_secs_f64();
    black_box(acc);
    (trips * CHAINS * 16 * 2) as f64 / s / 1e9
}

/// The same with 8-lane (256-bit) vectors: the machine's width where it has no AVX-512.
///
/// # Safety
/// The CPU must have AVX and FMA (the caller checks `is_x86_feature_detected!`).
#[target_feature(enable = "avx,fma")]
unsafe fn fma256(trips: usize) -> f64 {
    let mut acc = [_mm256_set1_ps(0.0); CHAINS];
    let (a, b) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
    let start = Instant::now();
    for _ in 0..trips {
        for x in acc.iter_mut() {
            *x = _mm256_fmadd_ps(*x, a, b);
        }
    }
    let s = start.elapsed().as_secs_f64();
    black_box(acc);
    (trips * CHAINS * 8 * 2) as f64 / s / 1e9
}

/// The same with 4-lane (128-bit) vectors: Cranelift's width.
///
/// # Safety
/// The CPU must have FMA (the caller checks `is_x86_feature_detected!`).
#[target_feature(enable = "fma")]
unsafe fn fma128(trips: usize) -> f64 {
    let mut acc = [_mm_set1_ps(0.0); CHAINS];
    let (a, b) = (_mm_set1_ps(0.999_999), _mm_set1_ps(1e-7));
    let start = Instant::now();
    for _ in 0..trips {
        for x in acc.iter_mut() {
            *x = _mm_fmadd_ps(*x, a, b);
        }
    }
    let s = start.elapsed().as_secs_f64();
    black_box(acc);
    (trips * CHAINS * 4 * 2) as f64 / s / 1e9
}

/// The sum over `threads` threads running `f` at once.
fn on_threads(threads: usize, f: fn() -> f64) -> f64 {
    let handles: Vec<_> = (0..threads).map(|_| std::thread::spawn(f)).collect();
    handles.into_iter().map(|h| h.join().unwrap()).sum()
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
    if is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512F was detected just above, on this thread.
        let one = || unsafe { fma512(TRIPS) };
        // SAFETY: AVX-512F was detected just above; every core of the machine has the same
        // features, so the worker threads have it too.
        let all = || on_threads(threads, || unsafe { fma512(TRIPS) });
        println!(
            "FMA peak, 512-bit vectors: {:6.1} GFLOP/s on 1 thread, {:6.1} on {threads}",
            best(one),
            best(all)
        );
    } else {
        println!("FMA peak, 512-bit vectors: no AVX-512F on this CPU");
    }
    if is_x86_feature_detected!("avx") && is_x86_feature_detected!("fma") {
        // SAFETY: AVX and FMA were detected just above, on this thread.
        let one = || unsafe { fma256(TRIPS) };
        // SAFETY: AVX and FMA were detected just above; every core of the machine has the
        // same features, so the worker threads have them too.
        let all = || on_threads(threads, || unsafe { fma256(TRIPS) });
        println!(
            "FMA peak, 256-bit vectors: {:6.1} GFLOP/s on 1 thread, {:6.1} on {threads}",
            best(one),
            best(all)
        );
    }
    if is_x86_feature_detected!("fma") {
        // SAFETY: FMA was detected just above, on this thread.
        let one = || unsafe { fma128(TRIPS) };
        // SAFETY: FMA was detected just above; every core of the machine has the same
        // features, so the worker threads have it too.
        let all = || on_threads(threads, || unsafe { fma128(TRIPS) });
        println!(
            "FMA peak, 128-bit vectors: {:6.1} GFLOP/s on 1 thread, {:6.1} on {threads}",
            best(one),
            best(all)
        );
    }
    println!(
        "memory bandwidth (copy of 1 GiB, read + written): {:6.1} GB/s on 1 thread, {:6.1} on {threads}",
        copy_bandwidth(1 << 30, 1),
        copy_bandwidth(1 << 30, threads)
    );
}
