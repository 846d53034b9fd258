"""TRL's GRPOTrainer, one optimizer step per request: the TRL side of e2e_trl.py, run in the TRL venv.

Reads one JSON spec (argv[1]), builds GRPOTrainer on the given model and prompts, and runs `trainer.train()`; a callback
holds each step until a line arrives on stdin, then answers with one JSON line on the original stdout: the step's
seconds (from the request to the end of the optimizer step: generation, rewards, forward/backward, clip, AdamW), the
seconds inside `_generate_and_score_completions` (generation plus rewards and advantages) and the completion lengths.
Everything else either library prints goes to stderr. The reward is batchscale's own reward function (imported
from src/, which needs only numpy), so both systems score alike.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time


def main() -> None:
    spec = json.loads(sys.argv[1])
    out = os.fdopen(os.dup(1), "w")  # answers go here; anything printed to fd 1 from now on lands on stderr
    os.dup2(2, 1)
    sys.path.insert(0, spec["src"])
    import torch

    torch.set_num_threads(spec["threads"])
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from batchscale.tasks.rewards import resolve_reward

    score = resolve_reward(spec["reward"])

    def reward(prompts, completions, answer, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [score(text, ans) for text, ans in zip(texts, answer)]

    def row(prompt: str, answer: str) -> dict:
        return {"prompt": [{"role": "user", "content": prompt}] if spec["chat_template"] else prompt, "answer": answer}

    dataset = Dataset.from_list([row(p, a) for p, a in spec["examples"]])
    tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(spec["model_dir"], dtype=torch.float32)
    samples_per_step = spec["prompts_per_step"] * spec["samples_per_prompt"]
    bf16 = spec["dtype"] == "bfloat16"
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-bench-"), use_cpu=True, bf16=bf16, fp16=False,
        gradient_checkpointing=False,  # TRL's default is True; batchscale keeps activations, so compare like for like
        per_device_train_batch_size=spec["micro_batch_size"],
        gradient_accumulation_steps=samples_per_step // spec["micro_batch_size"],  # one generation per optimizer step
        num_generations=spec["samples_per_prompt"], max_completion_length=spec["max_new_tokens"],
        temperature=1.0, top_p=1.0, top_k=0, beta=0.0, num_iterations=1, epsilon=0.2, loss_type="dapo",
        scale_rewards="group", learning_rate=spec["lr"], lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, max_grad_norm=1.0,
        max_steps=spec["steps"], logging_steps=10**6, save_strategy="no", report_to="none", disable_tqdm=True,
        seed=spec["seed"], dataloader_num_workers=0, log_completions=False)

    class Lockstep(TrainerCallback):
        """Each optimizer step waits for a request; its end answers it."""

        def __init__(self):
            self.start, self.generate_s, self.lengths = 0.0, 0.0, []

        def on_step_begin(self, args, state, control, **kwargs):
            if not sys.stdin.readline():
                raise SystemExit(0)  # the driver closed the pipe
            self.generate_s, self.lengths = 0.0, []
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            seconds = time.perf_counter() - self.start
            out.write(json.dumps({"seconds": seconds, "generate_s": self.generate_s, "lengths": self.lengths}) + "\n")
            out.flush()

    lockstep = Lockstep()
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[lockstep])
    generate_and_score = trainer._generate_and_score_completions

    def timed_generate_and_score(*args, **kwargs):
        start = time.perf_counter()
        batch = generate_and_score(*args, **kwargs)
        lockstep.generate_s += time.perf_counter() - start
        lockstep.lengths += batch["completion_mask"].sum(dim=1).tolist()
        return batch

    trainer._generate_and_score_completions = timed_generate_and_score
    checkpointing = getattr(trainer.model, "is_activation_checkpointing", None)
    if checkpointing is None:
        checkpointing = trainer.model.is_gradient_checkpointing
    out.write(json.dumps({"ready": True, "trl_version": trl.__version__, "torch_version": torch.__version__,
                          "trl_checkpointing": bool(checkpointing)}) + "\n")
    out.flush()
    trainer.train()


if __name__ == "__main__":
    main()
