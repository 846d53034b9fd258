"""The rollout engine: continuous batching over a preallocated KV cache (the trainer's default backend).

Up to `max_concurrency` sequences decode together, one cache row each. Each scheduler iteration:
  1. admit: free rows are refilled from the queue at once and the new prompts are prefilled together (one forward,
     right-padded; a prompt repeated G times is prefilled once and its cache copied, also across admissions: a
     row keeps its prompt's cache while its sequence decodes and after it ends), which also samples each one's
     first token; sequences that end right there free their row again
     and it is refilled in the same iteration while the queue lasts;
  2. compact: once the queue is empty, finished rows are filled by moving the last active rows down, so the
     active rows are always 0..B-1 and a decode step uses a view of the cache;
  3. decode: one forward feeds every active sequence its pending token and samples the next one.
A sequence ends at <eos> (kept in its response) or at max_new_tokens. So while work remains the active count stays at
the cap; a static batch (HF generate) instead decodes until its longest response ends with ever fewer live rows.

Statistics in `Rollouts.stats`: per decode step the active sequences (`active_per_step`), the tokens generated in that
iteration (`tokens_per_step`, prefill-sampled first tokens included) and the queue left after admission
(`queued_per_step`); `active_mean` is their mean active count (the mean prefill batch if no decode step ran).

Sampling and log-probs: see sampling.py (one uniform per sample and position, so the samples do not depend on the
concurrency). Randomness comes from torch's global generator, so `torch.manual_seed` makes a call reproducible.
"""

from __future__ import annotations

import torch

from batchscale.rollout.base import RolloutEngine, Rollouts, SamplingParams
from batchscale.rollout.decoder import SlotDecoder
from batchscale.rollout.sampling import sample_tokens

DEFAULT_MAX_CONCURRENCY = 256


class ContinuousBatchingEngine(RolloutEngine):
    name = "engine"

    def __init__(self, model, tokenizer, max_concurrency: int = DEFAULT_MAX_CONCURRENCY, compute_dtype: str = "auto"):
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.model, self.tokenizer, self.max_concurrency = model, tokenizer, max_concurrency
        self.decoder = SlotDecoder(model, compute_dtype)

    @torch.inference_mode()
    def generate(self, prompts: list[str], params: SamplingParams) -> Rollouts:
        tok = self.tokenizer
        prompt_ids = [list(ids) for ids in tok(prompts)["input_ids"]] if prompts else []
        self.decoder.sync()
        run = DecodeSchedule(self.decoder, prompt_ids, params, tok.eos_token_id, tok.pad_token_id or 0,
                             self.max_concurrency)
        response_ids, logprobs, stats = run.finish()
        texts = tok.batch_decode(response_ids, skip_special_tokens=True)
        return Rollouts(prompt_ids, response_ids, texts, stats, logprobs)


