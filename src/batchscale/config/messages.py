"""The config's validation errors as one line each: pydantic's first error turned into a `UserError` that names the
key, the rule and the fix. An unknown key names the valid key it most likely meant (`closest_key`): by meaning first,
the name verl, TRL, OpenRLHF or Hydra configs give it (`SYNONYMS`: optim.learning_rate -> optim.lr, rollout.n ->
batch.samples_per_prompt, with what differs when the units do), else by spelling: the same name in another section
(task.temperature -> sampling.temperature), else the closest name in its section or, failing that, the closest dotted
key anywhere (difflib's ratio, at its default cutoff of 0.6), else none but the list of valid keys.
"""

from __future__ import annotations

import difflib

from pydantic import BaseModel

from batchscale.errors import UserError


def _section_model(annotation) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _field_path(loc: tuple, root: type[BaseModel]) -> tuple:
    """The part of a pydantic error location that names config keys (drops union-member tags like 'literal[...]')."""
    model: type[BaseModel] | None = root
    path = []
    for part in loc:
        if model is None or part not in model.model_fields:
            if model is not None and len(path) == len(loc) - 1:
                path.append(part)  # an unknown key: keep it so the message names it
            break
        path.append(part)
        model = _section_model(model.model_fields[part].annotation)
    return tuple(path)


def _valid_keys(loc: tuple, root: type[BaseModel]) -> list[str]:
    model: type[BaseModel] = root
    for part in loc[:-1]:
        model = _section_model(model.model_fields[part].annotation)
        if model is None:
            return []
    return list(model.model_fields)


P_NOTE = "P, prompts per step; a step trains on P x G samples"
# Other frameworks' names for our keys: a dotted key, or a last name (distinctive enough to match in any section) ->
# (our key, what differs, "" when nothing does). verl's (Hydra) names, TRL's GRPOConfig's and OpenRLHF's flags.
SYNONYMS: dict[str, tuple[str, str]] = {
    "learning_rate": ("optim.lr", "at the reference batch batch.reference_samples_per_step, scaled by optim.lr_rule"),
    "actor_learning_rate": ("optim.lr", ""), "actor_lr": ("optim.lr", ""),
    "critic_learning_rate": ("critic.lr", ""), "critic_lr": ("critic.lr", ""),
    "actor.optim.lr": ("optim.lr", ""), "critic.optim.lr": ("critic.lr", ""),  # verl's actor_rollout_ref.actor.optim.lr
    "batch_size": ("batch.prompts_per_step", P_NOTE),
    "train_batch_size": ("batch.prompts_per_step", P_NOTE),
    "rollout_batch_size": ("batch.prompts_per_step", P_NOTE),
    "num_prompts": ("batch.prompts_per_step", P_NOTE),
    "num_generations": ("batch.samples_per_prompt", "G, responses per prompt"),
    "n_samples_per_prompt": ("batch.samples_per_prompt", "G, responses per prompt"),
    "rollout.n": ("batch.samples_per_prompt", "G, responses per prompt"),
    "group_size": ("batch.samples_per_prompt", "G, responses per prompt"),
    "per_device_train_batch_size": ("batch.micro_batch_size", "sequences per forward/backward"),
    "micro_train_batch_size": ("batch.micro_batch_size", "sequences per forward/backward"),
    "ppo_micro_batch_size": ("batch.micro_batch_size", "sequences per forward/backward"),
    "ppo_micro_batch_size_per_gpu": ("batch.micro_batch_size", "sequences per forward/backward"),
    "gradient_accumulation_steps": ("batch.micro_batch_size", "the accumulation steps follow from P x G / it"),
    "ppo_mini_batch_size": ("algorithm.ppo_mini_batches", "a count of mini-batches per step, not their size"),
    "max_response_length": ("sampling.max_new_tokens", ""), "max_completion_length": ("sampling.max_new_tokens", ""),
    "generate_max_len": ("sampling.max_new_tokens", ""), "max_tokens": ("sampling.max_new_tokens", ""),
    "response_length": ("sampling.max_new_tokens", ""),
    "beta": ("algorithm.kl_coef", ""), "init_kl_coef": ("algorithm.kl_coef", ""),
    "kl_loss_coef": ("algorithm.kl_coef", ""),
    "clip_ratio": ("algorithm.clip_eps", ""), "epsilon": ("algorithm.clip_eps", ""),
    "eps_clip": ("algorithm.clip_eps", ""), "cliprange": ("algorithm.clip_eps", ""),
    "grad_clip": ("optim.max_grad_norm", ""), "max_norm": ("optim.max_grad_norm", ""),
    "lam": ("algorithm.gae_lambda", ""), "lambd": ("algorithm.gae_lambda", ""),
    "adv_estimator": ("algorithm.name", "grpo, ppo or remax"),
    "advantage_estimator": ("algorithm.name", "grpo, ppo or remax"),
    "loss_agg_mode": ("algorithm.loss_aggregation", ""),
    "norm_adv_by_std_in_grpo": ("algorithm.normalize_std", ""),
    "scale_rewards": ("algorithm.normalize_std", ""),
    "total_training_steps": ("run.budget_samples", "a budget in samples: steps x P x G"),
    "max_steps": ("run.budget_samples", "a budget in samples: steps x P x G"),
    "total_epochs": ("run.budget_samples", "a budget in samples"),
    "num_train_epochs": ("run.budget_samples", "a budget in samples"),
    "num_episodes": ("run.budget_samples", "a budget in samples"),
    "test_freq": ("run.eval_every_samples", "in samples, not steps"),
    "eval_steps": ("run.eval_every_samples", "in samples, not steps"),
    "save_freq": ("run.checkpoint_every_samples", "in samples, not steps"),
    "save_steps": ("run.checkpoint_every_samples", "in samples, not steps"),
    "output_dir": ("run.out_dir", ""), "default_local_dir": ("run.out_dir", ""),
    "logger": ("run.trackers", "a list: [tensorboard, wandb, mlflow, trackio]"),
    "report_to": ("run.trackers", "a list: [tensorboard, wandb, mlflow, trackio]"),
    "model_name_or_path": ("model.name", ""), "pretrain": ("model.name", ""), "model.path": ("model.name", ""),
    "torch_dtype": ("model.dtype", ""),
}


