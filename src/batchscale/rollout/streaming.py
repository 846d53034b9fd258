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

The stream runs as long as the run, so it keeps only what is live: each sequence's state (prompt, its row of uniforms,
tokens, log-probs, versions, cached length) is one small `Stream` record from `extend` until `release` hands it back
(when its group is sent to the trainer), and no per-iteration history is kept (the generator counts decoded rows
itself). Memory is bounded by the sequences in flight, not by the run's length.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from batchscale.rollout.base import SamplingParams
from batchscale.rollout.decoder import SlotDecoder
from batchscale.rollout.engine import DecodeSchedule


@dataclass
class Stream:
    """One sequence of the stream, from `extend` until `release`."""

    prompt_ids: list[int]
    uniforms: torch.Tensor | None  # (T,) one uniform per position; None: greedy
    responses: list[int] = field(default_factory=list)  # its tokens so far (the field names are DecodeSchedule's)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # the weights version of each token
    cached: int = 0  # tokens already in its cache row


class StreamField:
    """DecodeSchedule's per-sequence lists (`prompt_ids[s]`, `responses[s]`, `cached[s] += 1`, ...) as a view of one
    field of the live `Stream` records: the schedule's code runs unchanged on records that are dropped."""

    def __init__(self, streams: dict[int, Stream], name: str):
        self.streams, self.name = streams, name

    def __getitem__(self, seq: int):
        return getattr(self.streams[seq], self.name)

    def __setitem__(self, seq: int, value) -> None:
        setattr(self.streams[seq], self.name, value)


class StreamingSchedule(DecodeSchedule):
    def __init__(self, decoder: SlotDecoder, params: SamplingParams, eos_id: int, pad_id: int, cap: int):
        super().__init__(decoder, [], params, eos_id, pad_id, cap)
        self.cap = cap  # DecodeSchedule caps at its prompt count; a stream's queue grows
        self.forget_prompts()  # sized to the new cap
        self.version = 0
        self.streams: dict[int, Stream] = {}  # the live sequences, by index: queued, decoding, or ended unreleased
        for name in ("prompt_ids", "responses", "logprobs", "versions", "cached"):
            setattr(self, name, StreamField(self.streams, name))
        self.ended: list[int] = []  # sequences that ended in the current iteration
        self.decoded_rows = 0  # sum over decode steps of the active sequences (rollout/active_mean)

    def extend(self, prompt_ids: list[list[int]]) -> range:
        """Queue more prompts; returns their sequence indices."""
        first = self.queue_end
        draws = None if self.params.greedy else torch.rand(len(prompt_ids), self.params.max_new_tokens).to(
            self.device)  # (n, T): one call per extend, as a synchronous generate of these prompts draws them
        for i, ids in enumerate(prompt_ids):
            self.streams[first + i] = Stream(ids, None if draws is None else draws[i])
        self.queue_end += len(prompt_ids)
        self.decoder.reserve(self.cap, max(len(p) for p in prompt_ids) + self.params.max_new_tokens)
        return range(first, self.queue_end)

    def release(self, seqs: list[int]) -> list[Stream]:
        """Hand back ended sequences (a group that is sent) and forget them."""
        return [self.streams.pop(seq) for seq in seqs]

    def draws(self, seqs: list[int], counts: list[int]) -> torch.Tensor | None:
        if self.params.greedy:
            return None
        return torch.stack([self.streams[s].uniforms[c] for s, c in zip(seqs, counts)])  # (B,)

    @property
    def in_flight(self) -> int:
        """Sequences queued or decoding."""
        return self.queue_end - self.next_seq + sum(s is not None for s in self.rows)

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
        """One scheduler iteration (engine.DecodeSchedule.finish's loop body, without its per-iteration statistics).
        Returns the sequences that ended in it."""
        self.ended = []
        self.admit()
        self.queued_per_step.clear()  # admit's statistics of a generate call: a stream has no call to report them to
        self.prefill_batches.clear()
        self.compact()
        if self.rows:
            self.decoded_rows += len(self.rows)
            self.decode_step()
        return self.ended
