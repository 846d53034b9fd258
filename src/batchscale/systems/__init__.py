"""Systems side, torch-free: hardware presets, model shapes, the analytical roofline with KV-cache feasibility, and
knee fitting (`batchscale roofline`).

Everything here is numpy/scipy only, so `batchscale roofline`, plan and report start fast and never reach the training
stack. The measurements these models are compared with (generation and training profiles) are taken by `profile/`,
the torch side, which calls the fitting functions here on its measured points.
"""
