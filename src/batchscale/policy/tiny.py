"""The built-in tiny policy: a ~3M-parameter Llama with a character tokenizer, warm-started by supervised training.

RL needs a policy that already solves some problems: with zero accuracy every GRPO group has equal rewards and no
gradient. The warm start fits the built-in task's answers with next-token cross-entropy for a fixed, small number of
steps, deterministically (fixed seed, fixed data order), stopping well short of the ceiling so RL has room to improve.
The result is saved as an ordinary Hugging Face model directory under the cache, named by a content hash of everything
that determines it (architecture, tokenizer, task, warm-start recipe), so it is built once and then loaded like any
local checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from batchscale.batching import collate, token_logprobs
from batchscale.policy.tokenizer import CHARACTERS, SPECIAL_TOKENS, build_char_tokenizer

TINY_ARCHITECTURE = dict(
    hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
    intermediate_size=688, max_position_embeddings=128, tie_word_embeddings=True,
    attention_dropout=0.0, rms_norm_eps=1e-5,
)
WARM_START = dict(steps=700, batch=64, lr=1e-3, seed=1234, version=1)


def cache_root() -> Path:
    return Path(os.environ.get("BATCHSCALE_CACHE", Path.home() / ".cache" / "batchscale"))


def tiny_config(vocab_size: int) -> LlamaConfig:
    return LlamaConfig(vocab_size=vocab_size, pad_token_id=0, bos_token_id=1, eos_token_id=2, **TINY_ARCHITECTURE)


def content_hash(task_fields: dict) -> str:
    recipe = {"architecture": TINY_ARCHITECTURE, "vocab": SPECIAL_TOKENS + CHARACTERS, "task": task_fields,
              "warm_start": WARM_START}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def warm_start(model, tokenizer, task, steps: int, batch: int, lr: float, seed: int) -> list[float]:
    """Supervised next-token training on train-split (prompt, answer + <eos>) pairs; loss on the answer only."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    model.train()
    for _ in range(steps):
        examples = task.sample_train(rng, batch)
        prompts = [tokenizer(e.prompt)["input_ids"] for e in examples]
        answers = [tokenizer(e.answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for e in examples]
        seqs = collate(prompts, answers, tokenizer.pad_token_id)
        logp = token_logprobs(model, seqs)  # (N, L-1)
        loss = -(logp * seqs.response_mask).sum() / seqs.response_mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


def build_tiny(task_cfg, log=print) -> Path:
    """Return the directory of the warm-started tiny model for this task config, building it on first use."""
    from batchscale.tasks.arithmetic import ArithmeticTask

    if task_cfg.name != "arithmetic":
        task_fields = {"name": "arithmetic", "digits": 2, "operations": "+", "template": "{a}{op}{b}=", "split_seed": 0}
    else:
        task_fields = {k: getattr(task_cfg, k) for k in ("name", "digits", "operations", "template", "split_seed")}
    target = cache_root() / "models" / f"tiny-{content_hash(task_fields)}"
    if (target / "config.json").is_file():
        return target
    log(f"building the tiny model (warm start, {WARM_START['steps']} steps; once, cached in {target})")
    fields = {k: v for k, v in task_fields.items() if k != "name"}
    task = ArithmeticTask(**fields, eval_size=1)
    tokenizer = build_char_tokenizer()
    torch.manual_seed(WARM_START["seed"])
    model = LlamaForCausalLM(tiny_config(len(tokenizer)))
    losses = warm_start(model, tokenizer, task, WARM_START["steps"], WARM_START["batch"], WARM_START["lr"], WARM_START["seed"])
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".staging-"))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / "warm_start.json").write_text(json.dumps({**WARM_START, "task": task_fields, "final_loss": losses[-1]}))
        os.replace(staging, target)  # atomic: a crash never leaves a half-built model that looks complete
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / "config.json").is_file():  # another process may have won the race
            raise
    return target


def load_pretrained_dir(path: Path, dtype=torch.float32):
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype), AutoTokenizer.from_pretrained(path)
