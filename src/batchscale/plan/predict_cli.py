"""`batchscale predict RUN_DIR`: rN and q of other batch sizes predicted from ONE run's gradient noise scale, before any
sweep (the library is `plan.predict`; `--json` prints `rundir.PredictionDocument`). Writes no files. Its memory
options are declared once, with `batchscale plan`'s (plan.options).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from batchscale.errors import UserError
from batchscale.plan.options import (DEFAULT_CONTEXT, DEFAULT_MEM_UTIL, ContextOption, GenerationProfileOption,
                                     HardwareOption, JsonOption, MemUtilOption, ModelOption)


def show_prediction(run_dir: Path, batches: str | None, generation_profile: Path | None,
                    training_profile: Path | None, model: str | None, hardware: str | None, context: int,
                    mem_util: float, json_out: bool) -> None:
    """Predict from `run_dir` and print the document (JSON) or its table."""
    from batchscale.plan.predict import RooflineInputs, predict_from_run
    from batchscale.plan.predict_print import print_prediction

    if (model is None) != (hardware is None):
        raise UserError("--model/--hardware", "the memory check needs both", "pass both, or neither")
    roofline = RooflineInputs(model, hardware, context, mem_util) if model is not None else None
    document = predict_from_run(run_dir, batches, generation_profile, training_profile, roofline)
    if json_out:
        sys.stdout.write(json.dumps(document.to_json(), indent=2) + "\n")
    else:
        print_prediction(document)
    from batchscale.plan.doubts import echo_doubts, run_doubts  # on stderr: --json keeps stdout to the document

    echo_doubts(run_doubts(run_dir, training_profile, generation_profile))


def predict(
    run_dir: Annotated[Path, typer.Argument(help="ONE run directory whose steps logged gns/* (any batchscale run).")],
    batches: Annotated[
        Optional[str], typer.Option("--batches", help="Samples per step to predict, e.g. 64,128,256 (default: "
                                                      "the run's batch x 1/4 .. 16).")
    ] = None,
    generation_profile: GenerationProfileOption = None,
    training_profile: Annotated[
        Optional[Path], typer.Option("--training-profile", help="`profile training --json` output: its cost fit "
                                                                "carries training time to each batch.")
    ] = None,
    model: ModelOption = None,
    hardware: HardwareOption = None,
    context: ContextOption = DEFAULT_CONTEXT,
    mem_util: MemUtilOption = DEFAULT_MEM_UTIL,
    json_out: JsonOption = False,
) -> None:
    """Predict rN(B) = (1 + B/B_noise) / (1 + B_ref/B_noise), q(B) and T/T_ref for other batches from one run, before
    any sweep, and name the predicted best batch with its interval."""
    show_prediction(run_dir, batches, generation_profile, training_profile, model, hardware, context, mem_util,
                    json_out)
