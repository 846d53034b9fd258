"""Read the values inside a pickle without running it: `pickletools.genops` decodes the opcodes and a small stack
machine builds a tree of plain values. Never `pickle.load`, never `torch.load`: nothing in the file is imported or
called.

What a `torch.save` of a Hugging Face `TrainingArguments` / TRL `GRPOConfig` holds (`training_args.bin`, saved by
`Trainer._save`): a zip with `<name>/data.pkl` (torch's format since 1.6; a plain pickle before, or with
`_use_new_zipfile_serialization=False`), protocol 2: the config dataclass as `GLOBAL cls, EMPTY_TUPLE, NEWOBJ` with its
`__dict__` set by `BUILD`; enums (`IntervalStrategy`, `SchedulerType`, ...) as `GLOBAL cls, (value,), REDUCE`; nested
dataclasses (`AcceleratorConfig`, accelerate's `PartialState`) the same way, and `torch.device('cpu')` as a REDUCE.

In the tree, an object is an `Instance(cls, args, state)` and a global only a `Global(module, name)` name. A call
(`REDUCE`, `NEWOBJ`, `NEWOBJ_EX`, `INST`, `OBJ`) of anything outside ALLOWED_MODULES and ALLOWED_GLOBALS (configuration classes and enums
of transformers, TRL, accelerate, peft, Unsloth's compiled trainers (`UnslothGRPOTrainer.UnslothGRPOConfig`), vLLM's
`SamplingParams` (an Unsloth config field); `torch.device`, `OrderedDict`, `set`, paths, `timedelta`) is refused with
an error naming it,
so a crafted file (`__reduce__` returning `os.system`) is rejected, and even then nothing would have run. Opcodes
outside the table (extension registry, `PERSID`: tensors) are refused too.

Every size is capped, since a small file can describe a huge value: the file (MAX_FILE_BYTES) and its opcodes
(MAX_OPCODES), so no container is wider than that; an integer wider than 64 bits (a 5,000-digit batch size) is
refused; a zip member must be stored or deflated (torch.save stores), unencrypted, and no larger than MAX_FILE_BYTES
by its declared size and by what it really expands to (a zip bomb stops there); and `plain`, which expands shared
references (a memo GET) into copies, stops at MAX_VALUES values and MAX_TEXT_CHARS characters in all, so forty
nested lists that each hold the previous twice (2^40 leaves from 500 bytes) are refused at once, not expanded.
"""

from __future__ import annotations

import io
import pickletools
import re
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from batchscale.errors import UserError
from batchscale.ingest.inputs import read_input_bytes

MAX_FILE_BYTES = 32 * 2**20  # a training_args.bin is a few kB
MAX_OPCODES = 200_000
ALLOWED_MODULES = ("transformers.", "trl.", "accelerate.", "peft.", "unsloth.", "unsloth_zoo.",
                   "unsloth_compiled_cache.", "vllm.sampling_params")
# Unsloth compiles its config classes (UnslothGRPOConfig, a subclass of TRL's GRPOConfig) into a module of the same
# name as the trainer, imported from unsloth_compiled_cache/ on sys.path: pickled as `UnslothGRPOTrainer`
UNSLOTH_COMPILED = re.compile(r"^Unsloth\w*Trainer$")
ALLOWED_GLOBALS = frozenset({("torch", "device"), ("collections", "OrderedDict"), ("builtins", "set"),
                             ("builtins", "frozenset"), ("datetime", "timedelta"),  # value types, never code
                             ("pathlib", "PosixPath"), ("pathlib", "WindowsPath"), ("pathlib", "PurePosixPath")})
MAX_DEPTH = 64
MAX_VALUES = 100_000  # values in the expanded tree: a TrainingArguments holds a few hundred
MAX_TEXT_CHARS = 16 * 2**20  # characters of text in the expanded tree
MAX_INT_BITS = 64
ZIP_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}
MARK = object()


