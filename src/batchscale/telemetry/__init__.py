"""What a run measures about itself: device-synchronizing phase timers (`timers`), the online gradient noise scale's
torch-free estimators (`gradnoise`), and the optional TensorBoard mirror of the run log (`tensorboard`)."""
