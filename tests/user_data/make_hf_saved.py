"""Writes tests/user_data/hf_saved/: a tiny dataset in TRL's conversational prompt-only shape (`prompt` as chat
messages, the answer in `solution`, as trl.rewards.accuracy_reward reads it), saved by the `datasets` library itself
as a DatasetDict with `save_to_disk`, so tests/test_data_shapes.py reads exactly what users' saved datasets hold.

    pip install --target /tmp/ds datasets==5.2.0 && PYTHONPATH=/tmp/ds python tests/user_data/make_hf_saved.py

(datasets is not a dependency of batchscale, which reads the directory with pyarrow: tasks/data_files.py.)
"""

from pathlib import Path

import datasets


def rows(start: int, count: int) -> list[dict]:
    return [{"prompt": [{"role": "user", "content": f"{a}+{b}?"}], "solution": str(a + b), "id": a * 10 + b}
            for a, b in ((i // 10, i % 10) for i in range(start, start + count))]


def dataset(split: str, rows: list[dict]) -> datasets.Dataset:
    """A Dataset of `rows`, its fingerprint given (datasets 5.2.0's own fingerprint hashes pyarrow's types with dill,
    which fails on pyarrow 26's MonthDayNano: a fingerprint names a cache entry and is not what this fixture tests)."""
    table = datasets.table.InMemoryTable.from_pylist(rows)
    return datasets.Dataset(table, split=split, fingerprint=f"batchscale-fixture-{split}")


if __name__ == "__main__":
    out = Path(__file__).parent / "hf_saved"
    saved = datasets.DatasetDict({"train": dataset("train", rows(0, 12)), "test": dataset("test", rows(50, 4))})
    saved.save_to_disk(str(out))
    print(f"datasets {datasets.__version__}: wrote {out}")
