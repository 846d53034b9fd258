"""Native kernels of the rollout engine (C sources, compiled on first use by rollout/native.py)."""
