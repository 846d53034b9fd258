"""A streaming generate: the engine's continuous-batching run, fed and drained one scheduler iteration at a time.

The asynchronous generator (train/async_generator.py) keeps one `StreamingSchedule` alive for the whole run. Sequences
are appended to its queue whenever the generator admits new groups (`extend`), each `iterate()` is one iteration of the
engine's scheduler (admit, compact, decode: engine.DecodeSchedule, unchanged) and returns the sequences that ended in
it, and between iterations the weights may change (`set_version`, after the decoder re-reads them; the KV cache of the
sequences in flight is then recomputed under the new weights). Every sampled token keeps the version of the weights that
produced it and its log-prob under them (the behaviour policy of algorithms.offpolicy).

Each `extend` draws its uniforms with one torch.rand(n, max_new_tokens), as one synchronous generate call of those n
prompts does, so a run fed one step's prompts at a time, waiting for them to end, samples exactly what the synchronous
engine samples.
"""

from __future__ import annotations

import torch

from batchscale.rollout.base import SamplingParams
from batchscale.rollout.decoder import SlotDecoder
from batchscale.rollout.engine import DecodeSchedule


class StreamingSchedule(DecodeSchedule):
    def __init__(self, decoder: SlotDecoder, params: SamplingParams, eos_id: int, pad_id: int, cap: int):
        super().__init__(decoder, [], params, eos_id, pad_id, cap)
        self.cap = cap  # DecodeSchedule caps at its prompt count; a stream's queue grows
        self.forget_prompts()  # sized to the new cap
        self.version = 0
        self.versions: list[list[int]] = []  # per sequence, the weights version of each sampled token
        self.ended: list[int] = []  # sequences that ended in the current iteration
        self.decoded_rows = 0  # sum over decode steps of the active sequences (rollout/active_mean)

    def extend(self, prompt_ids: list[list[int]]) -> range:
        """Queue more prompts; returns their sequence indices."""
        first = len(self.prompt_ids)
        self.prompt_ids += prompt_ids
        self.responses += [[] for _ in prompt_ids]
        self.logprobs += [[] for _ in prompt_ids]
        self.versions += [[] for _ in prompt_ids]
        self.cached += [0] * len(prompt_ids)
        if self.params.greedy:
            self.uniforms = None
        else:
            draws = torch.rand(len(prompt_ids), self.params.max_new_tokens).to(self.device)  # (n, T)
            self.uniforms = draws if self.uniforms is None or not len(self.uniforms) else torch.cat((self.uniforms, draws))
        self.decoder.reserve(self.cap, max(len(p) for p in prompt_ids) + self.params.max_new_tokens)
        return range(first, len(self.prompt_ids))

    @property
    def in_flight(self) -> int:
        """Sequences queued or decoding."""
        return len(self.prompt_ids) - self.next_seq + sum(s is not None for s in self.rows)

    @torch.inference_mode()
    def set_version(self, version: int) -> None:
        """The decoder has re-read the weights (decoder.sync): tokens from now on are this version's. The cache rows
        of the sequences in flight are recomputed under the new weights (one prefill of prompt + response so far, as
        AReaL's interruptible generation does), so a token's log-prob is exactly its version's, never a mix of an old
        version's keys and a new version's queries."""
        self.version = version
        self.forget_prompts()  # a held prompt's cache and logits are the old version's
        held = [(row, seq) for row, seq in enumerate(self.rows) if seq is not None]
        if not held:
            return
        contexts = [self.prompt_ids[seq] + self.responses[seq][:-1] for _, seq in held]  # the last token is pending
        lengths = [len(ids) for ids in contexts]
        ids = torch.full((len(held), max(lengths)), self.pad_id, dtype=torch.long)  # (B, L) right-padded
        for i, context in enumerate(contexts):
            ids[i, : lengths[i]] = torch.tensor(context)
        rows = torch.tensor([row for row, _ in held], device=self.device)
        self.decoder.prefill(rows, ids.to(self.device), torch.tensor(lengths, device=self.device))

    def record(self, seqs: list[int], logits: torch.Tensor) -> list[bool]:
        done = super().record(seqs, logits)
        for s, ended in zip(seqs, done):
            self.versions[s].append(self.version)
            if ended:
                self.ended.append(s)
        return done

    @torch.inference_mode()
    def iterate(self) -> list[int]:
        """One scheduler iteration (engine.DecodeSchedule.finish's loop body). Returns the sequences that ended in
        it."""
        self.ended = []
        generated = self.admit()
        self.compact()
        if self.rows:
            self.active_per_step.append(len(self.rows))
            self.decoded_rows += len(self.rows)
            generated += self.decode_step()
        self.tokens_per_step.append(generated)
        return self.ended
