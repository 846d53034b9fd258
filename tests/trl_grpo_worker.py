"""A few GRPOTrainer steps on CPU, with or without batchscale's GradientNoiseCallback: the TRL side of
tests/test_trl_grpo.py, run in the TRL venv (.cache/bench/trl-venv, as benchmarks/e2e_trl.py makes it).

argv[1] is a JSON spec: src (batchscale's src/), model_dir, out_dir, callback (bool), steps, and the batch shape; run
under torchrun (two CPU processes, gloo) it is one process of a DDP run, and rank 0 writes the files. Writes
out_dir/trainer_state.json (`trainer.save_state()`), out_dir/weights.pt (the final state dict) and prints one JSON line
with the versions. The reward is a fixed function of the completion text (so both runs see the same rewards) that
varies enough that no group's advantages are all zero.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    spec = json.loads(sys.argv[1])
    sys.path.insert(0, spec["src"])
    import torch

    torch.set_num_threads(1)
    import transformers
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    def reward(prompts, completions, **_):
        return [sum(map(ord, text)) % 97 / 97 for text in completions]  # varied: every group has advantages

    out = Path(spec["out_dir"])
    dataset = Dataset.from_list([{"prompt": f"{i} + {i % 7} ="} for i in range(64)])
    tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
    model = AutoModelForCausalLM.from_pretrained(spec["model_dir"], dtype=torch.float32)
    config = GRPOConfig(
        output_dir=str(out), use_cpu=True, bf16=False, fp16=False, seed=0, data_seed=0,
        per_device_train_batch_size=spec["micro_batch_size"], gradient_accumulation_steps=spec["accumulation"],
        num_generations=spec["samples_per_prompt"], max_completion_length=spec["max_new_tokens"],
        loss_type=spec["loss_type"], beta=0.0, learning_rate=1e-3, lr_scheduler_type="linear", warmup_steps=0,
        max_grad_norm=spec["max_grad_norm"], max_steps=spec["steps"], logging_steps=spec["logging_steps"],
        save_strategy="no", report_to="none", disable_tqdm=True, dataloader_num_workers=0, log_completions=False)
    callbacks = []
    if spec["callback"]:
        from batchscale.integrations.trl import GradientNoiseCallback

        callbacks.append(GradientNoiseCallback())  # as TRL users add callbacks: no trainer needed to make it
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=callbacks)
    trainer.train()
    trainer.save_state()
    if not trainer.args.should_save:
        return  # under torchrun: rank 0 writes the files and prints
    torch.save({k: v.detach().clone() for k, v in trainer.model.state_dict().items()}, out / "weights.pt")
    print(json.dumps({"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
                      "world_size": trainer.args.world_size,
                      "gradient_checkpointing": bool(config.gradient_checkpointing)}))


if __name__ == "__main__":
    main()
