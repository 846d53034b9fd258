"""Off-policy correction for asynchronous rollouts: a truncated importance weight per response token.

Under asynchronous streaming a response may have been sampled (wholly, or token by token across weight updates) by an
older policy than the one being updated. Following AReaL's decoupled PPO objective (Fu et al. 2025, "AReaL: A
Large-Scale Asynchronous Reinforcement Learning System"), the behaviour policy that sampled a token and the proximal
policy that anchors the trust region are kept apart: the clipped surrogate keeps its ratio pi_theta / pi_prox, with
pi_prox the policy at the update (in the single pass, the current weights before the step), and each token's term is
multiplied by the importance weight w = pi_prox / pi_behaviour, detached. The weight is truncated at `algorithm.is_cap`
(min(w, cap), the truncated importance sampling of verl's rollout importance sampling, `rollout_is` at token level,
and of IMPALA's V-trace), which bounds the variance a very stale token can add, at the price of a small bias.

pi_behaviour is the per-token log-prob the generator recorded when it sampled the token. Departure from verl, which
also corrects the numerical gap between its inference and training engines: a token sampled by the very weights
being updated gets w = 1 exactly, whatever the engine's float rounding, so an asynchronous run with max_staleness = 0
makes exactly the synchronous run's updates.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def truncated_is_weights(
    logp_prox: torch.Tensor,  # (N, T) log-probs under the policy at the update
    logp_behaviour: torch.Tensor,  # (N, T) log-probs recorded at generation
    on_policy: torch.Tensor,  # (N, T) bool: sampled by the weights being updated
    cap: float,
) -> torch.Tensor:
    """(N, T) min(pi_prox / pi_behaviour, cap), and exactly 1 on tokens sampled by the current weights."""
    weights = torch.exp(logp_prox.detach() - logp_behaviour).clamp(max=cap)  # (N, T)
    return torch.where(on_policy, torch.ones_like(weights), weights)


@dataclass
class OffPolicy:
    """What the update needs to correct an asynchronous batch, laid out like `policy.sequences` targets: (N, L - 1)."""

    behaviour_logp: torch.Tensor  # (N, L-1) log-prob each response token was sampled with; 0 elsewhere
    on_policy: torch.Tensor  # (N, L-1) bool: the token's version is the version being updated (True off-response)
    cap: float

    def select(self, rows, width: int) -> "OffPolicy":
        return OffPolicy(self.behaviour_logp[rows, :width], self.on_policy[rows, :width], self.cap)

    def weights(self, logp_prox: torch.Tensor) -> torch.Tensor:
        return truncated_is_weights(logp_prox, self.behaviour_logp, self.on_policy, self.cap)


def off_policy_targets(prompt_ids: list[list[int]], behaviour_logp: list[list[float]], versions: list[list[int]],
                       current_version: int, width: int, cap: float, device="cpu") -> OffPolicy:
    """Place each response's per-token behaviour log-probs and versions at its target positions (N, width): response
    token j of a sample whose prompt has p tokens is the target of position p - 1 + j (policy.sequences.collate's
    layout)."""
    logp = torch.zeros(len(prompt_ids), width)  # (N, L-1)
    on_policy = torch.ones(len(prompt_ids), width, dtype=torch.bool)  # (N, L-1)
    for row, (prompt, row_logp, row_versions) in enumerate(zip(prompt_ids, behaviour_logp, versions, strict=True)):
        start = len(prompt) - 1
        logp[row, start:start + len(row_logp)] = torch.tensor(row_logp)
        on_policy[row, start:start + len(row_versions)] = torch.tensor(row_versions) == current_version
    return OffPolicy(logp.to(device), on_policy.to(device), cap)
