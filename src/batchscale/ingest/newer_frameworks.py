"""The key maps of the frameworks users moved to: SkyRL, prime-rl, NeMo-RL and xtuner, each from its own code at a
named version (docs/IMPORT.md, "Versions checked"). common.py merges them into its one table, so every reader and
the record builder treat them like verl, OpenRLHF and TRL; they arrive as a flat JSONL (xtuner's
`exp_tracking/tracker.jsonl`), TensorBoard events or a W&B history export (newer_formats.py).

- SkyRL (NovaSky-AI/SkyRL `a956457`, skyrl_train v0.4.0+516; skyrl/train/trainer.py `fit`, evaluate.py,
  generators/utils.py): `Tracking.log(all_metrics | timing/<Timer name>, step=global_step)`, the step also as
  `trainer/global_step`; rewards `reward/avg_raw_reward`, lengths `generate/avg_num_tokens`, the policy's
  `policy/grad_norm`, `policy/policy_lr`; evals `eval/<data source>/avg_score`, `eval/all/pass_at_<n>`.
- prime-rl (PrimeIntellect-ai/prime-rl v0.5.0, `63331ad`; orchestrator/orchestrator.py, trainer/rl/train.py): the
  orchestrator logs per step `progress/samples` (rollouts, P x G) and `progress/problems` (prompts, P), cumulative
  `progress/total_*`, `reward/all/mean`, `decode_len/all/mean`, `time/step`, `time/generate_completions`, evals
  `val/reward/all/mean`; the trainer `optim/grad_norm`, `optim/lr`, `perf/mfu`, `time/broadcast_weights`.
  `effective_batch_size/all` is not a batch size: it is the fraction of prompts neither all-solved nor all-failed
  (1 - solve_none - solve_all), the prompts that carry a learning signal; it is kept as a known key.
- NeMo-RL (NVIDIA-NeMo/RL v0.4.0, `c751f81`; nemo_rl/algorithms/grpo.py `grpo_train`): `log_metrics(metrics,
  step, prefix="train")`, timers under `timing/train/`, `log_metrics(val_metrics, prefix="validation")`,
  `performance/` throughput; P and G are the config's `grpo.num_prompts_per_step` x `grpo.num_generations_per_prompt`.
- xtuner (InternLM/xtuner `b934f46`, v1.0.1+289; xtuner/v1/train/rl_trainer.py `_log_step`): `time/<timer>`,
  `response/<data info>` (`response/batch_size` is the step's samples, P x G), `throughput/effective_sgs` (samples
  per second per training GPU over the whole step: x the GPUs it is exactly batchscale's q of the step, samples per
  step / time/step), `eval/<metric>`.
"""

from __future__ import annotations

# framework -> batchscale step key -> framework keys, first present wins (common.STEP_KEY_MAP's layout)
STEP_KEYS_BY_FRAMEWORK: dict[str, dict[str, tuple[str, ...]]] = {
    "skyrl": {
        "reward/mean": ("reward/avg_raw_reward",),
        "response/length_mean": ("generate/avg_num_tokens",),
        "time/generate": ("timing/generate",),
        "time/train": ("timing/policy_train",),
        "time/train_critic": ("timing/critic_train",),
        "time/step": ("timing/step",),
        "time/weight_sync": ("timing/sync_weights",),
        "grad_norm/actor": ("policy/grad_norm",),
        "lr/actor": ("policy/policy_lr",),
        "grad_norm/critic": ("critic/grad_norm",),
    },
    "prime-rl": {
        "reward/mean": ("reward/all/mean",),
        "response/length_mean": ("decode_len/all/mean",),
        "time/generate": ("time/generate_completions",),
        "time/step": ("time/step",),
        "time/weight_sync": ("time/broadcast_weights",),
        "grad_norm/actor": ("optim/grad_norm",),
        "lr/actor": ("optim/lr",),
        "mfu/actor": ("perf/mfu",),
    },
    "nemo-rl": {
        "reward/mean": ("train/reward",),
        "response/length_mean": ("train/mean_gen_tokens_per_sample",),
        "time/generate": ("timing/train/generation",),
        "time/train": ("timing/train/policy_training",),
        "time/step": ("timing/train/total_step_time",),
        "time/weight_sync": ("timing/train/weight_sync",),
        "grad_norm/actor": ("train/grad_norm",),
        "lr/actor": ("train/lr",),
        "throughput/samples_per_s": ("performance/samples_per_sec",),
        "throughput/samples_per_s_per_gpu": ("performance/samples_per_sec_per_gpu",),
    },
    "xtuner": {
        "reward/mean": ("response/rewards/mean",),
        "response/length_mean": ("response/response_len/mean",),
        "time/generate": ("time/produce_batch", "time/get_batch"),
        "time/train": ("time/training",),
        "time/step": ("time/step",),
        "time/weight_sync": ("time/sync_weight",),
        "grad_norm/actor": ("train_metrics/worker_0/step_avg_grad_norm",),
        "throughput/samples_per_s_per_gpu": ("throughput/effective_sgs",),
    },
}

