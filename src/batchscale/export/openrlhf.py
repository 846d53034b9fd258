"""OpenRLHF launcher: `python3 -m openrlhf.cli.train_ppo_ray` with the flags that reproduce one sweep point.

Two spellings of the same options, checked against the argument parser of OpenRLHF's `openrlhf/cli/train_ppo_ray.py`
(tests/engine_options holds the flags of each release checked, and the tests check every exported flag against them):
- `openrlhf`: the hierarchical CLI (`--rollout.batch_size`, `--actor.adam.lr`, `--algo.advantage.estimator`, ...;
  parsed by `openrlhf/utils/config.py` `hierarchize`), OpenRLHF v0.10.2 to v0.11.0;
- `openrlhf-legacy`: the flat CLI (`--rollout_batch_size`, `--actor_learning_rate`, `--advantage_estimator`,
  `--use_tensorboard`, ...) of v0.9.0 to v0.10.1. Its length flags were renamed in v0.9.8: `--generate_max_len` and
  `--prompt_max_len` (v0.9.0-v0.9.7) became `--max_new_tokens` and `--max_len` (prompt + response, v0.9.8-v0.10.1), so
  the script reads the installed version and spells them for it (LEGACY_LENGTH_FLAGS); v0.8 and older lack
  `--lr_scheduler`, and v0.10.2 and newer take only the hierarchical flags: the script stops on those versions.
The critic has its own scheduler, warmup and Adam settings in the hierarchical CLI (defaults: cosine_with_min_lr,
3% warmup, betas (0.9, 0.95)), so a PPO point passes the critic's too; the flat CLI shares them with the actor.
`--data.apply_chat_template` (flat `--apply_chat_template`) is passed when the sweep's model.chat_template is set.
OpenRLHF makes one pass over the prompt set (`--num_episodes 1`; it does not loop over epochs as verl does), so the
script first checks that a local prompt file holds at least steps x P prompts.
The single pass is `train batch = rollout batch x n_samples_per_prompt = P*G` with one epoch; the step budget is
`max_samples = steps x P` prompts over one episode (OpenRLHF has no step limit of its own). The learning rate is held
constant (no warmup), as in batchscale. TensorBoard events go to `<tensorboard_dir>/<run name>`, the run name being the
point's name, which `batchscale import tensorboard` reads (it recognises OpenRLHF's `train/` and `eval/` tags).

Not carried: ReMax (OpenRLHF has no greedy-baseline estimator: such points are refused), loss aggregation (OpenRLHF's
own), Adam eps (left at OpenRLHF's default, 1e-8 in the hierarchical CLI, as in batchscale).
"""

from __future__ import annotations

from batchscale.export.settings import PointSettings
from batchscale.export.shell import Shell, Variable, render_command, render_script

