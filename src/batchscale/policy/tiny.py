"""The built-in tiny policy: a ~3M-parameter Llama with a character tokenizer, warm-started by supervised training.

RL needs a policy that already solves some problems, and one whose mistakes RL can fix: with zero accuracy every GRPO
group has equal rewards and no gradient, and a policy that has not yet learned to carry only creeps up under RL (0.32
to 0.55 in 16k samples, docs/LOG.md). The warm start therefore leaves a policy that knows the task but slips, like a
model fine-tuned on imperfect demonstrations:

1. learn: next-token cross-entropy on the true answers until the greedy eval accuracy reaches `learned_accuracy`
   (carries are learned by then), checked every `check_every` steps;
2. slip: continue on a teacher that drops every carry of a sum with probability `carry_drop` (57+68 -> 15), checked
   at every step, until the greedy accuracy falls into `accuracy_band`. The policy's greedy answer to most carry
   problems is now the slip, while sampling still finds the right one often enough for RL to learn it back.

Both phases stop on a measured criterion, never a step count: accuracy climbs steeply while carries are learned and
falls steeply once the slip is, so a fixed step count lands at a different point of either cliff on a CPU whose GEMM
kernels round differently (the starting accuracy of an earlier fixed-step recipe was 0.47 on one machine, 0.15 on
another). A phase that misses its criterion fails with the accuracies it saw instead of caching a model that would
break the default.

The result is saved as an ordinary Hugging Face model directory under the cache, named by a content hash of everything
that determines it (architecture, tokenizer, task, warm-start recipe), so it is built once (concurrent first uses wait on
a lock and build it once) and then loaded like any local checkpoint. warm_start.json beside the weights records where
each phase stopped, the accuracy there and every check.

The package ships the default task's model (policy/shipped/, pinned in git, see policy/shipped.py): on
first use `build_tiny` installs that copy into the cache, after checking its sha256, instead of training for ~2.5
minutes; a copy that fails the check is not used (a warning, then the build from the recipe). With
`BATCHSCALE_TINY_BUILD=1` it builds from the recipe as before, replacing a cached copy of the shipped one (a model the
recipe built is kept). Any other task (digits, operations, template, split seed) is built from the recipe. After
changing the recipe, a tree that ships a copy regenerates it with `python -m batchscale.policy.tiny --ship`
(tests/test_tiny_shipped.py fails until then).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from batchscale.errors import UserError
from batchscale.files import build_once, cache_root
from batchscale.policy import shipped
from batchscale.policy.forward import token_logprobs
from batchscale.policy.sequences import collate
from batchscale.policy.tokenizer import CHARACTERS, SPECIAL_TOKENS, build_char_tokenizer
from batchscale.tasks.arithmetic import OPS, carry_dropped

TINY_ARCHITECTURE = dict(
    hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
    intermediate_size=688, max_position_embeddings=128, tie_word_embeddings=True,
    attention_dropout=0.0, rms_norm_eps=1e-5,
)
WARM_START = dict(
    batch=64, seed=1234, max_new_tokens=6, version=3,
    lr=1e-3, learned_accuracy=0.6, check_every=10, max_steps=2500,  # phase 1: learn the task, carries included
    slip_lr=3e-4, carry_drop=0.7, accuracy_band=(0.25, 0.35), max_slip_steps=200,  # phase 2: a teacher that slips
)
# The built-in task's fields (TaskConfig's defaults): the model shipped with the package is built for these, and a run
# whose task is not arithmetic still gets the tiny model of this task.
DEFAULT_TASK_FIELDS = {"name": "arithmetic", "digits": 2, "operations": "+", "template": "{a}{op}{b}=", "split_seed": 0}


def tiny_config(vocab_size: int) -> LlamaConfig:
    return LlamaConfig(vocab_size=vocab_size, pad_token_id=0, bos_token_id=1, eos_token_id=2, **TINY_ARCHITECTURE)


def content_hash(task_fields: dict) -> str:
    recipe = {"architecture": TINY_ARCHITECTURE, "vocab": SPECIAL_TOKENS + CHARACTERS, "task": task_fields,
              "warm_start": WARM_START}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def greedy_accuracy(model, tokenizer, task, max_new_tokens: int) -> float:
    """Exact greedy accuracy on the task's held-out eval set, decoded as `batchscale train` evaluates it."""
    from batchscale.policy.policy import Policy
    from batchscale.rollout import build_engine
    from batchscale.rollout.base import SamplingParams

    examples = task.eval_examples()
    engine = build_engine("engine", Policy(model, tokenizer, "tiny"))
    rollouts = engine.generate([e.prompt for e in examples], SamplingParams(max_new_tokens=max_new_tokens, greedy=True))
    return float(np.mean(task.accuracy(rollouts.texts, examples)))


