"""The sweep's measured rN checked against the rN predicted from the reference run's own gradient noise scale.

The reference label's runs log B_noise online (`gns/b_noise`, samples; telemetry.gradnoise); pooled over its seeds
(the second half of each run), its median predicts every label's samples-to-target penalty before any of them ran:

    rN_predicted(B) = (1 + b(B) / B_noise) / (1 + b(B_ref) / B_noise),   b = samples_per_update

(McCandlish et al. 2018, eq. 2.11). With a plan's measured throughput gains, the predicted best label is the one with
the smallest rN_predicted / (q/q_ref), beside the measured best. The prediction's compute is one run of the reference
(its first seed's summed time/step), as a fraction of the whole sweep's summed time/step.

Only the reference's lr family is predicted and ranked: the formula describes batches whose hyperparameters are
retuned as B changes (McCandlish's link assumes each batch at its optimal step size; the sweep's family, the square-
root rule by default, stands in for that). A label of another lr rule, such as the fixed-LR control, is not a point the
formula speaks for: its r_n_predicted is null, it is never the predicted best, and the text says so.
"""

from __future__ import annotations

import math

from batchscale.analysis.noise_fit import fit_noise_scale_interval
from batchscale.markup import markdown_text
from batchscale.rundir import LoadedRun
from batchscale.telemetry.gradnoise import pool_noise_scales, predict_samples_penalty


def predict_label_penalties(by_label: dict[str, list[LoadedRun]], reference: str, configs: dict) -> dict | None:
    """Set configs[label]["r_n_predicted"] for every label; returns analysis.json's `prediction` (None, and every
    r_n_predicted None, when the reference's runs log no B_noise)."""
    b_noise = pool_noise_scales([run.steps for run in by_label[reference]])
    rule = configs[reference].get("lr_rule")
    others = sorted(label for label in configs if configs[label].get("lr_rule") != rule)
    for label in configs:
        configs[label]["r_n_predicted"] = None if b_noise is None or label in others else predict_samples_penalty(
            configs[label]["samples_per_update"], configs[reference]["samples_per_update"], b_noise.value)
    if b_noise is None:
        return None
    fitted = fit_noise_scale_interval(configs, reference)
    sweep_s = sum(_compute_s(run) for runs in by_label.values() for run in runs)
    prediction_s = _compute_s(min(by_label[reference], key=lambda run: run.seed))
    return {"label": reference, "b_noise": b_noise.to_json(), "b_noise_steps": b_noise.steps,
            "b_noise_unresolved_steps": b_noise.unresolved_steps, "b_noise_fitted": None if fitted is None else fitted.value,
            "b_noise_fitted_low": None if fitted is None else fitted.low,
            "b_noise_fitted_high": None if fitted is None else fitted.high,
            "prediction_compute_s": prediction_s, "sweep_compute_s": sweep_s,
            "compute_fraction": prediction_s / sweep_s if sweep_s > 0 else None,
            "lr_rule": rule, "other_rule_labels": others}


def fitted_noise_scale(configs: dict, reference: str) -> float | None:
    """The B_noise whose rN(B) curve fits the sweep's measured rN best (analysis.noise_fit): the value the one-run
    estimate is checked against. None without a measured rN of another label of the reference's lr rule, or when
    the best fit lies at the search range's end (the measured rN do not grow with B, or grow faster than it can)."""
    fitted = fit_noise_scale_interval(configs, reference)
    return None if fitted is None else fitted.value


def compare_best(analysis: dict, plan: dict) -> dict:
    """Predicted best (smallest rN_predicted / measured q gain among the plan's eligible rows) and measured best."""
    scored = [(analysis["configs"][row["label"]].get("r_n_predicted") / row["throughput_gain"], row["label"])
              for row in plan["rows"]
              if row["eligible"] and analysis["configs"].get(row["label"], {}).get("r_n_predicted") is not None]
    return {"predicted": min(scored)[1] if scored else None, "measured": plan.get("best")}


def prediction_lines(analysis: dict) -> list[str]:
    """Markdown: predicted vs measured rN for every label, and where B_noise came from."""
    prediction = analysis.get("prediction")
    if not prediction:
        return ["## Predicted from one run", "",
                "The reference's runs log no `gns/b_noise`, so rN was not predicted (runs trained by batchscale log it)."]
    b_noise = prediction["b_noise"]
    lines = ["## Predicted from one run", "",
             f"B_noise of {markdown_text(prediction['label'])} (the ratio of the per-step estimates' means over its runs' "
             "second halves): "
             f"{describe_noise_scale(b_noise)}; rN_predicted = (1 + B/B_noise) / (1 + B_ref/B_noise), B in samples "
             f"per update. Fitted to the sweep's measured rN instead: {fitted_text(prediction)}.", "",
             "| label | B | rN measured | rN predicted |", "|---|---|---|---|"]
    for label in _by_batch(analysis):
        config = analysis["configs"][label]
        lines.append(f"| {markdown_text(label)} | {config['samples_per_step']} | {_fmt(config['r_n'])} | "
                     f"{_fmt(config.get('r_n_predicted'))} |")
    if prediction.get("other_rule_labels"):
        lines += ["", markdown_text(family_note(prediction))]
    return lines


