"""verl launcher: `python3 -m verl.trainer.main_ppo` with Hydra overrides that reproduce one sweep point.

Option names follow verl's `ppo_trainer.yaml` (the layout `actor_rollout_ref.{actor,rollout,ref}`, `critic`,
`algorithm`, `trainer`, `data`). The single pass is `ppo_mini_batch_size = data.train_batch_size = P` with
`ppo_epochs = 1`: verl counts the mini-batch in prompts and multiplies it by `rollout.n` itself. Metrics go to verl's
file logger (`trainer.logger` with "file"; `VERL_FILE_LOGGER_PATH` sets its JSONL path), Hydra's resolved config to
`$RUN_DIR/.hydra/config.yaml`, where `batchscale import verl` finds it beside the log.

Checked against verl's Hydra config (verl/trainer/config/ppo_trainer.yaml and its actor/, critic/, optim/ parts, and
the flattened _generated_ppo_trainer.yaml) at commit b178a3c (0.8.0.dev, 2026-01-29): every option below exists there.
- The clip range: verl's policy loss reads `clip_ratio_low` / `clip_ratio_high` (both default 0.2) and ignores
  `clip_ratio` when they are set, so all three are passed.
- Adam betas and weight decay go to the actor's and the critic's optim (batchscale's critic shares optim's settings).
- A run name (and the run directory that holds it) may contain `=`, as in the label `grpo-P16-G8-a=0.25`; Hydra's
  override grammar does not allow `=` in an unquoted value, so those values are single-quoted for Hydra.

Not carried (verl has no option, or its default already matches batchscale's): Adam eps (1e-8), PPO advantage
whitening (verl always whitens GAE advantages).
"""

from __future__ import annotations

from batchscale.export.settings import PointSettings
from batchscale.export.shell import Shell, Variable, render_command, render_script

ESTIMATORS = {"grpo": "grpo", "ppo": "gae", "remax": "remax"}  # batchscale name -> algorithm.adv_estimator
LOSS_AGGREGATION = {"token-mean": "token-mean", "sequence-mean": "seq-mean-token-mean"}
LOG_PATH = "$RUN_DIR/verl_log.jsonl"
REQUIRED_INPUTS = ("MODEL_PATH", "TRAIN_FILES", "VAL_FILES")  # the script's required variables (render_verl_script)
TARGET = ("verl's Hydra CLI (verl.trainer.main_ppo) of versions with the `file` logger backend (FileLogger in "
          "verl/utils/tracking.py) and data.seed in ppo_trainer.yaml")


def build_verl_overrides(s: PointSettings, project: str) -> list:
    """Hydra overrides, in the order a reader checks them: algorithm, batch, optimizer, budget, logging, inputs."""
    o = [f"algorithm.adv_estimator={ESTIMATORS[s.algorithm]}",
         f"data.train_batch_size={s.prompts_per_step}",
         f"actor_rollout_ref.rollout.n={s.samples_per_prompt}",
         f"actor_rollout_ref.actor.ppo_mini_batch_size={s.prompts_per_update}",
         f"actor_rollout_ref.actor.ppo_epochs={s.ppo_epochs}",
         f"actor_rollout_ref.actor.optim.lr={s.lr!r}",
         f"actor_rollout_ref.actor.optim.weight_decay={s.weight_decay!r}",
         f"actor_rollout_ref.actor.optim.betas={hydra_list(s.betas)}",
         "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.0",
         f"actor_rollout_ref.actor.clip_ratio={s.clip_eps!r}",
         f"actor_rollout_ref.actor.clip_ratio_low={s.clip_eps!r}",  # verl reads these two, not clip_ratio
         f"actor_rollout_ref.actor.clip_ratio_high={s.clip_eps!r}",
         f"actor_rollout_ref.actor.loss_agg_mode={LOSS_AGGREGATION[s.loss_aggregation]}",
         f"actor_rollout_ref.actor.use_kl_loss={s.kl_coef > 0}",
         "algorithm.use_kl_in_reward=False"]
    if s.kl_coef > 0:  # batchscale's KL is a loss on the k3 estimator: verl's low_var_kl
        o += [f"actor_rollout_ref.actor.kl_loss_coef={s.kl_coef!r}", "actor_rollout_ref.actor.kl_loss_type=low_var_kl"]
    if s.max_grad_norm is not None:
        o.append(f"actor_rollout_ref.actor.grad_clip={s.max_grad_norm!r}")
    if s.algorithm == "grpo":
        o.append(f"algorithm.norm_adv_by_std_in_grpo={s.normalize_std}")
    if s.algorithm == "ppo":
        o += [f"algorithm.gamma={s.gamma!r}", f"algorithm.lam={s.gae_lambda!r}",
              f"critic.optim.lr={s.critic_lr!r}", "critic.optim.lr_warmup_steps_ratio=0.0",
              f"critic.optim.weight_decay={s.weight_decay!r}", f"critic.optim.betas={hydra_list(s.betas)}",
              Shell("critic.model.path=$MODEL_PATH"),
              Shell("critic.ppo_micro_batch_size_per_gpu=$MICRO_BATCH_PER_GPU")]
        if s.value_clip is not None:
            o.append(f"critic.cliprange_value={s.value_clip!r}")
        if s.critic_max_grad_norm is not None:
            o.append(f"critic.grad_clip={s.critic_max_grad_norm!r}")
    o += [f"actor_rollout_ref.rollout.temperature={s.temperature!r}",
          f"actor_rollout_ref.rollout.top_p={s.top_p!r}",
          f"data.seed={s.seed}",
          f"trainer.total_training_steps={s.num_steps}",
          Shell("trainer.total_epochs=$TOTAL_EPOCHS"),
          f"trainer.test_freq={s.eval_every_steps}",
          "trainer.val_before_train=True",
          "trainer.save_freq=-1",
          "trainer.logger=[console,file]",
          f"trainer.project_name={project}",
          f"trainer.experiment_name={hydra_quote(s.name)}",
          Shell(f"trainer.default_local_dir={hydra_quote('$RUN_DIR/checkpoints')}"),
          Shell(f"hydra.run.dir={hydra_quote('$RUN_DIR')}"),
          Shell("data.train_files=$TRAIN_FILES"),
          Shell("data.val_files=$VAL_FILES"),
          Shell("data.max_prompt_length=$MAX_PROMPT_LENGTH"),
          Shell("data.max_response_length=$MAX_RESPONSE_LENGTH"),
          Shell("actor_rollout_ref.model.path=$MODEL_PATH"),
          Shell("actor_rollout_ref.rollout.name=$ROLLOUT_NAME"),
          Shell("actor_rollout_ref.rollout.tensor_model_parallel_size=$ROLLOUT_TP"),
          Shell("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$MICRO_BATCH_PER_GPU"),
          Shell("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=$MICRO_BATCH_PER_GPU"),
          Shell("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=$MICRO_BATCH_PER_GPU"),
          Shell("trainer.n_gpus_per_node=$N_GPUS_PER_NODE"),
          Shell("trainer.nnodes=$NNODES")]
    return o


