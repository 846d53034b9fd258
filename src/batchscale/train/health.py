"""Training health: a run stops at the first non-finite number, and notices when its reward collapses.

- `check_rewards`: every reward of a batch must be finite; the first that is not stops the run at that step with a
  one-line UserError naming the step, the reward function and the input (a user's reward returned NaN or infinity).
- `check_finite_record`: every number of a record (loss, gradient norms, eval scores, ...) must be finite before it is
  written; the first that is not stops the run naming the step and the quantity. The run is left unfinished (its
  records up to the step before, no summary.json); nothing non-finite ever reaches the run log.
- `check_parameters`: the policy's parameters must be finite after each update. A finite gradient times a huge
  learning rate can overflow the weights; the next rollout would then sample from NaN logits (which HF `generate`
  answers with a traceback), so the run stops at the step whose update overflowed.
- `CollapseWatch`: a reward collapse is the mean reward and the actor's gradient norm both at zero for
  `COLLAPSE_STEPS` consecutive steps after both had been positive (the policy stopped producing any reward, so no
  advantage and no gradient: GRPO's groups are all-zero). It is a warning, not an error: the run goes on, and the
  warning goes to the console and into summary.json's `warnings`.
"""

from __future__ import annotations

import math
from typing import Sequence

from batchscale.errors import UserError

COLLAPSE_STEPS = 5
ZERO = 1e-12  # |value| at or below this counts as zero


def _is_bad(value) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def check_rewards(step: int, rewards: Sequence[float], reward_spec: str, responses: Sequence[str],
                  answers: Sequence[str], what: str = "reward") -> None:
    """Raise at the first non-finite reward of the batch."""
    for index, value in enumerate(rewards):
        if _is_bad(float(value)):
            raise UserError(f"step {step}: {what}", f"task.reward {reward_spec} returned {float(value)} for input "
                            f"{index} (response {responses[index]!r:.80}, answer {answers[index]!r:.80}); the run "
                            "stops here, unfinished (no summary.json)",
                            "make the reward return a finite number for every response")


def check_finite_record(record: dict, lr: float) -> None:
    """Raise at the first non-finite number in a step or eval record, before it is written."""
    for key, value in record.items():
        if _is_bad(value):
            raise UserError(f"step {record['step']}", f"{key} is {value} (not finite): training diverged; the run "
                            "stops here, unfinished (no summary.json)",
                            f"lower optim.lr (the actor's lr is {lr:.3g} after scaling), or keep optim.max_grad_norm "
                            "set to clip the gradient")


def check_parameters(step: int, model, lr: float) -> None:
    """Raise when an update left a parameter of `model` non-finite (one reduction per tensor, no copy of the model)."""
    import torch

    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if not bool(torch.isfinite(parameter).all()):
                raise UserError(f"step {step}", f"the update left the actor's parameter {name} not finite: training "
                                "diverged; the run stops here, unfinished (no summary.json)",
                                f"lower optim.lr (the actor's lr is {lr:.3g} after scaling)")


class CollapseWatch:
    """Feed it every step record; `update` returns a warning once, when the reward collapses."""

    def __init__(self, steps: int = COLLAPSE_STEPS):
        self.steps = steps
        self.was_positive = False
        self.zero_since: int | None = None
        self.warned = False

    def update(self, record: dict) -> str | None:
        reward, grad_norm = record.get("reward/mean"), record.get("grad_norm/actor")
        if not isinstance(reward, (int, float)) or not isinstance(grad_norm, (int, float)):
            return None
        if reward > ZERO and grad_norm > ZERO:
            self.was_positive, self.zero_since = True, None
            return None
        if not (self.was_positive and abs(reward) <= ZERO and abs(grad_norm) <= ZERO):
            self.zero_since = None
            return None
        self.zero_since = self.zero_since or record["step"]
        if self.warned or record["step"] - self.zero_since + 1 < self.steps:
            return None
        self.warned = True
        return (f"reward collapse: the mean reward and the actor's gradient norm have been 0 since step "
                f"{self.zero_since} ({self.steps} consecutive steps) after being positive, so the policy no longer "
                "learns; check the reward function, and lower optim.lr if it followed a large update")
