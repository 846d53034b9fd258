"""Read scalar summaries from TensorBoard event files (verl, OpenRLHF, or TRL via the Hugging Face Trainer) without
TensorBoard, TensorFlow or torch.

Why our own reader: analysis users must be able to import a run on a laptop without the training stack (DESIGN.md), and
the `tensorboard` package pulls in protobuf, grpcio and werkzeug to read what is, for scalars, ~100 lines of format:
- TFRecord framing: uint64 length, uint32 masked CRC-32C of the length, the bytes, uint32 masked CRC-32C of the bytes.
  We verify the length's CRC (8 bytes: cheap, and it rejects a file that is not an event file at the first record);
  the payload CRC is not verified (pure-Python CRC-32C over a large log is slow). A record cut short at the end of the
  file (the writer was killed) is tolerated and reported.
- protobuf `Event{wall_time=1 double, step=2 int64, summary=5 Summary{value=1 repeated Value{tag=1, simple_value=2,
  tensor=8 TensorProto{dtype=1, tensor_content=4, float_val=5, double_val=6, int_val=7, int64_val=10}}}}`.
  torch's SummaryWriter (verl, OpenRLHF) writes `simple_value`; `new_style` and TF2 writers write a scalar tensor.
  Non-scalar summaries (histograms, text, images) are skipped.
The tests cross-check this reader against files written by torch's SummaryWriter and by the tensorboard package.

A directory is searched recursively for `events.out.tfevents.*`; files of one run (one directory, e.g. a resumed run)
are merged in file-name order, and event files in several directories are refused as several runs. The key style
(verl, OpenRLHF `train/`/`eval/`, TRL) is detected from the tags. wall_s comes from the per-step time when logged, else
from event times relative to the first event of the run (the writer's file-version record, written at start-up).
"""

from __future__ import annotations

import struct
from pathlib import Path

from batchscale.errors import UserError
from batchscale.ingest.common import ParsedLog, RawRow, detect_style, normalize_trl_keys

CRC32C_TABLE = []
for _byte in range(256):
    _crc = _byte
    for _ in range(8):
        _crc = (_crc >> 1) ^ 0x82F63B78 if _crc & 1 else _crc >> 1
    CRC32C_TABLE.append(_crc)

NUMERIC_DTYPES = {1: "<f", 2: "<d", 3: "<i", 9: "<q", 19: "<e"}  # DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64, DT_HALF


def compute_masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C (Castagnoli) of `data`."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def iter_tfrecords(data: bytes, path: Path, problems: list[str]):
    """Yield the payload of each TFRecord in `data`; a record cut short at the end is reported and ends iteration."""
    offset = 0
    while offset < len(data):
        if len(data) - offset < 12:
            problems.append(f"{path.name}: the last record is truncated ({len(data) - offset} bytes) and was skipped")
            return
        header = data[offset:offset + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[offset + 8:offset + 12])
        if compute_masked_crc32c(header) != length_crc:
            raise UserError(str(path), f"not a TensorBoard event file (bad record header at byte {offset})",
                            "pass a run's events.out.tfevents.* file or directory; is FORMAT right?")
        if offset + 12 + length + 4 > len(data):
            problems.append(f"{path.name}: the last record is truncated and was skipped")
            return
        yield data[offset + 12:offset + 12 + length]
        offset += 12 + length + 4


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """(value, next position) of a protobuf varint."""
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def iter_fields(buf: bytes):
    """Yield (field number, wire type, value) of a protobuf message; length-delimited values are bytes."""
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = read_varint(buf, pos)
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, wire, value


def decode_tensor_scalar(buf: bytes) -> float | None:
    """The value of a one-element numeric TensorProto, else None."""
    dtype, values = None, []
    for number, wire, value in iter_fields(buf):
        if number == 1:
            dtype = value
        elif number == 4:
            values.append(("content", value))
        elif number in (5, 6):  # float_val / double_val: packed (wire 2) or one value (wire 5 / 1)
            fmt = "<f" if number == 5 else "<d"
            size = struct.calcsize(fmt)
            values += [("v", x) for (x,) in struct.iter_unpack(fmt, value)] if len(value) % size == 0 else []
        elif number in (7, 10):  # int_val / int64_val
            if wire == 0:
                values.append(("v", value))
            else:
                pos = 0
                while pos < len(value):
                    item, pos = read_varint(value, pos)
                    values.append(("v", item))
    if dtype not in NUMERIC_DTYPES or len(values) != 1:
        return None
    kind, value = values[0]
    if kind == "content":
        fmt = NUMERIC_DTYPES[dtype]
        return float(struct.unpack(fmt, value)[0]) if len(value) == struct.calcsize(fmt) else None
    return float(value)


def decode_event(buf: bytes) -> tuple[float, int, dict[str, float]]:
    """(wall_time, step, {tag: scalar}) of one serialized Event."""
    wall_time, step, scalars = 0.0, 0, {}
    for number, _, value in iter_fields(buf):
        if number == 1:
            (wall_time,) = struct.unpack("<d", value)
        elif number == 2:
            step = value
        elif number == 5:
            for value_number, _, summary_value in iter_fields(value):
                if value_number != 1:
                    continue
                tag, scalar = None, None
                for field_number, _, field_value in iter_fields(summary_value):
                    if field_number == 1:
                        tag = field_value.decode("utf-8", errors="replace")
                    elif field_number == 2:
                        (scalar,) = struct.unpack("<f", field_value)
                    elif field_number == 8:
                        scalar = decode_tensor_scalar(field_value)
                if tag is not None and scalar is not None:
                    scalars[tag] = scalar
    return wall_time, step, scalars


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
    problems: list[str] = []
    rows, start_time_s = [], None
    for file in files:
        data = file.read_bytes()
        if not data:
            problems.append(f"{file.name}: empty event file skipped")
            continue
        for index, payload in enumerate(iter_tfrecords(data, file, problems)):
            try:
                wall_time, step, scalars = decode_event(payload)
            except (ValueError, IndexError, struct.error):
                problems.append(f"{file.name}: event {index} could not be decoded and was skipped")
                continue
            if wall_time and (start_time_s is None or wall_time < start_time_s):
                start_time_s = wall_time
            if scalars:
                rows.append(RawRow(step=step, metrics=scalars, where=f"{file.name} event {index}", time_s=wall_time))
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
    parsed = ParsedLog(rows=rows, style=style, start_time_s=start_time_s, problems=problems)
    if len(files) > 1:
        parsed.notes.append(f"merged {len(files)} event files of one run (a resumed run?) in file-name order")
    return parsed