@dataclass(frozen=True)
class Global:
    module: str
    name: str

    def __str__(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass
class Instance:
    cls: Global
    args: tuple = ()
    state: dict = field(default_factory=dict)


def allowed(callable_) -> bool:
    return isinstance(callable_, Global) and (callable_.module.startswith(ALLOWED_MODULES) or
                                              (callable_.module, callable_.name) in ALLOWED_GLOBALS or
                                              bool(UNSLOTH_COMPILED.match(callable_.module)))


def read_pickle_bytes(path: Path) -> bytes:
    """The pickle inside `path`: the one `*/data.pkl` of a torch zip, else the file itself (see module docstring for
    what a zip member must be)."""
    data = read_input_bytes(path, MAX_FILE_BYTES)
    if not zipfile.is_zipfile(io.BytesIO(data)):
        return data
    fix = "pass the training_args.bin the Trainer saved"
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = [info for info in archive.infolist() if info.filename.endswith("data.pkl")]
            if len(members) != 1:
                raise UserError(str(path), "a zip without exactly one data.pkl (torch.save's layout)", fix)
            member = members[0]
            if member.flag_bits & 0x1:
                raise UserError(str(path), f"its {member.filename} is encrypted; refused", fix)
            if member.compress_type not in ZIP_METHODS:
                raise UserError(str(path), f"its {member.filename} is compressed with method {member.compress_type} "
                                f"(torch.save stores, and this reads only {' or '.join(ZIP_METHODS.values())}); "
                                "refused", fix)
            if member.file_size > MAX_FILE_BYTES:
                raise UserError(str(path), f"its {member.filename} declares {member.file_size:,} bytes, more than "
                                f"the {MAX_FILE_BYTES:,} a training_args.bin may hold; refused", fix)
            with archive.open(member) as stream:
                content = stream.read(MAX_FILE_BYTES + 1)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, RuntimeError, NotImplementedError, EOFError, OSError,
            zlib.error, ValueError) as e:  # a CRC or size that does not match, a torn archive
        raise UserError(str(path), f"not a readable zip ({type(e).__name__}: {str(e)[:160]})", fix) from None
    if len(content) > MAX_FILE_BYTES:
        raise UserError(str(path), f"its data.pkl expands past the {MAX_FILE_BYTES:,} bytes a training_args.bin may "
                        "hold (a zip bomb?); refused", fix)
    return content