def synonym(loc: tuple, value=None) -> tuple[str, str] | None:
    """(our key, note) for an unknown key another framework's config uses: the longest tail of its dotted name in
    `SYNONYMS` (actor_rollout_ref.rollout.n -> rollout.n). An unknown section's `value` (a table) is searched too, so
    `data.train_batch_size=64`, which pydantic reports as the unknown key `data`, is still found."""
    paths = [tuple(map(str, loc))] + [(*map(str, loc), *inner) for inner in _leaf_paths(value)]
    for path in paths:
        for start in range(len(path)):
            found = SYNONYMS.get(".".join(path[start:]))
            if found is not None:
                return found
    return None


def _leaf_paths(value, depth: int = 4) -> list[tuple[str, ...]]:
    if not isinstance(value, dict) or depth == 0:
        return []
    return [(str(k), *inner) for k, v in value.items() for inner in (_leaf_paths(v, depth - 1) or [()])]


def closest_key(loc: tuple, root: type[BaseModel], value=None) -> str | None:
    """The valid key an unknown one (at `loc`, holding `value`) most likely meant: by meaning (`SYNONYMS`), else a
    name in its own section, or a dotted key."""
    same = synonym(loc, value)
    if same is not None:
        return same[0]
    name, sections = str(loc[-1]), {key: _section_model(f.annotation) for key, f in root.model_fields.items()}
    if len(loc) == 2:
        elsewhere = [f"{key}.{name}" for key, model in sections.items() if model and name in model.model_fields]
        if elsewhere:
            return elsewhere[0]
    close = difflib.get_close_matches(name, _valid_keys(loc, root), n=1)
    if close:
        return close[0]
    dotted = [f"{key}.{leaf}" for key, model in sections.items() if model for leaf in model.model_fields]
    close = difflib.get_close_matches(".".join(map(str, loc)), dotted, n=1)
    return close[0] if close else None


def explain_validation_error(errors: list[dict], root: type[BaseModel]) -> UserError:
    """Turn the first pydantic error (all of them, for a union field) into a one-line UserError with a fix."""
    err = errors[0]
    loc, kind, ctx = _field_path(tuple(err["loc"]), root), err["type"], err.get("ctx", {})
    field = ".".join(str(p) for p in loc)
    if kind == "extra_forbidden":
        close, same = closest_key(loc, root, err.get("input")), synonym(loc, err.get("input"))
        hint = f"did you mean '{close}'{f' ({same[1]})' if same and same[1] else ''}? " if close else ""
        return UserError(field, "unknown key", f"{hint}valid keys here: {', '.join(_valid_keys(loc, root))}")
    value = err.get("input")
    if kind == "finite_number":
        return UserError(field, f"got {value!r}: must be a finite number", f"set {field} to a finite number")
    if len(loc) < len(err["loc"]):  # a union: say every accepted form
        forms = [e["msg"].removeprefix("Input should be ") for e in errors
                 if _field_path(tuple(e["loc"]), root) == loc]
        return UserError(field, f"got {value!r}: must be {' or '.join(forms)}", f"set {field} to one of those")
    rule = err["msg"][0].lower() + err["msg"][1:]
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        fix = f"set {field} to a value that is {rule.removeprefix('input should be ')}"
    elif kind == "literal_error":
        fix = f"set {field} to one of {ctx.get('expected')}"
    elif kind.endswith("_type") or kind.endswith("_parsing"):
        fix = f"give {field} a value of the right type (got {type(value).__name__} {value!r})"
    else:
        fix = f"correct {field}"
    return UserError(field, f"got {value!r}: {rule}", fix)
