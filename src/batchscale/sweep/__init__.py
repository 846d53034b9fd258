"""Sweeps: a base config times a grid of overrides times seeds, each point an ordinary run under DIR/runs/."""