class DecodeSchedule:
    """The state of one generate call: the queue, the rows, and each sequence's tokens so far."""

    def __init__(self, decoder: SlotDecoder, prompt_ids, params: SamplingParams, eos_id: int, pad_id: int, cap: int):
        self.decoder, self.prompt_ids, self.params = decoder, prompt_ids, params
        self.eos_id, self.pad_id = eos_id, pad_id
        n = len(prompt_ids)
        self.cap = max(1, min(cap, n))
        self.device = decoder.device
        # one uniform per (sample, position), drawn up front: a sample's draws never depend on its neighbours
        self.uniforms = None if params.greedy else torch.rand(n, params.max_new_tokens).to(self.device)  # (N, T)
        self.responses: list[list[int]] = [[] for _ in range(n)]
        self.logprobs: list[list[float]] = [[] for _ in range(n)]
        self.cached = [0] * n  # tokens of each sequence already in its cache row
        self.next_seq = 0  # the queue is sequences next_seq..queue_end-1, in order
        self.queue_end = n
        self.rows: list[int | None] = []  # sequence held by each cache row; None: free
        self.active_per_step: list[int] = []
        self.tokens_per_step: list[int] = []
        self.queued_per_step: list[int] = []
        self.prefill_batches: list[int] = []
        self.prefilled = 0  # prompts that went through a forward (the others came from a row that held them)
        self.forget_prompts()
        if n:
            longest = max(len(p) for p in prompt_ids)
            decoder.reserve(self.cap, longest + params.max_new_tokens)

    def forget_prompts(self) -> None:
        """Treat every cache row as holding no prompt (at the start, and whenever the weights change)."""
        self.held: list[tuple[int, ...] | None] = [None] * self.cap  # the prompt whose positions each row holds
        self.prompt_logits: dict[tuple[int, ...], torch.Tensor] = {}  # last-token logits (V,) of the held prompts

    def finish(self):
        while self.next_seq < self.queue_end or any(s is not None for s in self.rows):
            generated = self.admit()
            self.compact()
            if self.rows:
                self.active_per_step.append(len(self.rows))
                generated += self.decode_step()
            self.tokens_per_step.append(generated)
        steps = len(self.active_per_step)
        mean_prefill = sum(self.prefill_batches) / max(len(self.prefill_batches), 1)
        stats = {
            "active_mean": sum(self.active_per_step) / steps if steps else mean_prefill,
            "active_max": max(self.active_per_step, default=0),
            "decode_steps": steps,
            "prefill_steps": len(self.prefill_batches),
            "prompts_prefilled": self.prefilled,
            "tokens": sum(len(r) for r in self.responses),
            "max_concurrency": self.cap,
            "active_per_step": self.active_per_step,
            "tokens_per_step": self.tokens_per_step,
            "queued_per_step": self.queued_per_step,
        }
        return self.responses, self.logprobs, stats

    def record(self, seqs: list[int], logits: torch.Tensor) -> list[bool]:
        """Sample one token for each sequence from its logits (B, V); return which sequences have ended."""
        counts = [len(self.responses[s]) for s in seqs]
        tokens, logprobs = sample_tokens(logits, self.draws(seqs, counts), self.params.temperature, self.params.top_p)
        done = []
        for s, token, logprob in zip(seqs, tokens.tolist(), logprobs.tolist()):
            self.responses[s].append(token)
            self.logprobs[s].append(logprob)
            done.append(token == self.eos_id or len(self.responses[s]) >= self.params.max_new_tokens)
        return done

    def draws(self, seqs: list[int], counts: list[int]) -> torch.Tensor | None:
        """(B,) the uniform of each sequence at the position it samples next (None: greedy)."""
        if self.uniforms is None:
            return None
        return self.uniforms[torch.tensor(seqs, device=self.device), torch.tensor(counts, device=self.device)]

    def admit(self) -> int:
        """Refill free rows from the queue and prefill them, until rows or queue run out. Returns tokens sampled."""
        generated = 0
        while self.next_seq < self.queue_end:
            free = [r for r, s in enumerate(self.rows) if s is None] + list(range(len(self.rows), self.cap))
            if not free:
                break
            free = free[: self.queue_end - self.next_seq]
            seqs = list(range(self.next_seq, self.next_seq + len(free)))
            self.next_seq += len(free)
            self.rows += [None] * (max(free) + 1 - len(self.rows))
            for r, s in zip(free, seqs):
                self.rows[r] = s
            logits = self.prefill(free, seqs)
            for r, s, ended in zip(free, seqs, self.record(seqs, logits)):
                self.cached[s] = len(self.prompt_ids[s])
                if ended:
                    self.rows[r] = None
            self.prefill_batches.append(len(seqs))
            generated += len(seqs)
        self.queued_per_step.append(self.queue_end - self.next_seq)
        return generated

    def prefill(self, rows: list[int], seqs: list[int]) -> torch.Tensor:
        """Put each sequence's prompt into its cache row; return the last-token logits per sequence (B, V).

        GRPO repeats every prompt G times, so most prompts are already in the cache: a row keeps its prompt's
        positions intact while its sequence decodes past them and after it ends (`held`). Such a prompt is copied
        from the row that holds it (or is already in place) and its logits are the ones kept from its prefill; each
        other distinct prompt is prefilled once and copied to the sequences that share it. At concurrency 1 this is
        what turns G prefills per prompt into one (llama.cpp keeps a repeated prompt's cache the same way)."""
        prompts = [tuple(self.prompt_ids[s]) for s in seqs]
        holder = {p: r for r, p in enumerate(self.held) if p is not None}  # read before any row is overwritten
        kept = [(holder[p], r) for p, r in zip(prompts, rows) if p in holder and self.held[r] != p]  # else in place
        fresh: dict[tuple[int, ...], int] = {}  # prompt held nowhere -> index of its first sequence in this batch
        for i, p in enumerate(prompts):
            if p not in holder:
                fresh.setdefault(p, i)
        if kept:  # one gather then one scatter, so a source row that is also a destination is read first
            src, dst = (torch.tensor(side, device=self.device) for side in zip(*kept))
            self.decoder.copy_rows(src, dst, max(len(p) for p in prompts))
        if fresh:
            unique = sorted(fresh.values())
            lengths = [len(prompts[i]) for i in unique]
            ids = torch.full((len(unique), max(lengths)), self.pad_id, dtype=torch.long)  # (U, L) right-padded
            for j, i in enumerate(unique):
                ids[j, : lengths[j]] = torch.tensor(prompts[i])
            unique_rows = torch.tensor([rows[i] for i in unique], device=self.device)
            logits = self.decoder.prefill(unique_rows, ids.to(self.device), torch.tensor(lengths, device=self.device))
            for j, i in enumerate(unique):
                self.prompt_logits[prompts[i]] = logits[j].clone()
            self.prefilled += len(unique)
            copies = [(rows[fresh[p]], r) for i, (p, r) in enumerate(zip(prompts, rows))
                      if p in fresh and fresh[p] != i]
            if copies:
                src, dst = (torch.tensor(side, device=self.device) for side in zip(*copies))
                self.decoder.copy_rows(src, dst, max(lengths))
        for p, r in zip(prompts, rows):
            self.held[r] = p
        out = torch.stack([self.prompt_logits[p] for p in prompts])  # (B, V)
        live = set(self.held)
        for p in [p for p in self.prompt_logits if p not in live]:  # only prompts some row still holds
            del self.prompt_logits[p]
        return out

    def compact(self) -> None:
        """Move the last active rows into free rows below them, so the active rows are exactly 0..B-1."""
        while self.rows and self.rows[-1] is None:
            self.rows.pop()
        for hole in range(len(self.rows)):
            if hole >= len(self.rows):
                break
            if self.rows[hole] is None:
                seq = self.rows.pop()
                self.decoder.move_row(len(self.rows), hole, self.cached[seq])
                self.held[hole] = self.held[len(self.rows)]
                self.rows[hole] = seq
                while self.rows and self.rows[-1] is None:
                    self.rows.pop()

    def decode_step(self) -> int:
        seqs = list(self.rows)
        tokens = torch.tensor([self.responses[s][-1] for s in seqs], device=self.device)  # (B,)
        positions = torch.tensor([self.cached[s] for s in seqs], device=self.device)  # (B,)
        logits = self.decoder.decode(tokens, positions)  # (B, V)
        for s in seqs:
            self.cached[s] += 1
        for r, ended in enumerate(self.record(seqs, logits)):
            if ended:
                self.rows[r] = None
        return len(seqs)
