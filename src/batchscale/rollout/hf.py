"""Rollouts through Hugging Face `generate`: the reference backend.

Prompts are left-padded into one static batch; sampling is plain temperature + nucleus (top_k disabled, so a model's
generation_config cannot add a hidden top-k). A static batch decodes until its longest response ends, so the active
count falls as responses finish: `active_mean` reports the mean number of unfinished sequences per decode step.
Counted as the engine counts them: a response's first token comes from the prefill forward (`prefill_steps`, one per
batch), so a batch whose longest response has L tokens ran L - 1 decode steps.
"""

from __future__ import annotations

import torch

from batchscale.rollout.base import RolloutEngine, Rollouts, SamplingParams


class HFGenerateEngine(RolloutEngine):
    name = "hf"

    def __init__(self, model, tokenizer, max_batch: int = 512):
        self.model, self.tokenizer, self.max_batch = model, tokenizer, max_batch

    @torch.no_grad()
    def generate(self, prompts: list[str], params: SamplingParams) -> Rollouts:
        result = Rollouts([], [], [], {})
        active_sum = steps = prefills = 0
        for start in range(0, len(prompts), self.max_batch):
            chunk = self._generate_chunk(prompts[start : start + self.max_batch], params)
            result.prompt_ids += chunk.prompt_ids
            result.response_ids += chunk.response_ids
            result.texts += chunk.texts
            active_sum += chunk.stats["active_sum"]
            steps += chunk.stats["decode_steps"]
            prefills += 1
        result.stats = {"active_mean": active_sum / max(steps, 1), "decode_steps": steps, "prefill_steps": prefills}
        return result

    def _generate_chunk(self, prompts: list[str], params: SamplingParams) -> Rollouts:
        tok, device = self.tokenizer, self.model.device
        enc = tok(prompts, padding=True, padding_side="left", return_tensors="pt").to(device)
        sampling = {} if params.greedy else {"temperature": params.temperature, "top_p": params.top_p, "top_k": 0}
        out = self.model.generate(
            **enc,
            do_sample=not params.greedy,
            max_new_tokens=params.max_new_tokens,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
            **sampling,
        )  # (N, L_prompt + L_new)
        new = out[:, enc["input_ids"].shape[1] :].tolist()  # (N, L_new)
        prompt_ids, response_ids = [], []
        for row, mask, gen in zip(enc["input_ids"].tolist(), enc["attention_mask"].tolist(), new):
            prompt_ids.append([t for t, m in zip(row, mask) if m])
            end = gen.index(tok.eos_token_id) + 1 if tok.eos_token_id in gen else len(gen)
            response_ids.append(gen[:end])
        lengths = [len(r) for r in response_ids]
        # token 0 of every response came from the prefill; decode step s (1-based) produced token s of the rows
        # still unfinished
        decode_steps = max(max(lengths, default=0) - 1, 0)
        active_sum = sum(sum(1 for n in lengths if n > s) for s in range(1, decode_steps + 1))
        texts = tok.batch_decode(response_ids, skip_special_tokens=True)
        return Rollouts(prompt_ids, response_ids, texts, {"active_sum": active_sum, "decode_steps": decode_steps})
