"""The documents batchscale writes beside run directories, each a typed schema with a `schema_version`:

    analysis.json                `AnalysisDocument`   batchscale analyze: the learning side (N*, rN, alignment, B_simple)
    plan.json / plan --json      `PlanDocument`       batchscale plan: the decision table, the winner, the regime
    predict --json               `PredictionDocument` batchscale predict: rN and q predicted from one run
    profiles/generation.json     `GenerationProfile`  batchscale profile generation --json: tokens/s vs concurrency, knee
    profiles/training.json       `TrainingProfile`    batchscale profile training --json: seconds per update vs batch

Every producer builds the model and writes it with `write_document` (strict JSON, atomic); every consumer reads it with
`read_document`, which names the file and the key when something is off. Keys are declared here, once: no consumer
guesses among alternatives. `extra="forbid"` makes a producer's misspelt key an error at the producer.
"""

from __future__ import annotations

import re

from pathlib import Path
from typing import ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from batchscale.errors import UserError
from batchscale.files import read_json_object, write_json_atomic
from batchscale.rundir.run import validation_error

ANALYSIS_FILE = "analysis.json"
PLAN_FILE = "plan.json"
GENERATION_PROFILE_FILE = "profiles/generation.json"
TRAINING_PROFILE_FILE = "profiles/training.json"


