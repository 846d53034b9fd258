"""The training stack: the loop and everything an update needs.

A run is `train.loop.train`: `train.state` builds what every step touches (task, policy, engine, `train.actor.Actor`,
`train.critic.Critic`), a rollout source (`train.rollout_source`: synchronous, or `train.async_rollouts` with the
generator process of `train.async_generator`) hands the loop each step's rollouts, and the actor and the critic
update through one function on one page (`train.update.update_network`: epochs x mini-batches x gradient chunks x
micro-batches, clip, step; chunks from `train.micro_batches`, their norms from `train.chunk_norms`), each supplying
only its loss on one micro-batch. `train.precision` picks the training arithmetic, `train.health` stops a run at its first
non-finite number, `train.run_progress` draws it, and `train.run_facts` and `train.evaluation` write what it records.

This file imports nothing, so that `batchscale --help`, sweep, analyze and plan stay torch-free at import.
"""
