"""Every file batchscale reads or writes, in one place: the run directory (`run`) and the documents beside it
(`documents`). Torch-free: analysis, plan, ingest, report and export read runs without the training stack.

    <run>/metrics.jsonl, run.json, config.json, summary.json   run.py: RunDescriptor, RunSummary, RunLog, write_run,
                                                               read_run (the one reader and its one policy)
    <run>/samples.jsonl                                         samples.py: what the policy said at each eval
    <run>/trackers.json                                         tracker_runs.py: the tracker runs that mirror it
    <sweep>/runs/<label>__s<seed>/                              run.py: the sweep layout
    <sweep>/sweep.json                                          sweep_file.py: the points, a racing sweep's facts
    analysis.json, plan.json, profiles/generation.json,        documents.py: AnalysisDocument, PlanDocument,
    profiles/training.json, plan --predict --json              GenerationProfile, TrainingProfile, PredictionDocument

    analyze/plan --csv, --parquet                              tables.py: one row per label, units in column names
    <sweep>/sweep.lock                                          lock.py: SweepLock, one sweep per directory at a time
    staging of runs and sweep points                           staging.py: run_destination, sweep_staging_dir

A new format, or a new key in one, is added here and nowhere else.
"""

from batchscale.rundir.documents import (ANALYSIS_FILE, GENERATION_PROFILE_FILE, PLAN_FILE, TRAINING_PROFILE_FILE,
                                         AnalysisDocument, GenerationProfile, PlanDocument, PredictionDocument,
                                         TrainingProfile, read_document, write_document)
from batchscale.rundir.run import (RUNS_DIR, SCHEMA_VERSION, LoadedRun, RunDescriptor, RunLog, RunSummary,
                                   check_out_dir, find_run_dirs, is_finished_run, is_run_dir, primary_eval_score, read_run,
                                   parse_run_dir_name, run_dir_name, summarize_run, sweep_runs_dir,
                                   write_run)
from batchscale.rundir.run import StoppedRun
from batchscale.rundir.sweep_file import (RaceFacts, SweepDocument, race_target, read_sweep_document,
                                          write_sweep_points)

__all__ = [
    "ANALYSIS_FILE", "GENERATION_PROFILE_FILE", "PLAN_FILE", "RUNS_DIR", "SCHEMA_VERSION", "TRAINING_PROFILE_FILE",
    "AnalysisDocument", "GenerationProfile", "LoadedRun", "PlanDocument", "PredictionDocument", "RunDescriptor", "RunLog",
    "RunSummary", "TrainingProfile", "check_out_dir", "find_run_dirs", "is_finished_run", "is_run_dir", "primary_eval_score", "read_document",
    "read_run", "parse_run_dir_name", "run_dir_name", "summarize_run", "sweep_runs_dir", "write_document", "write_run",
    "write_sweep_points", "StoppedRun", "RaceFacts", "SweepDocument", "race_target", "read_sweep_document",
]