def read_pickle_tree(path: Path):
    """The value tree of the pickle in `path` (see module docstring); UserError for anything outside it."""
    data = read_pickle_bytes(path)
    stack: list = []
    memo: dict = {}

    def refuse(rule: str):
        raise UserError(str(path), rule + "; refused, nothing in it was run",
                        "pass the training_args.bin a Hugging Face / TRL Trainer saved")

    def pop_mark() -> list:
        for index in range(len(stack) - 1, -1, -1):
            if stack[index] is MARK:
                items = stack[index + 1:]
                del stack[index:]
                return items
        refuse("a pickle MARK is missing")

    def call(callable_, args):
        if not allowed(callable_):
            refuse(f"it calls {callable_}, which is not a known configuration class")
        return Instance(callable_, tuple(args) if isinstance(args, (tuple, list)) else ())

    try:
        for count, (opcode, arg, _) in enumerate(pickletools.genops(data)):
            if count > MAX_OPCODES:
                refuse(f"more than {MAX_OPCODES} pickle opcodes")
            name = opcode.name
            if name in ("PROTO", "FRAME"):
                continue
            if name == "STOP":
                return stack.pop() if stack else None
            if name == "MARK":
                stack.append(MARK)
            elif name in ("INT", "LONG", "LONG1", "LONG4") and isinstance(arg, int) and arg.bit_length() > MAX_INT_BITS:
                refuse(f"it holds an integer of {arg.bit_length():,} bits, wider than any training argument")
            elif name in ("BININT", "BININT1", "BININT2", "INT", "LONG", "LONG1", "LONG4", "BINFLOAT", "FLOAT",
                          "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING",
                          "SHORT_BINSTRING", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8"):
                stack.append(arg)
            elif name in ("NONE", "NEWTRUE", "NEWFALSE"):
                stack.append({"NONE": None, "NEWTRUE": True, "NEWFALSE": False}[name])
            elif name in ("EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "EMPTY_SET"):
                stack.append({"EMPTY_DICT": dict, "EMPTY_LIST": list, "EMPTY_TUPLE": tuple, "EMPTY_SET": list}[name]())
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                size = int(name[-1])
                items = tuple(stack[-size:])
                del stack[-size:]
                stack.append(items)
            elif name in ("TUPLE", "LIST", "FROZENSET"):
                items = pop_mark()
                stack.append(tuple(items) if name == "TUPLE" else list(items))
            elif name == "DICT":
                items = pop_mark()
                stack.append(dict(zip(items[::2], items[1::2])))
            elif name == "APPEND":
                value = stack.pop()
                stack[-1].append(value)
            elif name in ("APPENDS", "ADDITEMS"):
                items = pop_mark()
                stack[-1].extend(items)
            elif name == "SETITEM":
                value, key = stack.pop(), stack.pop()
                stack[-1][hashable(key)] = value
            elif name == "SETITEMS":
                items = pop_mark()
                for key, value in zip(items[::2], items[1::2]):
                    stack[-1][hashable(key)] = value
            elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
                memo[arg] = stack[-1]
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
            elif name in ("BINGET", "LONG_BINGET", "GET"):
                if arg not in memo:
                    refuse(f"a pickle GET of unknown memo {arg}")
                stack.append(memo[arg])
            elif name == "GLOBAL":
                module, _, attribute = arg.partition(" ")
                stack.append(Global(module, attribute))
            elif name == "STACK_GLOBAL":
                attribute, module = stack.pop(), stack.pop()
                stack.append(Global(str(module), str(attribute)))
            elif name == "REDUCE":
                args = stack.pop()
                stack.append(call(stack.pop(), args))
            elif name == "NEWOBJ":
                args = stack.pop()
                stack.append(call(stack.pop(), args))
            elif name == "NEWOBJ_EX":
                stack.pop()  # kwargs
                args = stack.pop()
                stack.append(call(stack.pop(), args))
            elif name == "BUILD":
                state = stack.pop()
                target = stack[-1]
                if not isinstance(target, Instance):
                    refuse("a pickle BUILD on something that is not an object")
                if isinstance(state, tuple) and len(state) == 2:  # (state, slotstate)
                    state = {**(state[0] or {}), **(state[1] or {})}
                if isinstance(state, dict):
                    target.state.update(state)
            elif name == "POP":
                stack.pop()
            elif name == "POP_MARK":
                pop_mark()
            elif name == "DUP":
                stack.append(stack[-1])
            else:  # PERSID/BINPERSID (tensors), EXT*, INST/OBJ (old-style calls), ...
                refuse(f"pickle opcode {name} is not read")
    except UserError:
        raise
    except Exception as e:  # a malformed pickle: genops' ValueError, an empty stack, a non-container target
        raise UserError(str(path), f"not a readable pickle ({type(e).__name__}: {e})",
                        "pass the training_args.bin the Trainer saved") from None
    refuse("the pickle has no STOP")


def hashable(key):
    return key if isinstance(key, (str, int, float, bool, type(None))) else str(key)


class TreeTooLarge(ValueError):
    """The tree expands past MAX_VALUES values or MAX_TEXT_CHARS characters (plain)."""


def plain(value, limits: list[int] | None = None, depth: int = 0):
    """The tree as dicts, lists and scalars: an object becomes its state (fields), an enum its value; deeper than
    MAX_DEPTH (a self-reference) becomes None. Shared references are expanded into copies, so the expansion is
    counted (`limits`: values and characters left) and raises TreeTooLarge past MAX_VALUES or MAX_TEXT_CHARS."""
    limits = [MAX_VALUES, MAX_TEXT_CHARS] if limits is None else limits
    limits[0] -= 1
    if isinstance(value, (str, bytes)):
        limits[1] -= len(value)
    if limits[0] < 0 or limits[1] < 0:
        raise TreeTooLarge(f"it expands to more than {MAX_VALUES:,} values or {MAX_TEXT_CHARS:,} characters "
                           "(shared references copied)")
    if depth > MAX_DEPTH:
        return None
    if isinstance(value, Instance):
        if value.state:
            return {key: plain(item, limits, depth + 1) for key, item in value.state.items()}
        return plain(value.args[0], limits, depth + 1) if len(value.args) == 1 else \
            [plain(a, limits, depth + 1) for a in value.args]
    if isinstance(value, dict):
        return {key: plain(item, limits, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item, limits, depth + 1) for item in value]
    if isinstance(value, Global):
        return str(value)
    if isinstance(value, bytes):
        return None
    return value