ESTIMATORS = {"grpo": "group_norm", "ppo": "gae"}  # batchscale name -> advantage estimator
TARGETS = {
    "openrlhf": "OpenRLHF's hierarchical CLI (openrlhf.cli.train_ppo_ray with --section.option flags), "
                "v0.10.2 to v0.11.0",
    "openrlhf-legacy": "OpenRLHF's flat CLI (openrlhf.cli.train_ppo_ray with --rollout_batch_size ...), v0.9.0 to "
                       "v0.10.1 (length flags spelled for the installed version)",
}
# logical option -> (hierarchical flag, flat flag)
FLAGS = {
    "model": ("--actor.model_name_or_path", "--pretrain"),
    "prompts": ("--data.prompt_dataset", "--prompt_data"),
    "eval_prompts": ("--eval.dataset", "--eval_dataset"),
    "input_key": ("--data.input_key", "--input_key"),
    "label_key": ("--data.label_key", "--label_key"),
    "reward": ("--reward.remote_url", "--remote_rm_url"),
    "rollout_batch": ("--rollout.batch_size", "--rollout_batch_size"),
    "n_samples": ("--rollout.n_samples_per_prompt", "--n_samples_per_prompt"),
    "train_batch": ("--train.batch_size", "--train_batch_size"),
    "epochs": ("--train.max_epochs", "--max_epochs"),
    "episodes": ("--train.num_episodes", "--num_episodes"),
    "max_samples": ("--data.max_samples", "--max_samples"),
    "seed": ("--train.seed", "--seed"),
    "lr": ("--actor.adam.lr", "--actor_learning_rate"),
    "chat_template": ("--data.apply_chat_template", "--apply_chat_template"),
    "betas": ("--actor.adam.betas", "--adam_betas"),
    "weight_decay": ("--actor.adam.weight_decay", "--l2"),
    "scheduler": ("--actor.lr_scheduler", "--lr_scheduler"),
    "warmup": ("--actor.lr_warmup_ratio", "--lr_warmup_ratio"),
    "max_norm": ("--actor.max_norm", "--max_norm"),
    "eps_clip": ("--actor.eps_clip", "--eps_clip"),
    "estimator": ("--algo.advantage.estimator", "--advantage_estimator"),
    "no_std_norm": ("--algo.advantage.no_std_norm", "--no_advantage_std_norm"),
    "gamma": ("--algo.advantage.gamma", "--gamma"),
    "lambd": ("--algo.advantage.lambd", "--lambd"),
    "kl_coef": ("--algo.kl.init_coef", "--init_kl_coef"),
    "kl_loss": ("--algo.kl.use_loss", "--use_kl_loss"),
    "kl_estimator": ("--algo.kl.estimator", "--kl_estimator"),
    "critic_model": ("--critic.model_name_or_path", "--critic_pretrain"),
    "critic_lr": ("--critic.adam.lr", "--critic_learning_rate"),
    # the flat CLI shares these with the actor's (--lr_scheduler, --lr_warmup_ratio, --adam_betas, --l2, --max_norm)
    "critic_scheduler": ("--critic.lr_scheduler", None),
    "critic_warmup": ("--critic.lr_warmup_ratio", None),
    "critic_betas": ("--critic.adam.betas", None),
    "critic_weight_decay": ("--critic.adam.weight_decay", None),
    "critic_max_norm": ("--critic.max_norm", None),
    "value_clip": ("--critic.value_clip", "--value_clip"),
    "temperature": ("--rollout.temperature", "--temperature"),
    "top_p": ("--rollout.top_p", "--top_p"),
    "max_new_tokens": ("--rollout.max_new_tokens", None),  # flat: LEGACY_LENGTH_FLAGS, chosen by version
    "eval_steps": ("--eval.steps", "--eval_steps"),
    "tensorboard": ("--logger.tensorboard_dir", "--use_tensorboard"),
    "run_name": ("--logger.wandb.run_name", "--wandb_run_name"),
    "logging_steps": ("--logger.logging_steps", "--logging_steps"),
    "output_dir": ("--ckpt.output_dir", "--save_path"),
    "rollout_micro": ("--rollout.micro_batch_size", "--micro_rollout_batch_size"),
    "train_micro": ("--train.micro_batch_size", "--micro_train_batch_size"),
    "actor_nodes": ("--actor.num_nodes", "--actor_num_nodes"),
    "actor_gpus": ("--actor.num_gpus_per_node", "--actor_num_gpus_per_node"),
    "ref_nodes": ("--ref.num_nodes", "--ref_num_nodes"),
    "ref_gpus": ("--ref.num_gpus_per_node", "--ref_num_gpus_per_node"),
    "critic_nodes": ("--critic.num_nodes", "--critic_num_nodes"),
    "critic_gpus": ("--critic.num_gpus_per_node", "--critic_num_gpus_per_node"),
    "vllm_engines": ("--vllm.num_engines", "--vllm_num_engines"),
    "vllm_tp": ("--vllm.tensor_parallel_size", "--vllm_tensor_parallel_size"),
}
LOG_DIR = "$RUN_DIR/tensorboard"
REQUIRED_INPUTS = ("MODEL_PATH", "TRAIN_FILES", "VAL_FILES", "REWARD_FUNC")  # render_openrlhf_script's required ones
# (first version, last version, length flags) of the flat CLI; the script picks the row of the installed OpenRLHF
LEGACY_LENGTH_FLAGS = (
    ("0.9.0", "0.9.7", '--generate_max_len "$MAX_RESPONSE_LENGTH" --prompt_max_len "$MAX_PROMPT_LENGTH"'),
    ("0.9.8", "0.10.1",
     '--max_new_tokens "$MAX_RESPONSE_LENGTH" --max_len "$((MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH))"'),
)
HIERARCHICAL_FROM = "0.10.2"


