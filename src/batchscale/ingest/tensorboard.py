"""Read scalar summaries from TensorBoard event files (verl, OpenRLHF, or TRL via the Hugging Face Trainer) with the
`tensorboard` package (the `import` extra: `pip install 'batchscale[import]'`), which needs neither TensorFlow nor torch.

Records are read with tensorboard's own TFRecord reader (its TensorFlow stub, `PyRecordReader_New`: length and payload
CRCs checked) and decoded as `event_pb2.Event`. A scalar is a summary value's `simple_value` (torch's SummaryWriter, as
verl and OpenRLHF use it) or a one-element numeric tensor (`new_style` and TF2 writers); histograms, text and images are
skipped. A record cut short at the end of a file (the writer was killed) is tolerated and reported; a file whose first
record fails the header check is not an event file; a damaged record inside a file is an error naming it.

A directory is searched recursively for `events.out.tfevents.*`; files of one run (one directory, e.g. a resumed run)
are merged in file-name order, and event files in several directories are refused as several runs. The key style
(verl, OpenRLHF `train/`/`eval/`, TRL) is detected from the tags. wall_s comes from the per-step time when logged, else
from event times relative to the first event of the run (the writer's file-version record, written at start-up).
"""

from __future__ import annotations

from pathlib import Path

from batchscale.errors import UserError
from batchscale.ingest.common import ParsedLog, RawRow, detect_style, normalize_trl_keys

NOT_EVENTS_FIX = "pass a run's events.out.tfevents.* file or directory; is FORMAT right?"


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


def read_scalars(event, tensor_util) -> dict[str, float]:
    """{tag: value} of the scalar summaries of one Event."""
    scalars = {}
    for value in event.summary.value:
        kind = value.WhichOneof("value")
        if kind == "simple_value":
            scalars[value.tag] = float(value.simple_value)
        elif kind == "tensor":
            try:
                array = tensor_util.make_ndarray(value.tensor)
            except (TypeError, ValueError):
                continue
            if array.size == 1 and array.dtype.kind in "fiub":
                scalars[value.tag] = float(array.reshape(-1)[0])
    return scalars


def find_event_files(path: Path) -> list[Path]:
    """The event files of one run under `path` (a file or a directory)."""
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob("events.out.tfevents.*") if p.is_file())
    if not files:
        raise UserError(str(path), "no events.out.tfevents.* files found", "pass the run's TensorBoard log directory")
    run_dirs = sorted({str(p.parent) for p in files})
    if len(run_dirs) > 1:
        raise UserError(str(path), f"holds event files of {len(run_dirs)} runs ({', '.join(run_dirs[:4])})",
                        "import one run at a time: pass the directory of that run")
    return files


def read_tensorboard(path: Path) -> ParsedLog:
    """Parse a run's event files into rows (one per event with scalars) and detect the key style."""
    files = find_event_files(path)
    tensor_util = load_tensorboard()[3]
    problems: list[str] = []
    rows, start_time_s = [], None
    for file in files:
        if file.stat().st_size == 0:
            problems.append(f"{file.name}: empty event file skipped")
            continue
        for index, event in iter_events(file, problems):
            if event.wall_time and (start_time_s is None or event.wall_time < start_time_s):
                start_time_s = event.wall_time
            scalars = read_scalars(event, tensor_util)
            if scalars:
                rows.append(RawRow(step=int(event.step), metrics=scalars, where=f"{file.name} event {index}",
                                   time_s=event.wall_time))
    if not rows:
        raise UserError(str(path), "no scalar events: the event files are empty or hold no scalars",
                        "pass the TensorBoard directory of a run that logged at least one step")
    style, trl_rewritten = detect_style({tag for row in rows for tag in row.metrics})
    if not style:
        raise UserError(str(path), "no tag matches verl, OpenRLHF or TRL names",
                        "check the run's logger; the recognised tags are listed in docs/IMPORT.md")
    if trl_rewritten:
        for row in rows:
            row.metrics = normalize_trl_keys(row.metrics)
    parsed = ParsedLog(rows=rows, style=style, start_time_s=start_time_s, problems=problems, shape="TensorBoard events")
    if len(files) > 1:
        parsed.notes.append(f"merged {len(files)} event files of one run (a resumed run?) in file-name order")
    return parsed