class Document(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    current_version: ClassVar[int] = 1
    regenerate: ClassVar[str] = "regenerate it"  # the fix a reading error suggests

    schema_version: int = 1

    def to_json(self) -> dict:
        return self.model_dump(mode="json")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


# --- analysis.json --------------------------------------------------------------------------------------------------

class SamplesToTarget(Strict):
    """N* over a label's seeds: mean and interval over the seeds that reached the target; counts of both kinds.
    The interval is the t-interval on log N* (analysis/intervals.py); `interval` names it, or says why there is none
    ("one seed: uncertainty unknown"). log_mean, log_sd: mean and sd (ddof=1) of ln N* over reached seeds."""

    mean: float | None
    ci_low: float | None
    ci_high: float | None
    reached: int
    censored: int
    log_mean: float | None = None
    log_sd: float | None = None
    interval: str = ""


class LabelAnalysis(Strict):
    prompts_per_step: int | None
    samples_per_prompt: int | None
    samples_per_step: int
    samples_per_update: int
    updates_per_step: int
    lr: float | None
    lr_rule: str | None
    seeds: list[int]
    samples_to_target: SamplesToTarget
    r_n: float | None
    updates_to_target: float | None
    update_ratio: float | None
    grad_norm_actor: float | None
    aligned: bool | None
    time_to_target_realized: float | None = None  # seconds of time/step up to N*, mean over reached seeds
    learns: bool | None = None  # its mean curve rises clearly above its start (analysis/signal.py)
    r_n_predicted: float | None = None  # from the reference run's own B_noise (analysis.prediction)
    rollout_mode: Literal["sync", "async"] = "sync"  # run.json's: each mode is its own label
    max_staleness: int | None = None  # async: the bound k on policy versions a consumed sample may lag
    staleness_mean: float | None = None  # async: async/staleness_mean over every step and seed
    stopped: str | None = None  # a racing sweep stopped the point: "cannot win (T > 41 s at N = 5,120)" (summary.json
    # or sweep.json)
    # per seed, in the order of `seeds` (None: an analysis.json older than issue 38): N* (null: not reached), the
    # samples trained (a censored seed's bound on N*), and the eval interval holding the crossing (samples; null: none)
    n_star_per_seed: list[float | None] | None = None
    samples_trained_per_seed: list[float] | None = None
    crossing_gap_per_seed: list[float | None] | None = None


class NoiseScaleValue(Strict):
    """B_noise in samples over a run's second half and its 80% interval (telemetry.gradnoise: the ratio of the per-step
    terms' means; "ema median": the logged EMA's median and 10th-90th percentiles); null where it is infinite (the
    gradient pure noise at the run's batch: beyond what the run resolves)."""

    value: float | None
    low: float | None
    high: float | None
    resolved: bool | None = None  # value and upper end finite (None: written before the interval existed)
    method: str | None = None


class NoiseScalePrediction(Strict):
    """rN predicted from the reference's logged gradient noise scale, and what that prediction cost."""

    label: str  # whose runs B_noise was read from: the reference
    b_noise: NoiseScaleValue
    b_noise_steps: int
    b_noise_unresolved_steps: int  # of those, steps that logged null (infinite)
    b_noise_fitted: float | None = None  # the B_noise whose rN(B) curve fits the sweep's measured rN best
    b_noise_fitted_low: float | None = None  # its 80% interval from the seeds' scatter (analysis.noise_fit); None:
    b_noise_fitted_high: float | None = None  # open at that end, or no interval (fewer than 2 seeds anywhere)
    prediction_compute_s: float  # one run of the reference: its summed time/step
    sweep_compute_s: float  # every run of the sweep
    lr_rule: str | None = None  # the reference's: only labels of this lr rule are predicted and ranked
    other_rule_labels: list[str] = []  # labels of another lr rule (a fixed-LR control): not predicted, not ranked
    compute_fraction: float | None


class AnalysisDocument(Document):
    regenerate: ClassVar[str] = "rerun `batchscale analyze` on the sweep"

    reference: str
    target: float | None  # None only when there is no learning signal and no target was given
    target_rule: str
    configs: dict[str, LabelAnalysis] = Field(min_length=1)
    grad_norm_slope: float | None
    b_simple: float | None  # the critical training batch, samples per update
    smooth_window: int = 1  # centred moving average over this many evals (1: raw evals)
    score: Literal["eval", "train-reward"] = "eval"  # the curve: eval records, or the steps' training reward
    learning_signal: bool = True  # some label rises clearly above its start; False: no verdict can be drawn
    why_no_signal: str | None = None
    prediction: NoiseScalePrediction | None = None  # None: the reference's runs log no gns/b_noise


# --- plan.json ------------------------------------------------------------------------------------------------------

class RegimeDocument(Strict):
    name: str
    sentence: str
    critical_generation_batch: float | None
    critical_training_batch: float | None
    tentative: bool = False  # the knee was extrapolated, or the two critical batches lie close


class PlanRowDocument(Strict):
    label: str
    prompts_per_step: int | None
    samples_per_prompt: int | None
    samples_per_step: int | None
    samples_to_target: float | None
    throughput_samples_per_s: float
    r_n: float | None
    throughput_gain: float
    time_to_target: float | None  # seconds
    normalized_time_to_target: float | None
    score: float | None
    feasible: bool
    censoring: str
    eligible: bool
    infeasible_because: str | None = None
    throughput_seeds: int | None = None  # from a sweep's logs: how q was measured
    throughput_min_samples_per_s: float | None = None
    throughput_max_samples_per_s: float | None = None
    step_s: float | None = None
    generate_s: float | None = None
    train_s: float | None = None
    time_to_target_realized: float | None = None  # seconds of time/step up to N*, mean over reached seeds
    throughput_warmup_only: bool = False  # no step after the warm-up step: q includes warm-up
    decode_batch: int | None = None  # sequences decoding at once per replica (plan/memory.py)
    throughput_capped_at: int | None = None  # B_train decodes in waves of this many sequences
    stopped: str | None = None  # analysis.json's: why a racing sweep stopped the point (it cannot win)
    generate_s_measured: float | None = None  # the runs' own time/generate, where a server's profile replaced it
    seeds: int | None = None  # seeds in the test on ln T (None: no per-seed N* and q, e.g. a table)
    budget_samples: float | None = None  # the most samples a seed could train (a racing sweep's, else trained)
    budget_over_reference_n_star: float | None = None  # budget / N*_ref: below ~2x its q gain, the budget may censor
    budget_cut: bool = False  # censored, and the best does not beat its bound: cut by the budget, not beaten
    # T/T_ref's 95% interval from the test on ln T against the reference (plan/resolve.py); None for the reference and
    # where no test can be formed (one seed, no pooled spread, a table). With censored seeds, `at_least` is T/T_ref
    # counting them at the samples they trained (a lower bound), `low` the bound below it, `high` None
    normalized_time_to_target_low: float | None = None
    normalized_time_to_target_high: float | None = None
    normalized_time_to_target_at_least: float | None = None


class RatioDocument(Strict):
    label: str
    ratio: float  # T_label / T_best
    low: float
    high: float


class PlanDocument(Document):
    regenerate: ClassVar[str] = "rerun `batchscale plan --json`"

    reference: str
    best: str | None
    runner_up: str | None = None
    resolved: bool = False  # a single winner: the best beats every other configuration on ln T at the 95% level
    # which kind of answer (plan/resolve.py): "winner" (resolved), "near_optimal" (a set, `near_optimal`, fastest
    # first, each member beating the reference and the best not beating the others), "unresolved", "none" (no best)
    answer: Literal["winner", "near_optimal", "unresolved", "none"] | None = None  # None: a plan.json older than this
    near_optimal: list[str] = []
    near_optimal_ratios: list[RatioDocument] = []  # each other member's T / T_best at `joint_confidence`
    joint_confidence: float | None = None  # Bonferroni over the set's comparisons
    equivalent: bool | None = None  # every ratio interval inside [0.9, 1.11]; false: "not separated"
    budget_cut: list[str] = []  # censored points the best does not beat by their bound
    not_run: list[str] = []  # points a racing sweep never ran (its time budget ended first)
    pooled_sd: float | None = None  # the seed-to-seed sd of ln T the tests used, and its degrees of freedom
    pooled_df: int | None = None
    why_unresolved: str | None = None
    explanation: str
    regime: RegimeDocument
    source: Literal["sweep", "table"]
    sweep: str | None = None
    analysis: str | None = None
    table: str | None = None
    target: float | None = None
    throughput_method: str
    generation_profile: str | None = None
    generation_source: str | None = None  # where the profile's knee came from (GenerationProfile.measured_on)
    generation_backend: str | None = None  # the profile's backend; "openai": a server's, which also gives q's generation
    memory: dict | None = None
    rows: list[PlanRowDocument]


# --- predict --json ----------------------------------------------------------------------------------------------

class PredictionReference(Strict):
    label: str
    samples_per_step: int
    throughput_samples_per_s: float
    step_s: float  # median time/step after the first


class PredictedBest(Strict):
    samples_per_step: int | None  # None when no candidate is feasible
    low: int | None  # the best batch over B_noise's interval
    high: int | None


class PredictedRow(Strict):
    samples_per_step: int
    r_n_predicted: float
    throughput_gain: float
    time_to_target_normalized: float
    throughput_samples_per_s: float
    feasible: bool


class PredictionDocument(Document):
    regenerate: ClassVar[str] = "rerun `batchscale predict RUN_DIR --json`"

    run: str
    label: str
    b_noise: NoiseScaleValue
    b_noise_steps: int  # step records the median was read from
    b_noise_unresolved_steps: int  # of those, steps that logged null (infinite)
    why_unresolved: str | None = None  # B_noise not resolved: no best batch is named, and how much more would do
    lr_rule: str | None = None  # the run's: every candidate batch is predicted at its lr under this rule
    reference: PredictionReference
    best: PredictedBest
    throughput_method: str
    generation_source: str | None = None  # --generation-profile's GenerationProfile.measured_on
    rows: list[PredictedRow] = Field(min_length=1)


# --- profiles -------------------------------------------------------------------------------------------------------

class SaturatingKnee(Strict):
    """q(B) = q_max * B / (B + B_half) fitted to the levels; B_90 = 9 * B_half (systems/knee.py)."""

    metric: str
    q_max: float
    b_half: float
    b_90: float
    doubling_knee: float | None
    doubling_threshold: float
    r2: float
    extrapolated: bool
    method: str


class GenerationRow(Strict):
    concurrency: int
    responses: int
    tokens: int
    time_s: float
    time_s_repeats: list[float]
    tokens_per_s: float
    responses_per_s: float
    active_mean: float | None
    decode_steps: int | None
    response_length_mean: float
    response_length_max: int
    peak_rss_mb: float | None  # the profiling process's; None for a server (its memory is not ours to read)
    kv_cache_mb: float | None = None
    cuda_max_allocated_mb: float | None = None
    weight_bytes_per_s: float | None = None  # decode steps x the weights' bytes / time_s (with a hardware preset)
    bandwidth_fraction: float | None = None  # weight_bytes_per_s over the preset's HBM bandwidth
    # a server's level (backend "openai"), over the reported repeat's responses:
    ttft_s_median: float | None = None  # time to first token: request sent -> first chunk with text
    ttft_s_p90: float | None = None
    itl_s_median: float | None = None  # inter-token latency: (last text chunk - first) / (tokens - 1) per response
    itl_s_p90: float | None = None
    decoding_mean: float | None = None  # streams between their first and last token, time-weighted over the level
    decode_steps_estimated: float | None = None  # tokens / sequences decoding together (a server counts no steps)
    stopped_early: int | None = None  # responses that ended before max_new_tokens (finish_reason "stop")
    client_cpu_s: float | None = None  # the profiler's own CPU seconds in the repeat (it may share the server's cores)


class DecodeRoofline(Strict):
    """Generation against a hardware preset: how much of its memory bandwidth decode's weight reads realize, at
    concurrency 1 (the bandwidth-bound end) and per level (GenerationRow.bandwidth_fraction)."""

    hardware: str
    bandwidth_bytes_per_s: float
    weight_bytes: float  # what one decode step reads of the weights, in the decode dtype
    bandwidth_fraction_at_1: float | None  # None: concurrency 1 was not profiled
    decode_steps: str = "counted by the engine"  # or how a server's were estimated
    weights_from: str | None = None  # a server's: the model shape the weight bytes were counted from


class ServerInfo(Strict):
    """The OpenAI-compatible server a profile measured (backend "openai"), as it described itself. Every string is the
    server's own, kept as data; `url` carries no credentials (userinfo and query dropped)."""

    url: str
    endpoint: Literal["completions", "chat"]  # /v1/completions or /v1/chat/completions
    endpoint_note: str | None = None  # why chat, when completions was asked for by default and the server lacks it
    model: str  # the id /v1/models listed for --model (or --model itself where the server lists none)
    models_listed: list[str] | None  # /v1/models' ids; None: the server has no /v1/models
    version: str | None  # where the server says: /version (vLLM), /get_server_info (SGLang), /info (TGI), /props
    version_from: str | None  # the path (or header) the version came from
    server_header: str | None  # the `server:` response header
    ignore_eos: Literal["honoured", "refused", "ignored", "off"]  # asked for and held / refused / accepted but EOS
    # still ended responses / not asked for (--no-ignore-eos)
    ignore_eos_note: str | None = None  # the server's refusal, in its words (truncated)
    stream_usage: bool  # stream_options.include_usage accepted (else refused, and tokens come from the chunks)
    tokens_from: str  # "usage" (the server's count), "stream chunks" (one token per text chunk), or a mix
    timeouts_s: dict[str, float]  # connect, read (gap between chunks), level (a whole level, repeats included)
    api_key_env: str | None = None  # the environment variable the key came from (never the key)


class GenerationProfile(Document):
    regenerate: ClassVar[str] = "rerun `batchscale profile generation --json`"

    model: str
    dtype: str
    compute_dtype: str
    backend: str  # engine, hf, or openai (a server: `server` says which)
    device: str
    threads: int | None  # a server's: as the user said it was started (--threads), else None
    params: int | None  # a server's: from the model shape (--shape), else None
    task: str
    samples_per_prompt: int
    sampling: dict[str, int | float]  # temperature, top_p, max_new_tokens
    repeats: int
    rows: list[GenerationRow] = Field(min_length=1)
    knee: SaturatingKnee | None
    roofline: DecodeRoofline | None = None  # with --hardware (a CUDA device's detected preset by default)
    server: ServerInfo | None = None  # backend "openai": the server measured

    @property
    def measured_on(self) -> str:
        """Where the knee came from, in words: "the openai server at URL (model M, vLLM 0.32.0, /v1/completions)"
        or "batchscale's engine on cpu (tiny, float32)"."""
        if self.server is None:
            what = {"engine": "batchscale's engine", "hf": "Hugging Face generate"}.get(self.backend, self.backend)
            return f"{what} on {self.device} ({self.model}, {self.dtype})"
        server = self.server
        version = f", version {server.version}" if server.version else (
            f", server {server.server_header}" if server.server_header else "")
        return (f"the {self.backend} server at {server.url} (model {server.model}{version}, "
                f"/v1/{'chat/' if server.endpoint == 'chat' else ''}completions)")

    @property
    def critical_generation_batch(self) -> float | None:
        """The knee in samples in flight: B_90 of the fit, else the doubling knee."""
        if self.knee is None:
            return None
        return self.knee.b_90 if self.knee.b_90 > 0 else self.knee.doubling_knee


class TrainingCostFit(Strict):
    """seconds per update = seconds_fixed + seconds_per_token * tokens (systems/knee.py); asymptotic rates are None
    when noise made the slope non-positive."""

    seconds_fixed: float
    seconds_per_token: float
    r2: float
    tokens_per_s: float | None
    flops_per_s_asymptotic: float | None
    utilization_asymptotic: float | None


class MatmulPeak(Strict):
    best: float  # FLOP/s, the best sample (interference only ever slows a sample)
    median: float
    samples: list[float]


class TrainingRow(Strict):
    samples_per_update: int
    tokens: int  # prompt + response tokens of the batch, padding excluded
    response_tokens: int  # the positions the LM head runs on
    flops: float  # counted where each matrix runs (profile_training.update_flops)
    padded_tokens: int
    seconds: float
    seconds_repeats: list[float]
    tokens_per_s: float
    samples_per_s: float
    flops_per_s: float
    utilization: float
    cuda_max_allocated_mb: float | None = None  # peak allocated during the timed updates (CUDA only)
    utilization_of_preset: float | None = None  # flops_per_s over the hardware preset's dense bf16 peak


class TrainingRoofline(Strict):
    """Training against a hardware preset's datasheet peak (dense bf16), beside the measured matmul peak."""

    hardware: str
    peak_flops_per_s: float
    utilization_best: float  # the best row's flops_per_s / peak_flops_per_s


class TrainingProfile(Document):
    regenerate: ClassVar[str] = "rerun `batchscale profile training --json`"

    model: str
    params: int
    dtype: str  # the weights'
    compute_dtype: str  # the arithmetic's (optim.compute_dtype resolved)
    device: str
    threads: int
    micro_batch_size: int | None
    repeats: int
    task: str
    peak_flops_per_s: float
    peaks: dict[str, MatmulPeak]  # dtype -> measured matmul rate
    peak_matmul_shape: list[int]
    rows: list[TrainingRow] = Field(min_length=1)
    fit: TrainingCostFit | None
    roofline: TrainingRoofline | None = None  # with --hardware (a CUDA device's detected preset by default)
    # --prompt-tokens / --response-tokens (None: the task's own samples); a length not given is the task's
    synthetic_lengths: dict[str, int | None] | None = None


# --- reading and writing --------------------------------------------------------------------------------------------

D = TypeVar("D", bound=Document)


def write_document(path: Path, document: Document) -> Path:
    """Write `document` atomically as strict JSON (NaN and infinity refused)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, document.to_json())
    return path


def read_document(path: Path, kind: type[D], option: str | None = None) -> D:
    """Read and validate one document; a UserError names the file (and the option it came from) and the key."""
    path = Path(path)
    where = f"{option} {path}" if option else str(path)
    if not path.is_file():
        raise UserError(where, "is not a file", kind.regenerate)
    data = read_json_object(path)
    required = [name for name, info in kind.model_fields.items() if info.is_required()]
    missing = [name for name in required if name not in data]
    if len(missing) > max(1, len(required) // 2):  # another document (a run.json as a profile), before the version
        name = re.sub(r"(?<!^)(?=[A-Z])", " ", kind.__name__).lower()
        other = " (it is a run descriptor, run.json)" if {"prompts_per_step", "samples_per_step"} <= set(data) else ""
        raise UserError(where, f"not a {name}{other}: it lacks {', '.join(missing[:4])}", kind.regenerate)
    version = data.get("schema_version", 1)
    if isinstance(version, int) and version > kind.current_version:
        raise UserError(where, f"schema_version {version} is newer than this batchscale reads "
                        f"({kind.current_version})", "upgrade batchscale")
    try:
        return kind.model_validate(data)
    except ValidationError as e:
        raise validation_error(Path(where), e, kind.regenerate) from None
