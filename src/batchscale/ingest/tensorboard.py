"""Read scalar summaries from TensorBoard event files (verl, OpenRLHF, or TRL via the Hugging Face Trainer) with the
`tensorboard` package (the `import` extra: `pip install 'batchscale[import]'`), which needs neither TensorFlow nor torch.

Records are read with tensorboard's own TFRecord reader (its TensorFlow stub, `PyRecordReader_New`: length and payload
CRCs checked) and decoded as `event_pb2.Event`. A scalar is a summary value's `simple_value` (torch's SummaryWriter, as
verl and OpenRLHF use it) or a one-element numeric tensor (`new_style` and TF2 writers); histograms, text and images are
skipped. A record cut short at the end of a file (the writer was killed) is tolerated and reported; a file whose first
record fails the header check is not an event file; a damaged record inside a file is an error naming it.

A directory is searched recursively for `events.out.tfevents.*`. Its files are one run only when each later file
continues the one before it, as a resumed run's do (runs.py: the same config, no fresh start at step 0 or 1, no gap,
the same eval data); files of several runs are refused, naming each run's files and how to import each. The key
style (verl, OpenRLHF `train/`/`eval/`, TRL) is detected from the tags. wall_s comes from the per-step time when
logged, else from event times relative to the first event of the run (the writer's file-version record, written at
start-up).

Text summaries are read too (a string tensor, as `SummaryWriter.add_text` writes it): the Hugging Face Trainer's
TensorBoardCallback writes the run's arguments as JSON under `args` (tag `args/text_summary`: for TRL, its whole
GRPOConfig), which becomes the run's config, with the precedence of a config file (batch_size.py); at most
MAX_TEXT_CHARS of each text.
"""

from __future__ import annotations

import json
from pathlib import Path

from batchscale.errors import UserError
from batchscale.ingest.common import ParsedLog, RawRow, detect_style, normalize_trl_keys
from batchscale.ingest.frameworkconfig import flatten_mapping
from batchscale.ingest.runs import Piece, group_runs, several_runs_error
from batchscale.ingest.trl_batch import COMPLETE

NOT_EVENTS_FIX = "pass a run's events.out.tfevents.* file or directory; is FORMAT right?"
CONFIG_TEXT_TAGS = ("args/text_summary",)  # transformers' TensorBoardCallback: add_text("args", args.to_json_string())
MAX_TEXT_CHARS = 2**20
SEVERAL_RUNS_FIX = ("import each run on its own: pass its event file (batchscale import tensorboard DIR/<file>), or "
                    "move a run's files into a directory of their own")


def load_tensorboard():
    """The tensorboard modules the reader uses; a UserError naming the extra when the package is missing."""
    try:
        from tensorboard.compat.proto import event_pb2
        from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow
        from tensorboard.util import tensor_util
    except ImportError:
        raise UserError("tensorboard", "reading event files needs the tensorboard package",
                        "pip install 'batchscale[import]' (or pip install tensorboard)") from None
    return event_pb2, errors, pywrap_tensorflow, tensor_util


def iter_events(file: Path, problems: list[str]):
    """Yield (index, Event) of one event file; see the module docstring for damaged records."""
    event_pb2, errors, pywrap_tensorflow, _ = load_tensorboard()
    reader = pywrap_tensorflow.PyRecordReader_New(str(file), 0, None, None)
    index = 0
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return
        except errors.DataLossError as e:
            if "truncated" in str(e) and index > 0:
                problems.append(f"{file.name}: the last record (event {index}) is truncated and was skipped")
                return
            if index == 0:
                raise UserError(str(file), "not a TensorBoard event file (its first record fails the check)",
                                NOT_EVENTS_FIX) from None
            raise UserError(f"{file}: event {index}", "the record fails its CRC check (the file is damaged)",
                            "restore the file, or cut it before the damaged record") from None
        try:
            yield index, event_pb2.Event.FromString(reader.record())
        except Exception:  # google.protobuf.message.DecodeError: a record that is not an Event
            problems.append(f"{file.name}: event {index} could not be decoded and was skipped")
        index += 1


