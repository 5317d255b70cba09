#!/usr/bin/env python3
"""attnc on whole transformer blocks, beside the peers of ../shared/bench/blocks_peers.py.

Runs `attnc bench` on the blocks' cases (encoder_M, gpt2_S, llama_S, and each attention
variant whose example exists: causal_L, window_L, alibi_L, softcap_L, decode) on 2 threads,
waiting for the machine to be quiet before each case and re-running a case that other
processes disturbed (as peers.py does), measures the FMA peak in the same run
(`cargo bench --bench peak`), then prints a Markdown table: attnc's median, every peer's
median from a peers JSON (blocks_peers.py --out) with the ratio peer / attnc, and the
share of the FMA peak each reaches.

    python3 blocks_peers.py --out blocks_peers.json   # the peers
    python3 benches/blocks.py --attnc target/release/attnc --peers blocks_peers.json

attnc's own results go to `--out`, by default `attnc_blocks.json` in a fresh temporary
directory (its path is printed); without `--peers` the peers' cells are empty.

A case is a program and its dims; the dims are the peers' (blocks_peers.py's CASES).
"""
import argparse, json, os, re, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import least_disturbed, timed  # noqa: E402

CASES = {
    "encoder_M": ("examples/encoder_layer.attn", dict(B=8, N=512, D=512, H=8, F=2048)),
    "gpt2_S": ("examples/gpt2_block.attn", dict(B=1, N=1024, D=768, H=12)),
    "llama_S": ("examples/llama_layer.attn", dict(B=1, N=1024, D=2048, H=32, Hkv=4, F=5632)),
    "causal_L": ("examples/causal_from_positions.attn", dict(B=1, N=2048, D=1024, H=16)),
    "window_L": ("examples/sliding_window.attn", dict(B=1, N=4096, D=512, H=8, W=256)),
    "alibi_L": ("examples/alibi.attn", dict(B=1, N=2048, D=1024, H=16)),
    "softcap_L": ("examples/softcap.attn", dict(B=1, N=2048, D=1024, H=16)),
    "decode": ("examples/gqa_decode.attn", dict(B=1, M=4096, D=2048, H=32, Hkv=8)),
}
PEERS = ["onnxruntime", "jax_jit", "torch_compile", "flex", "torch_sdpa", "torch_eager"]


def bench(attnc, case, threads):
    """One `attnc bench` of a case."""
    path, dims = CASES[case]
    cmd = [attnc, "bench", path, "--format", "json", "--threads", str(threads)]
    for k, v in dims.items():
        cmd += ["--dim", f"{k}={v}"]
    return dict(timed(cmd), case=case)


def fma_peak(threads):
    """The FMA peak in GFLOP/s on `threads` threads at the machine's widest vectors (512
    bits, else 256: benches/peak.rs), or None."""
    env = dict(os.environ, ATTNC_THREADS=str(threads))
    out = subprocess.run(["cargo", "bench", "--bench", "peak"], capture_output=True, text=True, env=env).stdout
    for bits in (512, 256):
        m = re.search(rf"{bits}-bit vectors:\s*([\d.]+) GFLOP/s on 1 thread,\s*([\d.]+) on", out)
        if m:
            return float(m.group(2))
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnc", default="target/release/attnc")
    ap.add_argument("--peers", help="the peers' JSON (blocks_peers.py --out)")
    ap.add_argument("--out", help="where attnc's JSON goes [default: a fresh temporary directory]")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--retries", type=int, default=3)
    ap.add_argument("--wait-quiet", type=float, default=120.0)
    ap.add_argument("--no-peak", action="store_true", help="skip measuring the FMA peak")
    args = ap.parse_args()
    rows = []
    for case in args.cases.split(","):
        if not os.path.exists(CASES[case][0]):
            print(f"{case}: {CASES[case][0]} does not exist yet, skipped", file=sys.stderr)
            continue
        best = least_disturbed(lambda: bench(args.attnc, case, args.threads), args.retries, args.wait_quiet)
        print(json.dumps(best), flush=True)
        rows.append(best)
    peak = None if args.no_peak else fma_peak(args.threads)
    out = args.out or os.path.join(tempfile.mkdtemp(prefix="attnc-blocks-"), "attnc_blocks.json")
    with open(out, "w") as f:
        json.dump({"threads": args.threads, "fma_peak_gflops": peak, "results": rows}, f, indent=1)
    peers, flops = {}, {}
    print(f"wrote {out}", file=sys.stderr)
    if args.peers and os.path.exists(args.peers):
        with open(args.peers) as f:
            for r in json.load(f)["results"]:
                if r.get("status") == "ok" and r["threads"] == args.threads:
                    peers[(r["impl"], r["case"])] = r
                    flops[r["case"]] = r["flops"]
    mark = lambda r: "*" if r.get("contended") else ""
    share = lambda ms, case: f" {flops[case] / (ms * 1e6) / peak:.0%}" if peak and case in flops else ""
    print(f"\n{args.threads} threads, median ms (ratio peer / attnc); % = share of the FMA peak "
          f"({peak if peak else '-'} GFLOP/s, same run); * = disturbed by other processes\n")
    print("| case | attnc | " + " | ".join(PEERS) + " | fastest peer / attnc |")
    print("| --- |" + " --- |" * (len(PEERS) + 2))
    for r in rows:
        case, ms = r["case"], r["median_ms"]
        cells, fastest = [], None
        for p in PEERS:
            q = peers.get((p, case))
            if q is None:
                cells.append("-")
                continue
            fastest = min(fastest or q["median_ms"], q["median_ms"])
            cells.append(f"{q['median_ms']:.1f}{mark(q)} ({q['median_ms'] / ms:.2f}x){share(q['median_ms'], case)}")
        ratio = f"{fastest / ms:.2f}x" if fastest else "-"
        print(f"| {case} | {ms:.1f}{mark(r)}{share(ms, case)} | " + " | ".join(cells) + f" | {ratio} |")


if __name__ == "__main__":
    main()