def hydra_list(values) -> str:
    return "[" + ",".join(repr(float(v)) for v in values) + "]"


def hydra_quote(text: str) -> str:
    """A Hydra override value that may hold `=` (a label such as grpo-P16-G8-a=0.25): single-quoted for Hydra (run
    names never hold a quote: launchers.SAFE_NAME)."""
    return f"'{text}'"


def check_verl(s: PointSettings) -> str | None:
    """Why verl cannot run this point as specified, or None."""
    if s.algorithm not in ESTIMATORS:
        return f"verl has no estimator for algorithm {s.algorithm!r} (batchscale maps {', '.join(ESTIMATORS)})"
    return None


def render_verl_script(s: PointSettings, sweep_file: str, project: str) -> str:
    user = [
        Variable("MODEL_PATH", "", "Hugging Face checkpoint: a local directory or a hub id", required=True),
        Variable("TRAIN_FILES", "", "verl parquet of training prompts (a path or a Hydra list)",
                 required=True),
        Variable("VAL_FILES", "", "verl parquet of evaluation prompts (the learning curve)",
                 required=True),
        Variable("MAX_PROMPT_LENGTH", "1024", "tokens; prompts longer than this fail verl's loader"),
        Variable("MAX_RESPONSE_LENGTH", str(s.max_new_tokens), "tokens per response; default: the sweep's "
                 "sampling.max_new_tokens"),
    ]
    execution = [
        Variable("N_GPUS_PER_NODE", "8", "GPUs per node"),
        Variable("NNODES", "1", "nodes"),
        Variable("ROLLOUT_NAME", "vllm", "rollout engine: vllm or sglang"),
        Variable("ROLLOUT_TP", "1", "tensor parallel size of the rollout engine"),
        Variable("MICRO_BATCH_PER_GPU", "4", "sequences per forward/backward on one GPU (gradient accumulation)"),
        Variable("TOTAL_EPOCHS", "1000", "cap on passes over TRAIN_FILES; it stops at total_training_steps"),
    ]
    setup = ["# verl's file logger (\"file\" in trainer.logger) writes {\"step\": N, \"data\": {...}} lines here. "
             "On a Ray cluster started",
             "# elsewhere, pass it to the job too: ray job submit --runtime-env-json "
             "'{\"env_vars\": {\"VERL_FILE_LOGGER_PATH\": ...}}'.",
             f'export VERL_FILE_LOGGER_PATH="{LOG_PATH}"']
    command = render_command(["python3", "-m", "verl.trainer.main_ppo"], build_verl_overrides(s, project))
    return render_script(s=s, engine="verl", target=TARGET, sweep_file=sweep_file, user_variables=user,
                         execution_variables=execution, setup=setup, command=command, log_path=LOG_PATH,
                         import_format="verl")