def read_scalars(event, tensor_util, texts: dict | None = None) -> dict[str, float]:
    """{tag: value} of the scalar summaries of one Event; text summaries go to `texts` ({tag: text})."""
    scalars = {}
    for value in event.summary.value:
        kind = value.WhichOneof("value")
        if kind == "simple_value":
            scalars[value.tag] = float(value.simple_value)
        elif kind == "tensor" and value.tensor.string_val:
            if texts is not None and len(value.tensor.string_val) == 1:
                texts[value.tag] = value.tensor.string_val[0][:MAX_TEXT_CHARS].decode("utf-8", errors="replace")
        elif kind == "tensor":
            try:
                array = tensor_util.make_ndarray(value.tensor)
            except (TypeError, ValueError):
                continue
            if array.size == 1 and array.dtype.kind in "fiub":
                scalars[value.tag] = float(array.reshape(-1)[0])
    return scalars


def config_from_texts(texts: dict[str, str]) -> dict:
    """The flattened run config a file carries as text (TRL's arguments as JSON), {} when none."""
    for tag in CONFIG_TEXT_TAGS:
        try:
            value = json.loads(texts.get(tag, ""))
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(value, dict):
            try:
                return {**flatten_mapping(value), COMPLETE: True}  # every field of the arguments' dataclass
            except ValueError:
                continue
    return {}


def find_event_files(path: Path) -> list[Path]:
    """The event files under `path` (a file or a directory), by name."""
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob("events.out.tfevents.*") if p.is_file())
    if not files:
        raise UserError(str(path), "no events.out.tfevents.* files found", "pass the run's TensorBoard log directory")
    return files


def read_event_file(file: Path, name: str, tensor_util, problems: list[str]) -> Piece:
    """One event file as a Piece: its rows (one per event with scalars), start time and the config it carries."""
    rows, texts, start_time_s = [], {}, None
    if file.stat().st_size == 0:
        problems.append(f"{name}: empty event file skipped")
        return Piece(name=name, rows=rows)
    for index, event in iter_events(file, problems):
        if event.wall_time and (start_time_s is None or event.wall_time < start_time_s):
            start_time_s = event.wall_time
        scalars = read_scalars(event, tensor_util, texts)
        if scalars:
            rows.append(RawRow(step=int(event.step), metrics=scalars, where=f"{name} event {index}",
                               time_s=event.wall_time))
    return Piece(name=name, rows=rows, start_time_s=start_time_s, config=config_from_texts(texts))


def read_tensorboard(path: Path, style: str | None = None) -> ParsedLog:
    """Parse a run's event files into rows and detect the key style (unless `style` names it); files of several runs
    are refused (runs.py)."""
    files = find_event_files(path)
    tensor_util = load_tensorboard()[3]
    problems: list[str] = []
    pieces = [read_event_file(file, str(file.relative_to(path)) if path.is_dir() else file.name, tensor_util,
                              problems) for file in files]
    pieces = [piece for piece in pieces if piece.rows]
    if not pieces:
        raise UserError(str(path), "no scalar events: the event files are empty or hold no scalars",
                        "pass the TensorBoard directory of a run that logged at least one step")
    detected, trl_rewritten = detect_style({tag for piece in pieces for row in piece.rows for tag in row.metrics})
    if style is not None:
        detected, trl_rewritten = style, False
    style = detected
    if not style:
        raise UserError(str(path), "no tag matches verl, OpenRLHF or TRL names",
                        "check the run's logger; the recognised tags are listed in docs/IMPORT.md")
    if trl_rewritten:
        for row in (row for piece in pieces for row in piece.rows):
            row.metrics = normalize_trl_keys(row.metrics)
    runs, reasons = group_runs(style, pieces)
    if len(runs) > 1:
        raise several_runs_error(str(path), style, runs, reasons, SEVERAL_RUNS_FIX)
    run = runs[0]
    start_times = [piece.start_time_s for piece in run if piece.start_time_s is not None]
    parsed = ParsedLog(rows=[row for piece in run for row in piece.rows], style=style,
                       start_time_s=min(start_times) if start_times else None, problems=problems,
                       shape="TensorBoard events")
    configured = next((piece for piece in run if piece.config), None)
    if configured is not None:
        parsed.config = configured.config
        parsed.config_path = f"{path / configured.name if path.is_dir() else path} ({CONFIG_TEXT_TAGS[0]})"
    if len(run) > 1:
        parsed.notes.append(f"merged {len(run)} event files of one run (a resumed run: each continues the one "
                            f"before it) in start order: {', '.join(piece.name for piece in run)}")
    return parsed