def supervised_step(model, tokenizer, optimizer, prompts: list[str], answers: list[str]) -> float:
    """One step of next-token cross-entropy on (prompt, answer + <eos>) pairs, loss on the answer tokens only."""
    model.train()
    prompt_ids = [tokenizer(p)["input_ids"] for p in prompts]
    answer_ids = [tokenizer(a, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for a in answers]
    seqs = collate(prompt_ids, answer_ids, tokenizer.pad_token_id)
    logp = token_logprobs(model, seqs)  # (N, L-1)
    loss = -(logp * seqs.response_mask).sum() / seqs.response_mask.sum()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    model.eval()
    return loss.item()


def teacher_answers(problems, rng: np.random.Generator, carry_drop: float) -> list[str]:
    """The true answers, except that a sum's carries are dropped with probability `carry_drop` (phase 2)."""
    answers = []
    for a, op, b in problems:
        slipped = carry_dropped(a, op, b) if carry_drop and rng.random() < carry_drop else None
        answers.append(str(OPS[op](a, b) if slipped is None else slipped))
    return answers


def warm_start(model, tokenizer, task, recipe: dict = WARM_START) -> dict:
    """Two supervised phases, each ending on a measured greedy eval accuracy. Returns {"steps", "accuracy",
    "final_loss", "checks": [(step, accuracy), ...]}; raises a UserError when a phase misses its criterion."""
    low, high = recipe["accuracy_band"]
    torch.manual_seed(recipe["seed"])
    rng = np.random.default_rng(recipe["seed"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe["lr"], weight_decay=0.0)
    checks: list[tuple[int, float]] = []
    losses: list[float] = []

    def train_until(first_step: int, last_step: int, carry_drop: float, every: int, done) -> int | None:
        for step in range(first_step, last_step + 1):
            problems = task.sample_train_problems(rng, recipe["batch"])
            prompts = [task.make_example(*problem).prompt for problem in problems]
            losses.append(supervised_step(model, tokenizer, optimizer, prompts, teacher_answers(problems, rng, carry_drop)))
            if step % every == 0:
                checks.append((step, greedy_accuracy(model, tokenizer, task, recipe["max_new_tokens"])))
                verdict = done(checks[-1][1])
                if verdict is not None:
                    return step if verdict else None
        return None

    def failure(what: str) -> UserError:
        seen = ", ".join(f"{a:.3f}@{s}" for s, a in checks[-8:])
        return UserError("model.name", f"the tiny model's warm start {what} (last checks, accuracy@step: {seen})",
                         "use the built-in task's defaults with model.name = 'tiny', or bring a model directory")

    if "+" not in task.operations:  # before any step: the second phase needs sums
        raise UserError("task.operations", f"the tiny model's warm start needs '+' among the operations for its second "
                        f"phase (a teacher that drops carries), got {task.operations!r}",
                        "include '+' in task.operations, or bring a model directory as model.name")
    learned = train_until(1, recipe["max_steps"], 0.0, recipe["check_every"],
                          lambda acc: True if acc >= recipe["learned_accuracy"] else None)
    if learned is None:
        raise failure(f"did not reach greedy accuracy {recipe['learned_accuracy']} in {recipe['max_steps']} steps")
    for group in optimizer.param_groups:
        group["lr"] = recipe["slip_lr"]
    # Checked every step: the accuracy falls fast once the slip is learned, and one step must not jump the band.
    stopped = train_until(learned + 1, learned + recipe["max_slip_steps"], recipe["carry_drop"], 1,
                          lambda acc: True if low <= acc <= high else (False if acc < low else None))
    if stopped is None:
        raise failure(f"did not stop with greedy accuracy in [{low}, {high}]")
    return {"steps": stopped, "learned_at": learned, "accuracy": checks[-1][1], "final_loss": losses[-1],
            "checks": checks}


def task_fields_of(task_cfg) -> dict:
    """The task fields that determine the tiny model (and its content hash)."""
    if task_cfg.name != "arithmetic":
        return dict(DEFAULT_TASK_FIELDS)
    return {k: getattr(task_cfg, k) for k in ("name", "digits", "operations", "template", "split_seed")}


def recipe_build(task_fields: dict, log=print):
    """The build_once callback that warm-starts a fresh tiny model for `task_fields` and saves it into the staging
    directory."""
    from batchscale.tasks.arithmetic import ArithmeticTask

    def build(staging: Path) -> None:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # batchscale draws its own progress; a shard-writing bar only adds noise
        fields = {k: v for k, v in task_fields.items() if k != "name"}
        task = ArithmeticTask(**fields)  # its eval set is the one `batchscale train` evaluates on
        tokenizer = build_char_tokenizer()
        torch.manual_seed(WARM_START["seed"])
        model = LlamaForCausalLM(tiny_config(len(tokenizer)))
        outcome = warm_start(model, tokenizer, task)
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / "warm_start.json").write_text(json.dumps({"recipe": WARM_START, "task": task_fields, **outcome}))
        log(f"warm start: learned at step {outcome['learned_at']}, stopped at step {outcome['steps']} with greedy "
            f"eval accuracy {outcome['accuracy']:.3f}")

    return build


def recipe_what() -> str:
    low, high = WARM_START["accuracy_band"]
    return (f"building the tiny model (warm start: learn to greedy accuracy {WARM_START['learned_accuracy']}, then "
            f"slip into [{low}, {high}]; about 2.5 minutes on 2 cores, ~6 on AVX2 only; `batchscale setup` builds it "
            "apart from any command)")


def build_tiny(task_cfg, log=print) -> Path:
    """Return the directory of the warm-started tiny model for this task config: the cached one, else the copy shipped
    with the package (default task, unless BATCHSCALE_TINY_BUILD=1), else built from the recipe on first use."""
    task_fields = task_fields_of(task_cfg)
    name = f"tiny-{content_hash(task_fields)}"
    target = cache_root() / "models" / name
    if os.environ.get(shipped.REBUILD_ENV) == "1":  # a cached shipped copy (it keeps its SHIPPED.json) is replaced
        return build_once(target, recipe_build(task_fields, log), log, recipe_what(),
                          replace=lambda path: (path / shipped.RECORD).is_file())
    if (target / "config.json").is_file():
        return target
    source = shipped.shipped_dir(name)
    if source is not None:
        bad = shipped.problem(source)
        if bad is None:
            what = (f"tiny model: using the warm-started copy shipped with batchscale "
                    f"({shipped.describe(shipped.read_record(source))}); `{shipped.REBUILD_ENV}=1` rebuilds it from "
                    f"the recipe")
            return build_once(target, lambda staging: shipped.install(source, staging), log, what)
        log(f"warning: the tiny model shipped with batchscale fails its check ({bad}); building it from the recipe")
    return build_once(target, recipe_build(task_fields, log), log, recipe_what())


def regenerate_shipped(source: Path | None = None, root: Path | None = None, log=print) -> Path:
    """Replace the shipped copy under `root` by the default task's model: `source` (a directory built by the current
    recipe, checked against it) or, without one, a build from the recipe in a temporary cache."""
    name = f"tiny-{content_hash(DEFAULT_TASK_FIELDS)}"
    if source is not None:
        record = read_warm_start(source)
        wanted = json.loads(json.dumps({"recipe": WARM_START, "task": DEFAULT_TASK_FIELDS}))  # tuples as lists
        if {"recipe": record.get("recipe"), "task": record.get("task")} != wanted:
            raise UserError(str(source), f"was not built by the current recipe for the default task ({name})",
                            "omit --from to build it from the recipe")
        return shipped.ship(source, name, root)
    with tempfile.TemporaryDirectory(prefix="batchscale-ship-") as tmp:
        built = build_once(Path(tmp) / "models" / name, recipe_build(DEFAULT_TASK_FIELDS, log), log, recipe_what())
        return shipped.ship(built, name, root)


def read_warm_start(path: Path) -> dict:
    """warm_start.json of a built tiny model: its recipe, task, the step it stopped at and the accuracy there."""
    return json.loads((Path(path) / "warm_start.json").read_text())


def load_pretrained_dir(path: Path, dtype=torch.float32):
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype), AutoTokenizer.from_pretrained(path)


if __name__ == "__main__":  # python -m batchscale.policy.tiny --ship [--from DIR]
    import argparse

    parser = argparse.ArgumentParser(prog="python -m batchscale.policy.tiny")
    parser.add_argument("--ship", action="store_true", required=True,
                        help="build the default task's tiny model from the recipe and ship it in the package")
    parser.add_argument("--from", dest="source", type=Path, help="ship this directory (built by the current recipe)")
    args = parser.parse_args()
    out = regenerate_shipped(args.source)
    print(f"shipped {out} ({shipped.describe(shipped.read_record(out))})", file=sys.stderr)
