#!/usr/bin/env python3
"""Compile time of every case, two attnc binaries side by side, in one run.

Each case is `attnc ir FILE --stage asm` at the case's dims: parsing, checking, optimizing,
lowering, and Cranelift translating and compiling every distinct kernel (printing its
register-allocated code), no weights and no run. `--stage clif` stops before Cranelift's
compile (CLIF built, verified and printed). The two binaries take turns
(`--rounds` rounds; in each, every case once with each binary), each call under
`perf stat -e task-clock`, and the table gives each case's median CPU ms (all threads;
steadier than wall time on a shared machine) beside its median wall ms.

    python3 benches/compile_time.py --before OLD/attnc --after target/release/attnc

The cases: the seed module (`examples/self_attention.attn`) at benches/peers.py's T, S, M
and L; the blocks and variants of benches/blocks.py; all-MiniLM-L6-v2 at 1x16, 32x128 and
8x256; SmolLM2 prefilling 512 tokens and decoding one at 128. Without `perf`, the CPU
column is the child's user + system time from `resource`.
"""
import argparse, os, resource, shutil, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blocks import CASES as BLOCKS  # noqa: E402
from peers import SHAPES  # noqa: E402

CASES = {f"seed {s}": ("examples/self_attention.attn", dict(B=b, N=n, D=d, H=h)) for s, (b, n, d, h) in SHAPES.items()}
CASES.update(BLOCKS)
CASES.update({f"MiniLM {b}x{n}": ("examples/models/minilm.attn", dict(B=b, N=n)) for b, n in [(1, 16), (32, 128), (8, 256)]})
CASES["SmolLM2 prefill 512"] = ("examples/models/smollm2.attn", dict(B=1, N=512, C=512))
CASES["SmolLM2 decode at 128"] = ("examples/models/smollm2.attn", dict(B=1, N=1, C=129))


def compile_once(binary, case, stage, scratch):
    """CPU ms and wall ms of one `attnc ir --stage STAGE` of `case`."""
    path, dims = CASES[case]
    cmd = [binary, "ir", path, "--stage", stage]
    for k, v in dims.items():
        cmd += ["--dim", f"{k}={v}"]
    stat = os.path.join(scratch, "stat")
    perf = shutil.which("perf")
    if perf:
        cmd = [perf, "stat", "-x", ",", "-e", "task-clock", "-o", stat] + cmd
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = (time.perf_counter() - start) * 1e3
    if perf:
        with open(stat) as f:
            line = next(l for l in f if "task-clock" in l)
        return float(line.split(",")[0]), wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1e3
    return cpu, wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="the binary before the change")
    ap.add_argument("--after", default="target/release/attnc")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--stage", default="asm", choices=["asm", "clif", "kernels", "optimized"])
    args = ap.parse_args()
    cases = args.cases.split(",")
    times = {(b, c): [] for b in ("before", "after") for c in cases}
    with tempfile.TemporaryDirectory(prefix="attnc-compile-") as scratch:
        for _ in range(args.rounds):
            for case in cases:
                for which in ("before", "after"):
                    times[which, case].append(compile_once(getattr(args, which), case, args.stage, scratch))
    print("| case | CPU ms before | CPU ms after | wall ms before | wall ms after |")
    print("| --- | --- | --- | --- | --- |")
    for case in cases:
        med = lambda which, i: statistics.median(t[i] for t in times[which, case])
        print(f"| {case} | {med('before', 0):.1f} | {med('after', 0):.1f} | {med('before', 1):.1f} | {med('after', 1):.1f} |")


if __name__ == "__main__":
    main()
