"""What a run measures about itself: device-synchronizing phase timers (`timers`), the online gradient noise scale's
torch-free estimators (`gradnoise`), and the experiment trackers that mirror the run log (`trackers`: TensorBoard,
W&B, MLflow, trackio)."""
