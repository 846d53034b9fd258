"""The generator process of asynchronous rollouts, and the shared memory it meets the trainer in.

The trainer (train/async_rollouts.py) starts one generator process (spawned; torch threads `rollout.generator_threads`).
It shares with it, without a file round trip:
- `SharedWeights`: the policy's parameters as torch tensors in shared memory (`share_memory_()`) and a version counter.
  The trainer copies its parameters in after every update and bumps the version; the generator copies them into its
  own model between two decode steps (`rollout.partial`, the default: responses in flight continue under the new
  weights) or once nothing is in flight (`partial = false`: it stops admitting and drains first).
- a queue of prompt groups the trainer sampled (its task and seed, so prompts are drawn as in a synchronous run), and
  a queue of finished groups back: every response's token ids, per-token log-probs and per-token weights versions.
- `Counters`: the groups the trainer dropped as too stale, and the generator's busy and idle seconds and decode
  concurrency, which the trainer turns into per-step records.

Admission control bounds staleness at the source, as AReaL's does: a group may start under version v only while fewer
than (v + k + 1) * P groups have been started, not counting dropped ones (`admission_limit`, used by both processes:
the generator admits by it, the trainer samples prompts ahead by it). The trainer has consumed v * P of them, so
at most (k + 1) * P groups are live (decoding or finished and waiting), and with in-order completion each is consumed
by version v + k at the latest; a group overtaken by younger ones can still grow too stale, and the trainer drops it.
At most `rollout.generation_batch` responses are in flight (queued in the engine or decoding); at most
min(max_concurrency, generation_batch) decode at once. With k = 0 the generator starts exactly one step's P groups per
version, in one `extend`, and waits for them: the synchronous engine's call, sample for sample.

The process calls processes.die_with_parent first, so a killed trainer leaves no generator behind.
"""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass

import torch

from batchscale.policy.load import load_policy
from batchscale.processes import die_with_parent
from batchscale.rollout.base import SamplingParams
from batchscale.rollout.decoder import SlotDecoder
from batchscale.rollout.streaming import StreamingSchedule

IDLE_POLL_S = 0.002
LOCK_POLL_S = 0.2


def admission_limit(version: int, max_staleness: int, prompts_per_step: int) -> int:
    """Groups that may have been started, dropped ones not counted, while `version` is the newest published weights:
    (version + k + 1) * P. The trainer has consumed version * P of them, so at most (k + 1) * P are live."""
    return (version + max_staleness + 1) * prompts_per_step


class SharedWeights:
    """Parameters in shared memory plus a version; the trainer writes, the generator reads, under one lock."""

    def __init__(self, model, context):
        self.tensors = {name: p.detach().clone().share_memory_() for name, p in model.named_parameters()}
        self.version = context.Value("q", 0, lock=False)
        self.lock = context.Lock()

    def publish(self, model, alive) -> int:
        """Copy the trainer's parameters in and bump the version. `alive()` says whether the generator still runs: one
        killed while it held the lock (mid-copy) must end the run, not hang it."""
        while not self.lock.acquire(timeout=LOCK_POLL_S):
            if not alive():
                raise GeneratorDied()
        try:
            with torch.no_grad():
                for name, p in model.named_parameters():
                    self.tensors[name].copy_(p.detach())
            self.version.value += 1
            return self.version.value
        finally:
            self.lock.release()

    def load_into(self, model) -> int:
        with self.lock, torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(self.tensors[name])
            return self.version.value


class GeneratorDied(Exception):
    """The generator process is gone (the trainer turns this into a one-line error)."""


class Counters:
    """Shared scalars, cumulative over the run (the trainer logs their change per step). Each has one writer (the
    trainer: dropped_groups; the generator: the rest), so they hold no lock a killed process could leave taken."""

    def __init__(self, context):
        self.dropped_groups = context.Value("q", 0, lock=False)
        self.busy_s = context.Value("d", 0.0, lock=False)
        self.idle_s = context.Value("d", 0.0, lock=False)
        self.decoded_rows = context.Value("q", 0, lock=False)
        self.decode_steps = context.Value("q", 0, lock=False)

    def add(self, name: str, amount) -> None:
        counter = getattr(self, name)
        counter.value += amount


@dataclass(frozen=True)
class GeneratorSettings:
    prompts_per_step: int  # P
    samples_per_prompt: int  # G
    generation_batch: int  # responses in flight at most
    max_concurrency: int
    max_staleness: int  # k
    partial: bool
    threads: int
    compute_dtype: str
    temperature: float
    top_p: float
    max_new_tokens: int