def family_note(prediction: dict) -> str:
    """Why the labels of another lr rule have no prediction ("" when every label shares the reference's)."""
    others = prediction.get("other_rule_labels") or []
    if not others:
        return ""
    return (f"Not predicted, not ranked: {', '.join(others)} (another lr rule than the reference's "
            f"{prediction.get('lr_rule') or 'unknown'}). The formula holds along the reference's lr family, each batch "
            "at its retuned learning rate; a fixed-LR control is not a point it speaks for.")


def closing_note(analysis: dict, plan: dict) -> str | None:
    """One paragraph: predicted vs measured rN for every label, the predicted and the measured best, and the
    compute the prediction needed as a fraction of the sweep's; None when nothing was predicted."""
    prediction = analysis.get("prediction")
    if not prediction:
        return None
    pairs = ", ".join(f"{label} {_fmt(analysis['configs'][label].get('r_n_predicted'))} vs "
                      f"{_fmt(analysis['configs'][label]['r_n'])}" for label in _by_batch(analysis))
    best = compare_best(analysis, plan)
    fraction = prediction.get("compute_fraction")
    cost = (f"{fraction:.1%} of the sweep's compute (summed time/step)" if fraction is not None
            else "an untimed share of the sweep")
    return (f"Predicted from one run (B_noise {format_samples(prediction['b_noise']['value'])}, from "
            f"{prediction['label']}; fitted to the measured rN: {fitted_text(prediction)}): rN predicted vs "
            f"measured: {pairs}. Predicted best: {best['predicted'] or 'none'} "
            f"(rN predicted over the measured throughput gain, among the reference's lr family); measured best: "
            f"{best['measured'] or 'none'}. The prediction needed one run of the reference, {cost}."
            + (f" {family_note(prediction)}" if prediction.get("other_rule_labels") else ""))


def plot_predicted_penalty(ax, analysis: dict) -> None:
    """Draw rN_predicted against B on the rN figure's axes (nothing when not predicted)."""
    points = sorted((config["samples_per_step"], config["r_n_predicted"]) for config in analysis["configs"].values()
                    if config.get("r_n_predicted") is not None)
    if points:
        b_noise = analysis["prediction"]["b_noise"]["value"]
        ax.plot([b for b, _ in points], [r for _, r in points], "s--", color="0.4", mfc="none",
                label=f"predicted from B_noise {format_samples(b_noise)}")


def fitted_text(prediction: dict) -> str:
    """The sweep-fitted B_noise beside the one-run estimate: the value, its interval, their ratio and whether the
    two intervals overlap."""
    fitted, estimate = prediction.get("b_noise_fitted"), prediction["b_noise"]
    if fitted is None:
        return "no fit (no other measured rN of the reference's lr rule, or rN not growing with B)"
    low, high = prediction.get("b_noise_fitted_low"), prediction.get("b_noise_fitted_high")
    interval = ("no interval (no label with 2 seeds at the target)" if low is None and high is None
                else f"80% interval {_end(low, 'open')} to {_end(high, 'open')}")
    text = f"B_noise {fitted:,.0f} samples ({interval})"
    if estimate["value"] is not None:
        text += f", the one-run estimate {estimate['value'] / fitted:.2f}x it"
        if low is not None or high is not None:
            apart = ((high is not None and estimate["low"] is not None and estimate["low"] > high)
                     or (low is not None and estimate["high"] is not None and estimate["high"] < low))
            text += "; the two intervals " + ("do not overlap" if apart else "overlap")
    return text


def _end(value: float | None, open_text: str) -> str:
    return open_text if value is None else f"{value:,.0f}"


def format_samples(b_noise: float | None) -> str:
    """A B_noise for text: null (infinite) says the run did not resolve it."""
    return "unresolved (infinite: pure noise at the run's batch)" if b_noise is None else f"{b_noise:,.0f} samples"


def describe_noise_scale(b_noise: dict) -> str:
    """{value, low, high} as text, with the interval's meaning."""
    what = ("10th-90th percentile over steps" if b_noise.get("method") == "ema median" or not b_noise.get("method")
            else "80% interval")
    return (f"{format_samples(b_noise['value'])} ({what}: {format_samples(b_noise['low'])} "
            f"to {format_samples(b_noise['high'])})")


def _compute_s(run: LoadedRun) -> float:
    return sum(r["time/step"] for r in run.steps
               if isinstance(r.get("time/step"), (int, float)) and math.isfinite(r["time/step"]))


def _by_batch(analysis: dict) -> list[str]:
    return sorted(analysis["configs"], key=lambda label: (analysis["configs"][label]["samples_per_step"], label))


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3g}"
