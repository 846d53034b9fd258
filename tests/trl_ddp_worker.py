"""One process of tests/test_trl_ddp.py: GradientNoiseCallback under torch.distributed (gloo, CPU) with the TinyLM
wrapped in DistributedDataParallel, in tests/trl_standin.py's stand-in for GRPOTrainer's step.

argv[1] is a JSON spec: src, rank, world, port, loss_type, accumulation (K per process), rows, steps, seed, out. Every
process builds the whole step's micro-batches from the seed and trains on its own K (rank r: micro-batches r*K to
r*K + K - 1), as a single process running all P x K in sequence would. Writes out (rank 0) or out.rankN: per step the
callback's estimator inputs, the log entry, and the final parameters.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    spec = json.loads(sys.argv[1])
    sys.path.insert(0, spec["src"])
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from transformers import TrainerState

    from batchscale.integrations.trl import GradientNoiseCallback
    from trl_standin import TinyLM, log, make_micro_batches, run_step, trainer_args

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(spec["port"]))
    dist.init_process_group("gloo", rank=spec["rank"], world_size=spec["world"])
    rank, world, k = spec["rank"], spec["world"], spec["accumulation"]
    model = TinyLM()
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    args = trainer_args(spec["loss_type"], k, max_grad_norm=spec["max_grad_norm"])
    callback, state = GradientNoiseCallback(), TrainerState()
    callback.on_train_begin(args, state, None, model=model)
    steps = []
    for step in range(spec["steps"]):
        everything = make_micro_batches(spec["seed"] + step, world * k, spec["rows"])
        tokens = int(sum(b["completion_mask"].sum() for b in everything))  # TRL's num_items_in_batch: gathered
        run_step(model, callback, everything[rank * k:(rank + 1) * k], args, state, processes=world,
                 loss_tokens=tokens, ddp=ddp, optimizer=optimizer)
        inputs = dict(callback.last_step)
        steps.append({"inputs": inputs, "entry": log(callback, args, state, {"loss": 0.0})})
    callback.on_train_end(args, state, None)
    parameters = {name: p.detach().reshape(-1).tolist() for name, p in model.named_parameters()}
    out = spec["out"] + ("" if rank == 0 else f".rank{rank}")
    with open(out, "w") as f:
        json.dump({"steps": steps, "parameters": parameters}, f)
    # Both processes are done before either tears down, the DDP reducer goes before its process group, and the
    # interpreter's own teardown is skipped: gloo's threads meeting C++ static destructors at exit aborted one CI run
    # ("terminate called without an active exception", SIGABRT) after the results were written.
    dist.barrier()
    del ddp
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
