"""What a TRL GRPOTrainer step does around GradientNoiseCallback, without TRL: a tiny causal LM called the way TRL 1.13
calls it (`model(input_ids=cat(prompt, completion), attention_mask=cat(prompt_mask, completion_mask),
logits_to_keep=C + 1, use_cache=False)`), TRL 1.13's loss scalings (`_compute_loss`: `dapo` sums over loss tokens /
(N/P x K/S), `grpo` is the micro-batch's mean / K), and transformers 5.25's event order for one optimizer step
(on_step_begin, each micro-batch's backward with DDP's no_sync on all but the last, on_substep_end after all but the
last, the clip, on_pre_optimizer_step, the optimizer step, on_step_end, then log). Used by tests/test_trl_callback.py
in one process and by tests/trl_ddp_worker.py under torch.distributed."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import torch
from transformers import TrainerControl, TrainerState

VOCAB, HIDDEN, PROMPT_LEN, COMPLETION_LEN = 11, 6, 3, 5


class TinyLM(torch.nn.Module):
    """Embedding -> tanh -> linear; float64 so that the tests' tolerances are about the estimator, not rounding."""

    def __init__(self, seed: int = 0):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.embed = torch.nn.Parameter(torch.randn(VOCAB, HIDDEN, generator=generator, dtype=torch.float64))
        self.head = torch.nn.Parameter(torch.randn(HIDDEN, VOCAB, generator=generator, dtype=torch.float64) / 2)

    def forward(self, input_ids, attention_mask=None, logits_to_keep=0, use_cache=False):
        hidden = torch.tanh(self.embed[input_ids])  # (B, L, H)
        if attention_mask is not None:
            hidden = hidden * attention_mask.unsqueeze(-1)
        logits = hidden @ self.head  # (B, L, V)
        if logits_to_keep:
            logits = logits[:, -logits_to_keep:]
        return SimpleNamespace(logits=logits)


def make_micro_batches(seed: int, count: int, rows: int) -> list[dict]:
    """`count` micro-batches of `rows` completions: left-padded prompts, right-padded completions of random lengths
    (a row may have none), and an advantage per completion."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        prompt_ids = torch.randint(1, VOCAB, (rows, PROMPT_LEN), generator=generator)
        completion_ids = torch.randint(1, VOCAB, (rows, COMPLETION_LEN), generator=generator)
        lengths = torch.randint(0, COMPLETION_LEN + 1, (rows,), generator=generator)
        lengths[0] = max(int(lengths[0]), 1)  # every micro-batch has loss tokens
        completion_mask = (torch.arange(COMPLETION_LEN) < lengths.unsqueeze(1)).long()
        prompt_mask = (torch.arange(PROMPT_LEN) >= torch.randint(0, PROMPT_LEN, (rows, 1), generator=generator)).long()
        advantages = torch.randn(rows, generator=generator, dtype=torch.float64)
        batches.append({"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
                        "completion_mask": completion_mask, "advantages": advantages})
    return batches


def per_token_loss(model, inputs) -> torch.Tensor:
    """-exp(logp - logp.detach()) x advantage per completion token (GRPO's surrogate at ratio 1), (B, C)."""
    completion = inputs["completion_ids"]
    logits_to_keep = completion.size(1)
    outputs = model(input_ids=torch.cat([inputs["prompt_ids"], completion], dim=1),
                    attention_mask=torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1),
                    logits_to_keep=logits_to_keep + 1, use_cache=False)
    logits = outputs.logits[:, :-1][:, -logits_to_keep:]  # (B, C, V)
    logp = torch.log_softmax(logits, dim=-1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)  # (B, C)
    return -torch.exp(logp - logp.detach()) * inputs["advantages"].unsqueeze(1)


def trl_loss(model, inputs, loss_type: str, accumulation: int, processes: int, loss_tokens: int) -> torch.Tensor:
    """A micro-batch's loss as TRL 1.13 scales it (steps_per_generation = accumulation)."""
    loss, mask = per_token_loss(model, inputs), inputs["completion_mask"]
    if loss_type == "dapo":
        return (loss * mask).sum() / (loss_tokens / processes)
    assert loss_type == "grpo"
    return ((loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean() / accumulation


def own_mean_gradient(model, inputs, loss_type: str) -> torch.Tensor:
    """The micro-batch's own mean gradient m (token mean for dapo, TRL's per-completion mean for grpo), flattened."""
    loss, mask = per_token_loss(model, inputs), inputs["completion_mask"]
    if loss_type == "dapo":
        value = (loss * mask).sum() / mask.sum()
    else:
        value = ((loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    grads = torch.autograd.grad(value, list(model.parameters()))
    return torch.cat([g.reshape(-1) for g in grads])


def trainer_args(loss_type: str = "dapo", accumulation: int = 2, **overrides) -> SimpleNamespace:
    """The fields of a GRPOConfig the callback reads."""
    fields = dict(loss_type=loss_type, gradient_accumulation_steps=accumulation, n_gpu=1, fp16=False, deepspeed=None,
                  fsdp="", max_grad_norm=1.0, steps_per_generation=accumulation)
    return SimpleNamespace(**{**fields, **overrides})


def run_step(model, callback, batches, args, state: TrainerState, *, processes: int = 1, loss_tokens: int,
             ddp=None, optimizer=None) -> None:
    """One optimizer step in transformers' event order (module docstring); `ddp` the DDP wrapper, if any."""
    control = TrainerControl()
    events = dict(model=model)
    callback.on_step_begin(args, state, control, **events)
    forward_model = ddp if ddp is not None else model
    for k, inputs in enumerate(batches):
        last = k == len(batches) - 1
        with (ddp.no_sync() if ddp is not None and not last else contextlib.nullcontext()):
            trl_loss(forward_model, inputs, args.loss_type, len(batches), processes, loss_tokens).backward()
        if not last:
            callback.on_substep_end(args, state, control, **events)
    if args.max_grad_norm:
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
    callback.on_pre_optimizer_step(args, state, control, **events)
    if optimizer is not None:
        optimizer.step()
    model.zero_grad(set_to_none=True)
    state.global_step += 1
    callback.on_step_end(args, state, control, **events)


def log(callback, args, state: TrainerState, logs: dict) -> dict:
    """transformers' Trainer.log: append {**logs, step} to log_history, then on_log with the same dict."""
    state.log_history.append({**logs, "step": state.global_step})
    callback.on_log(args, state, TrainerControl(), logs=logs)
    return state.log_history[-1]
