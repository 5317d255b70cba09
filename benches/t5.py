#!/usr/bin/env python3
"""T5's self-attention (examples/t5_attention.attn) beside PyTorch, in one run.

At B 8, N 512 (T5-small's D 512, H 8), for three int64 masks of the same program: a
standard normal rounded (`1 - mask` from -2 to 4 or so: added values of finfo.min's size of
both signs, and infinities), a 0/1 padding mask (a fifth of the keys padded) and no
padding (all ones). The position bias is a standard normal.
Each round runs every attnc binary given (`--attnc A --attnc B`: before and after, in
turn) and the two peers, with the same inputs, bias and mask:

  torch_eager  Hugging Face's own T5Attention (eager), given the position bias and the
               extended mask `(1 - mask[:, None, None, :]) * finfo.min`;
  torch_sdpa   the same projections around F.scaled_dot_product_attention with the bias
               plus the extended mask as its float attn_mask, scale 1.

The table has each one's median over the rounds (each round itself a median of repeated
calls) and the ratio peer / attnc. On a machine others load, compare the ratios.

    python3 benches/t5.py --attnc target/release/attnc --rounds 5   # with torch, transformers, safetensors
"""
import argparse, json, os, statistics, subprocess, tempfile, time

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import T5Config
from transformers.models.t5.modeling_t5 import T5Attention

B, N, D, H = 8, 512, 512, 8
MASKS = ("normal", "padding", "none")


def inputs(kind, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, D, generator=g)
    bias = torch.randn(1, H, N, N, generator=g)
    if kind == "normal":
        mask = torch.randn(B, N, generator=g).round().long()
    elif kind == "padding":
        mask = (torch.rand(B, N, generator=g) >= 0.2).long()
    else:
        mask = torch.ones(B, N, dtype=torch.long)
    return {"hidden_states": x, "attention_mask": mask, "position_bias": bias}


def attnc_ms(attnc, file, threads):
    cmd = [attnc, "bench", "examples/t5_attention.attn", "--inputs", file, "--format", "json",
           "--threads", str(threads), "--dim", f"B={B}", "--dim", f"N={N}"]
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)["median_ms"]


def module():
    cfg = T5Config(d_model=D, d_kv=D // H, num_heads=H, dropout_rate=0.0)
    cfg._attn_implementation = "eager"
    return T5Attention(cfg, has_relative_attention_bias=False, layer_idx=0).eval()


def sdpa(m, x, ext, bias):
    heads = lambda t: t.view(B, -1, H, D // H).transpose(1, 2)  # noqa: E731
    q, k, v = heads(m.q(x)), heads(m.k(x)), heads(m.v(x))
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=bias + ext, scale=1.0)
    return m.o(o.transpose(1, 2).reshape(B, -1, D))


def torch_ms(f, repeats):
    with torch.no_grad():
        f()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            f()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnc", action="append", help="an attnc binary (repeatable)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=10, help="calls per round of a peer")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    binaries = args.attnc or ["target/release/attnc"]
    torch.set_num_threads(args.threads)
    tmp = tempfile.mkdtemp(prefix="attnc-t5-")
    m = module()
    times = {}
    for kind in MASKS:
        t = inputs(kind)
        file = os.path.join(tmp, f"{kind}.safetensors")
        save_file(t, file)
        x, bias = t["hidden_states"], t["position_bias"]
        ext = (1.0 - t["attention_mask"][:, None, None, :].float()) * torch.finfo(torch.float32).min
        peers = {
            "torch_eager": lambda: m(x, mask=ext, position_bias=bias),
            "torch_sdpa": lambda: sdpa(m, x, ext, bias),
        }
        for _ in range(args.rounds):
            for a in binaries:
                times.setdefault((kind, a), []).append(attnc_ms(a, file, args.threads))
            for p, f in peers.items():
                times.setdefault((kind, p), []).append(torch_ms(f, args.repeats))
        print(json.dumps({f"{k[0]} {k[1]}": v for k, v in times.items() if k[0] == kind}), flush=True)
    names = binaries + ["torch_eager", "torch_sdpa"]
    print(f"\nB {B}, N {N}, D {D}, H {H}, {args.threads} threads, median of {args.rounds} rounds (ms)\n")
    print("| mask | " + " | ".join(os.path.basename(n) for n in names) + " |")
    print("| --- |" + " --- |" * len(names))
    for kind in MASKS:
        med = {n: statistics.median(times[(kind, n)]) for n in names}
        last = med[binaries[-1]]
        cells = [f"{med[n]:.1f}" + ("" if n == binaries[-1] else f" ({med[n] / last:.2f}x)") for n in names]
        print(f"| {kind} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