def build_openrlhf_options(s: PointSettings) -> list[tuple]:
    """(logical option, value, ...) tuples; a 1-tuple is a switch. Spelled per CLI by `spell_options`."""
    o = [("rollout_batch", s.prompts_per_step), ("n_samples", s.samples_per_prompt),
         ("train_batch", s.samples_per_update), ("epochs", s.ppo_epochs),
         ("episodes", 1), ("max_samples", s.num_steps * s.prompts_per_step),
         ("estimator", ESTIMATORS[s.algorithm]),
         ("lr", s.lr), ("betas", *s.betas), ("weight_decay", s.weight_decay),
         ("scheduler", "constant"), ("warmup", 0.0), ("eps_clip", s.clip_eps),
         ("kl_coef", s.kl_coef)]
    if s.kl_coef > 0:  # batchscale's KL is a loss on the k3 estimator
        o += [("kl_loss",), ("kl_estimator", "k3")]
    if s.max_grad_norm is not None:
        o.append(("max_norm", s.max_grad_norm))
    if s.algorithm == "grpo" and not s.normalize_std:
        o.append(("no_std_norm",))
    if s.algorithm == "ppo":
        o += [("gamma", s.gamma), ("lambd", s.gae_lambda), ("critic_model", Shell("$MODEL_PATH")),
              ("critic_lr", s.critic_lr), ("critic_nodes", Shell("$NNODES")),
              ("critic_gpus", Shell("$N_GPUS_PER_NODE"))]
        if s.value_clip is not None:
            o.append(("value_clip", s.value_clip))
        o += [("critic_scheduler", "constant"), ("critic_warmup", 0.0), ("critic_betas", *s.betas),
              ("critic_weight_decay", s.weight_decay)]
        if s.critic_max_grad_norm is not None:
            o.append(("critic_max_norm", s.critic_max_grad_norm))
    if s.chat_template:
        o.append(("chat_template",))
    if s.kl_coef > 0:
        o += [("ref_nodes", Shell("$NNODES")), ("ref_gpus", Shell("$N_GPUS_PER_NODE"))]
    o += [("temperature", s.temperature), ("top_p", s.top_p), ("seed", s.seed),
          ("eval_steps", s.eval_every_steps), ("tensorboard", Shell(LOG_DIR)), ("run_name", s.name),
          ("logging_steps", 1), ("output_dir", Shell("$RUN_DIR/model")),
          ("model", Shell("$MODEL_PATH")), ("prompts", Shell("$TRAIN_FILES")), ("eval_prompts", Shell("$VAL_FILES")),
          ("input_key", Shell("$INPUT_KEY")), ("label_key", Shell("$LABEL_KEY")), ("reward", Shell("$REWARD_FUNC")),
          ("max_new_tokens", Shell("$MAX_RESPONSE_LENGTH")),
          ("rollout_micro", Shell("$MICRO_BATCH_PER_GPU")), ("train_micro", Shell("$MICRO_BATCH_PER_GPU")),
          ("actor_nodes", Shell("$NNODES")), ("actor_gpus", Shell("$N_GPUS_PER_NODE")),
          ("vllm_engines", Shell("$VLLM_NUM_ENGINES")), ("vllm_tp", Shell("$ROLLOUT_TP"))]
    return o


def spell_options(options: list[tuple], fmt: str) -> list[tuple]:
    """Logical options -> (flag, value, ...) words of the chosen CLI."""
    column = 0 if fmt == "openrlhf" else 1
    words = [(FLAGS[key][column], *values) for key, *values in options if FLAGS[key][column] is not None]
    if fmt == "openrlhf":  # the hierarchical CLI caps the total length instead of the prompt length
        words.append(("--data.max_len", Shell("$((MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH))")))
    else:
        words.append(Shell("${LENGTH_OPTIONS[@]}"))  # set by the version check (render_legacy_version_check)
    return words


def render_legacy_version_check() -> list[str]:
    """Shell lines that read the installed OpenRLHF version and set LENGTH_OPTIONS to its length flags."""
    lines = ['OPENRLHF_VERSION="${OPENRLHF_VERSION:-$(python3 -c \'import importlib.metadata as m; '
             'print(m.version("openrlhf"))\')}"',
             'version_le() { [[ "$(printf \'%s\\n\' "$1" "$2" | sort -V | head -n1)" == "$1" ]]; }']
    first = "if"
    for low, high, flags in LEGACY_LENGTH_FLAGS:
        lines += [f'{first} version_le {low} "$OPENRLHF_VERSION" && version_le "$OPENRLHF_VERSION" {high}; then',
                  f"  LENGTH_OPTIONS=({flags})  # OpenRLHF {low} to {high}"]
        first = "elif"
    lines += ["else",
              f'  echo "error: OpenRLHF $OPENRLHF_VERSION does not take these flat flags (they fit '
              f'{LEGACY_LENGTH_FLAGS[0][0]} to {LEGACY_LENGTH_FLAGS[-1][1]}); from {HIERARCHICAL_FROM} on, export '
              f'with FORMAT openrlhf" >&2; exit 2',
              "fi"]
    return lines


