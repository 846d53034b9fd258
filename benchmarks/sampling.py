"""Sampling one token per row: the native pass over bf16 logits against torch's float32 path, ms per call.

`sampling.sample_tokens` sends bf16 logits with top_p = 1 to `native.sample` (kernels/sample_avx512.c) on a CPU with
avx512_bf16; everything else goes through torch in float32 (softmax, cumsum, searchsorted, logsumexp over a float32
copy). Both are timed here on the same random logits (SmolLM2's vocabulary by default), best of --repeats.

    .venv/bin/python benchmarks/sampling.py --rows 1,16,64,256 --threads 1
"""

from __future__ import annotations

import argparse

import torch
from bf16_linear import best_ms  # benchmarks/ is this script's directory

from batchscale.rollout import native
from batchscale.rollout.sampling import sample_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,16,64,256")
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if native.bf16_linear_kernel("avx512_bf16") is None:
        raise SystemExit(f"the native sampler needs the avx512_bf16 kernels: {native.unavailable_reason('avx512_bf16')}")
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    print(f"vocabulary {args.vocab}, {args.threads} thread(s), best of {args.repeats}; ms per call")
    print(f"{'rows':>5} {'native':>8} {'torch':>8} {'speed-up':>9}")
    for rows in (int(r) for r in args.rows.split(",")):
        logits = (3 * torch.randn(rows, args.vocab, generator=generator)).bfloat16()
        uniforms = torch.rand(rows, generator=generator)
        fast = best_ms(lambda: native.sample(logits, uniforms, 1.0), args.repeats)
        slow = best_ms(lambda: sample_tokens(logits.float(), uniforms, 1.0, 1.0), args.repeats)
        print(f"{rows:>5} {fast:8.2f} {slow:8.2f} {slow / fast:8.1f}x")


if __name__ == "__main__":
    main()
