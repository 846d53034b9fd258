"""Run logs and phase timers."""
