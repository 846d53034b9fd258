"""llama.cpp as a benchmark backend at concurrency 1, driven over stdin/stdout by benchmarks/generation.py.

Runs inside its own virtual environment (.cache/bench/llama-venv: llama-cpp-python from PyPI, built from source with
llama.cpp's defaults, GGML_NATIVE on, so it uses every vector extension this CPU has; under
BATCHSCALE_CPU_CAPABILITY=avx2, .cache/bench/llama-venv-avx2, built for AVX2 + FMA only). Usage:

    VENV/bin/python benchmarks/llama_worker.py GGUF_FILE N_CTX THREADS

The GGUF file is made by llama.cpp's own converter (convert_hf_to_gguf.py, from the same source package) from the
same Hugging Face checkpoint the other backends load, in bf16 or f32 (generation.py does this once). Each line on
stdin is a JSON request {"prompt_token_ids": [[...], ...], "concurrency": 1, "max_new_tokens": T}; each reply is one
JSON line {"seconds", "tokens", "responses"}: the wall time of generating every prompt's response in turn (one
sequence at a time: llama-cpp-python's high-level API decodes one sequence), sampling at temperature 1, top_p 1, no
top-k, min-p or repetition penalty, stopping at EOS or after T tokens. A prompt equal to the previous one reuses its
KV cache (llama-cpp-python keeps the common prefix), as the engine prefills a shared prompt once.
"""

import json
import os
import sys
import time


def main() -> None:
    gguf, n_ctx, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    replies = os.fdopen(os.dup(1), "w", buffering=1)  # the protocol keeps the real stdout ...
    os.dup2(2, 1)  # ... and everything llama.cpp prints goes to stderr

    import llama_cpp

    start = time.perf_counter()
    llm = llama_cpp.Llama(model_path=gguf, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, seed=0,
                          verbose=False)
    replies.write(json.dumps({"ready": True, "start_s": time.perf_counter() - start,
                              "version": llama_cpp.__version__}) + "\n")
    eos = llm.token_eos()
    for line in sys.stdin:
        request = json.loads(line)
        if request["concurrency"] != 1:
            raise SystemExit(f"llama_worker runs concurrency 1 only, not {request['concurrency']}")
        tokens = 0
        start = time.perf_counter()
        for ids in request["prompt_token_ids"]:
            for n, token in enumerate(llm.generate(ids, temp=1.0, top_p=1.0, top_k=0, min_p=0.0,
                                                   repeat_penalty=1.0), start=1):
                tokens += 1
                if token == eos or n >= request["max_new_tokens"]:
                    break
        seconds = time.perf_counter() - start
        replies.write(json.dumps({"seconds": seconds, "tokens": tokens,
                                  "responses": len(request["prompt_token_ids"])}) + "\n")


if __name__ == "__main__":
    main()
