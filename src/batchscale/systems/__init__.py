"""Systems side: hardware and model presets, the analytical roofline with KV-cache feasibility, and knee fitting.

Everything here is numpy/scipy only (no torch), so `batchscale roofline` starts fast and the profilers can call the
fitting functions on measured points without importing the training stack.
"""
