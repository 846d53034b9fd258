"""RL algorithms (GRPO, PPO, ReMax) as registries of pure functions.

    specs       torch-free: each algorithm's name and what it needs from the loop (critic, greedy baseline, group size)
    registry    the algorithm by name: its spec plus its advantage (and value-target) functions
    advantages  per-token advantages from rewards (grouped as (P, G)), values or a greedy baseline
    losses      the clipped policy surrogate, the clipped value loss, the k3 KL estimator, token weights
"""
