#!/usr/bin/env python3
"""The seed module called from Python: attnc's compiled function beside ONNX Runtime's
`InferenceSession.run`, PyTorch eager and `torch.compile`, each called the same way (the
inputs already in memory, the outputs returned) in the same run, on the same threads.

Needs attnc installed (`pip install .`) in a Python that has torch and onnxruntime:

    python benches/python_call.py --shapes T,S --threads 2 --calls 200

Prints one JSON row per implementation and shape, then a Markdown table of the medians in
microseconds with each peer's ratio to attnc (above 1: attnc is faster).
"""
import argparse
import io
import json
import statistics
import time

import numpy as np
import torch

import attnc

SHAPES = {"T": (1, 16, 64, 4), "S": (1, 128, 512, 8)}
SEED = "examples/mha.attn"


class SeedModule(torch.nn.Module):
    """The Annotated Transformer's MultiHeadedAttention, as `examples/mha.attn` reads it."""

    def __init__(self, d, h):
        super().__init__()
        self.h, self.dk = h, d // h
        self.linears = torch.nn.ModuleList([torch.nn.Linear(d, d) for _ in range(4)])

    def forward(self, query, key, value, mask):
        b = query.size(0)
        q, k, v = [
            lin(x).view(b, -1, self.h, self.dk).transpose(1, 2)
            for lin, x in zip(self.linears, (query, key, value))
        ]
        scores = q @ k.transpose(-2, -1) / self.dk**0.5
        p = scores.masked_fill(mask.unsqueeze(1) == 0, -1e9).softmax(-1)
        x = (p @ v).transpose(1, 2).contiguous().view(b, -1, self.h * self.dk)
        return self.linears[3](x), p


def median_us(call, calls, warmup):
    for _ in range(warmup):
        call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def onnx_session(module, inputs, threads):
    import onnxruntime as ort

    buf = io.BytesIO()
    names = ["query", "key", "value", "mask"]
    torch.onnx.export(module, tuple(inputs), buf, input_names=names, output_names=["out", "attn"], dynamo=False)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    session = ort.InferenceSession(buf.getvalue(), opts, providers=["CPUExecutionProvider"])
    feed = {n: t.numpy() for n, t in zip(names, inputs)}
    return lambda: session.run(None, feed)


def bench_shape(shape, threads, calls, warmup):
    b, n, d, h = SHAPES[shape]
    torch.manual_seed(0)
    module = SeedModule(d, h).eval()
    x = torch.randn(b, n, d)
    mask = torch.ones(b, 1, n)
    inputs = (x, x, x, mask)
    f = attnc.compile(SEED, dims={"D": d, "H": h}, weights=module.state_dict(), threads=threads)
    arrays = {"query": x.numpy(), "key": x.numpy(), "value": x.numpy(), "mask": mask.numpy()}
    compiled = torch.compile(module)
    impls = {"attnc": lambda: f(**arrays)}
    try:
        impls["onnxruntime"] = onnx_session(module, inputs, threads)
    except Exception as e:  # an exporter that fails is reported, not fatal
        print(json.dumps({"impl": "onnxruntime", "shape": shape, "error": str(e)[:200]}))

    def eager():
        with torch.inference_mode():
            return module(*inputs)

    def compiled_call():
        with torch.inference_mode():
            return compiled(*inputs)

    impls["torch_eager"] = eager
    impls["torch_compile"] = compiled_call
    rows = []
    for name, call in impls.items():
        us = median_us(call, calls, warmup)
        rows.append({"impl": name, "shape": shape, "median_us": round(us, 2), "calls": calls, "threads": threads})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="T,S")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = [r for s in args.shapes.split(",") for r in bench_shape(s, args.threads, args.calls, args.warmup)]
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    table = {(r["impl"], r["shape"]): r["median_us"] for r in rows}
    print("\n| impl | " + " | ".join(f"{s} (us)" for s in shapes) + " |")
    print("| --- |" + " --- |" * len(shapes))
    for impl in dict.fromkeys(r["impl"] for r in rows):
        cells = []
        for s in shapes:
            us, ours = table.get((impl, s)), table.get(("attnc", s))
            ratio = "" if impl == "attnc" or us is None else f" ({us / ours:.2f}x)"
            cells.append("-" if us is None else f"{us:.1f}{ratio}")
        print(f"| {impl} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
