//! End-to-end benchmark: `examples/self_attention.attn` compiled and run at the peer
//! benchmark's shapes S and M (`ATTNC_SHAPES=T,S,M,L` for others), on 2 threads unless
//! `ATTNC_THREADS` says otherwise. Plain timing, no harness: the weights are prepared once,
//! then warm-up and the median of repeated calls, as `attnc bench` does.

use attnc::check::DimOverride;
use attnc::driver::check_source;
use attnc::lower::source_flops;
use attnc::runtime::jit::{pool, Executable};
use attnc::runtime::{bind, RunOptions};
use std::time::{Duration, Instant};

const SHAPES: &[(&str, [i64; 4])] = &[
    ("T", [1, 16, 64, 4]),
    ("S", [1, 128, 512, 8]),
    ("M", [8, 512, 512, 8]),
    ("L", [1, 2048, 1024, 16]),
];

fn main() {
    let threads: usize = std::env::var("ATTNC_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2);
    let wanted = std::env::var("ATTNC_SHAPES").unwrap_or_else(|_| "S,M".into());
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/self_attention.attn");
    let src = std::fs::read_to_string(path).unwrap();
    let pool = pool(threads).unwrap();
    println!("self_attention.attn, {threads} thread(s): median ms, GFLOP/s, compile ms");
    for (name, [b, n, d, h]) in SHAPES.iter().filter(|(s, _)| wanted.split(',').any(|w| w == *s)) {
        let dims: Vec<DimOverride> = [("B", b), ("N", n), ("D", d), ("H", h)]
            .iter()
            .map(|&(k, &v)| DimOverride {
                name: k.into(),
                value: v,
            })
            .collect();
        let program = check_source(&src, &dims).unwrap().program;
        let bound = bind(&program, &RunOptions::default()).unwrap();
        let exe = Executable::compile(&program, &bound.dims).unwrap();
        let prepared = exe.prepare(&bound.params, &pool).unwrap();
        let mut outputs = Vec::new();
        let mut call = || {
            exe.run_prepared(&bound, &prepared, &pool, &mut outputs, None)
                .unwrap()
        };
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(300) {
            call();
        }
        let mut times = Vec::new();
        let start = Instant::now();
        while times.len() < 10 || start.elapsed() < Duration::from_secs(1) {
            let t = Instant::now();
            call();
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        let gflops = source_flops(&program, &bound.dims) / (median * 1e-3) / 1e9;
        println!(
            "  {name}: {median:9.4} ms  {gflops:7.1} GFLOP/s  compile {:.2} ms",
            exe.compile_ms
        );
    }
}