def render_prompt_count_check(s: PointSettings) -> list[str]:
    """Shell lines that stop the script when a local prompt file holds fewer than steps x P prompts."""
    needed = s.num_steps * s.prompts_per_step
    return [
        f"# OpenRLHF makes one pass over the prompts (--num_episodes 1): {s.num_steps} steps x P = {s.prompts_per_step}"
        f" need {needed} of them.",
        f'python3 - "$TRAIN_FILES" {needed} <<\'PY\'',
        "import json, os, sys",
        "path, needed = sys.argv[1], int(sys.argv[2])",
        "if not os.path.isfile(path):",
        '    sys.exit(print(f"note: {path} is not a local file; make sure it holds at least {needed} prompts"))',
        "if path.endswith('.jsonl'):",
        "    count = sum(1 for line in open(path) if line.strip())",
        "elif path.endswith('.json'):",
        "    count = len(json.load(open(path)))",
        "elif path.endswith('.parquet'):",
        "    import pyarrow.parquet",
        "    count = pyarrow.parquet.ParquetFile(path).metadata.num_rows",
        "else:",
        '    sys.exit(print(f"note: cannot count the prompts of {path}; it must hold at least {needed}"))',
        "if count < needed:",
        '    sys.exit(f"error: {path} holds {count} prompts, fewer than the {needed} (steps x P) this point consumes")',
        "PY",
    ]


def check_openrlhf(s: PointSettings) -> str | None:
    """Why OpenRLHF cannot run this point as specified, or None."""
    if s.algorithm not in ESTIMATORS:
        return (f"OpenRLHF has no estimator for {s.algorithm!r} (its choices: gae, reinforce, rloo, "
                "reinforce_baseline, group_norm, dr_grpo; ReMax's greedy baseline is not among them)")
    if s.algorithm == "grpo" and s.samples_per_prompt < 2:
        return "OpenRLHF's group_norm needs n_samples_per_prompt > 1"
    return None


def render_openrlhf_script(s: PointSettings, sweep_file: str, fmt: str) -> str:
    user = [
        Variable("MODEL_PATH", "", "Hugging Face checkpoint: a local directory or a hub id", required=True),
        Variable("TRAIN_FILES", "", "prompt dataset: a Hugging Face dataset name or a JSONL path", required=True),
        Variable("VAL_FILES", "", "evaluation prompts: eval/ metrics, the learning curve", required=True),
        Variable("REWARD_FUNC", "", "verifiable reward: a Python file defining reward_func, or a reward server URL",
                 required=True),
        Variable("INPUT_KEY", "input", "dataset field holding the prompt"),
        Variable("LABEL_KEY", "label", "dataset field holding the reference answer"),
        Variable("MAX_PROMPT_LENGTH", "1024", "tokens"),
        Variable("MAX_RESPONSE_LENGTH", str(s.max_new_tokens), "tokens per response; default: the sweep's "
                 "sampling.max_new_tokens"),
    ]
    execution = [
        Variable("N_GPUS_PER_NODE", "8", "GPUs per node for each model group"),
        Variable("NNODES", "1", "nodes for each model group"),
        Variable("VLLM_NUM_ENGINES", "1", "vLLM engines for generation"),
        Variable("ROLLOUT_TP", "1", "tensor parallel size of each vLLM engine"),
        Variable("MICRO_BATCH_PER_GPU", "4", "sequences per forward/backward on one GPU (gradient accumulation)"),
    ]
    setup = [f"# OpenRLHF writes TensorBoard events to {LOG_DIR}/<run name> (when W&B is not in use).",
             *render_prompt_count_check(s)]
    if fmt == "openrlhf-legacy":
        setup += render_legacy_version_check()
    words = spell_options(build_openrlhf_options(s), fmt)
    command = render_command(["python3", "-m", "openrlhf.cli.train_ppo_ray"], words)
    return render_script(s=s, engine=fmt, target=TARGETS[fmt], sweep_file=sweep_file, user_variables=user,
                         execution_variables=execution, setup=setup, command=command,
                         log_path=f"{LOG_DIR}/{s.name}", import_format="tensorboard")