@dataclass(frozen=True)
class FinishedGroup:
    """One prompt's G responses, finished by the generator and sent to the trainer through the `finished` queue: each
    response's prompt and token ids, and per token its log-prob and the weights version that sampled it."""

    group_id: int  # the order the trainer sampled the prompt in
    start_version: int  # the weights version its decoding started under (its staleness is counted from it)
    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    logprobs: list[list[float]]
    versions: list[list[int]]


@dataclass(frozen=True)
class Channels:
    """What the trainer and the generator process share: weights, counters, the two queues and the stop event."""

    weights: SharedWeights
    counters: Counters
    prompts: object  # queue of (group_id, [G prompt token ids]), trainer -> generator
    finished: object  # queue of FinishedGroup, generator -> trainer
    stop: object  # event: the trainer is done


def generator_main(settings: GeneratorSettings, model_cfg, task_cfg, channels: Channels, rng_state: torch.Tensor,
                   parent_pid: int) -> None:
    """The generator process: load the policy, take the trainer's weights and RNG state, stream groups until stopped."""
    die_with_parent(parent_pid)
    weights, counters, prompts, stop = channels.weights, channels.counters, channels.prompts, channels.stop
    channels.finished.cancel_join_thread()  # stopped with groups the trainer will never read: exit without flushing
    torch.set_num_threads(settings.threads)
    policy = load_policy(model_cfg, task_cfg, lambda line: None)
    model = policy.model
    model.eval()
    version = weights.load_into(model)
    torch.set_rng_state(rng_state)  # after loading: the trainer's generator state at its first rollout
    decoder = SlotDecoder(model, settings.compute_dtype)
    decoder.sync()
    tok = policy.tokenizer
    params = SamplingParams(settings.temperature, settings.top_p, settings.max_new_tokens)
    run = StreamingSchedule(decoder, params, tok.eos_token_id, tok.pad_token_id or 0,
                       min(settings.max_concurrency, settings.generation_batch))
    run.set_version(version)
    streamer = _Streamer(settings, run, channels.finished)
    while not stop.is_set():
        published = weights.version.value
        if published > version and (settings.partial or run.in_flight == 0):
            version = weights.load_into(model)
            decoder.sync()
            run.set_version(version)
        if published == version or settings.partial:
            streamer.admit(prompts, version, counters.dropped_groups.value)
        if run.in_flight == 0:
            time.sleep(IDLE_POLL_S)
            counters.add("idle_s", IDLE_POLL_S)
            continue
        t0 = time.perf_counter()
        rows_before = run.decoded_rows
        ended = run.iterate()
        counters.add("busy_s", time.perf_counter() - t0)
        if run.decoded_rows > rows_before:
            counters.add("decoded_rows", run.decoded_rows - rows_before)
            counters.add("decode_steps", 1)
        streamer.finish(ended)


class _Streamer:
    """The generator's bookkeeping: which groups are live, which sequences belong to which group."""

    def __init__(self, settings: GeneratorSettings, run, finished):
        self.settings, self.run, self.finished = settings, run, finished
        self.started = 0  # groups started so far
        self.waiting: list[tuple[int, list[list[int]]]] = []  # groups taken from the prompt queue, not yet started
        self.group_of: dict[int, int] = {}  # sequence -> group id
        self.live: dict[int, dict] = {}  # group id -> {"seqs", "start_version", "left"}

    def admit(self, prompts, version: int, dropped_groups: int) -> None:
        s = self.settings
        budget = admission_limit(version, s.max_staleness, s.prompts_per_step) - (self.started - dropped_groups)
        room = (s.generation_batch - self.run.in_flight) // s.samples_per_prompt
        admitted = []
        while len(admitted) < min(budget, room):
            if not self.waiting:
                try:
                    self.waiting.append(prompts.get_nowait())
                except queue.Empty:
                    break
            admitted.append(self.waiting.pop(0))
        if not admitted:
            return
        seqs = self.run.extend([ids for _, group in admitted for ids in group])
        for i, (group_id, group) in enumerate(admitted):
            mine = list(seqs[i * s.samples_per_prompt:(i + 1) * s.samples_per_prompt])
            self.live[group_id] = {"seqs": mine, "start_version": version, "left": len(group)}
            self.group_of.update({seq: group_id for seq in mine})
        self.started += len(admitted)

    def finish(self, ended: list[int]) -> None:
        for seq in ended:
            group_id = self.group_of.pop(seq)
            group = self.live[group_id]
            group["left"] -= 1
            if group["left"]:
                continue
            del self.live[group_id]
            streams = self.run.release(group["seqs"])  # the stream keeps no sent sequence
            self.finished.put(FinishedGroup(
                group_id, group["start_version"], prompt_ids=[s.prompt_ids for s in streams],
                response_ids=[s.responses for s in streams], logprobs=[s.logprobs for s in streams],
                versions=[s.versions for s in streams]))