STEP_KEYS = {"skyrl": ("trainer/global_step",), "prime-rl": ("step",), "nemo-rl": (), "xtuner": ("step",)}
EVAL_PREFIXES = {"skyrl": {"eval/": ""}, "prime-rl": {"val/": ""}, "nemo-rl": {"validation/": ""},
                 "xtuner": {"eval/": ""}}
ACCURACY_RULES = {"skyrl": (r"^all/pass_at_1$",), "prime-rl": (), "nemo-rl": (r"^accuracy$",),
                  "xtuner": (r"(^|/)acc(uracy)?$",)}
SCORE_RULES = {"skyrl": (r"^all/avg_score$",), "prime-rl": (r"^reward/all/mean$",), "nemo-rl": (),
               "xtuner": (r"(^|/)(reward|score)s?(/mean)?$",)}
BOOKKEEPING_KEYS = {
    "skyrl": frozenset({"trainer/global_step", "trainer/epoch"}),
    "prime-rl": frozenset({"step", "progress/ckpt_step", "progress/total_samples", "progress/total_tokens",
                           "progress/total_problems", "progress/samples", "progress/problems",
                           "effective_batch_size/all"}),
    "nemo-rl": frozenset({"train/total_num_tokens", "train/mean_prompt_length"}),
    "xtuner": frozenset({"step", "response/batch_size"}),
}
KNOWN_KEY_PATTERNS = {"skyrl": (r"^timing/",), "prime-rl": (r"^effective_batch_size/",), "nemo-rl": (r"^timing/",),
                      "xtuner": (r"^time/",)}
GENERATION_LIKE = {"skyrl": r"^timing/.*generat", "nemo-rl": r"^timing/train/.*generation"}
# per-step counts the log itself gives: samples consumed (P x G) and prompts (P)
SAMPLE_COUNT_KEYS = {"prime-rl": "progress/samples", "xtuner": "response/batch_size"}
PROMPT_COUNT_KEYS = {"prime-rl": "progress/problems"}
# run descriptor field -> framework -> config keys (frameworkconfig.CONFIG_KEYS's layout, per framework)
CONFIG_KEYS = {
    "skyrl": {"prompts_per_step": ("trainer.train_batch_size",), "samples_per_prompt": ("generator.n_samples_per_prompt",),
              "lr": ("trainer.policy.optimizer_config.lr",), "algorithm": ("trainer.algorithm.advantage_estimator",),
              "model": ("trainer.policy.model.path",), "task": ("data.train_data",), "seed": ("trainer.seed",),
              "mini_batch_prompts": ("trainer.policy_mini_batch_size",), "epochs": ("trainer.update_epochs_per_batch",)},
    "prime-rl": {"samples_per_prompt": ("rollouts_per_example",), "seed": ("seed",)},
    "nemo-rl": {"prompts_per_step": ("grpo.num_prompts_per_step",),
                "samples_per_prompt": ("grpo.num_generations_per_prompt",), "lr": ("policy.optimizer.kwargs.lr",),
                "model": ("policy.model_name",), "seed": ("grpo.seed",)},
    "xtuner": {},
}
BATCH_HINTS = {
    "skyrl": "trainer.train_batch_size and generator.n_samples_per_prompt",
    "prime-rl": "batch_size / rollouts_per_example and rollouts_per_example (the log's progress/problems and "
                "progress/samples give both)",
    "nemo-rl": "grpo.num_prompts_per_step and grpo.num_generations_per_prompt",
    "xtuner": "the prompts per step and prompt_repeat_k (the log's response/batch_size is P x G)",
}
