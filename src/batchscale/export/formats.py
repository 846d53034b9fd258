"""The engines a sweep can be exported to and the launchers that can wrap them (see the package docstring); a module
of its own so that the CLI's --help can name them without importing the exporters."""

ENGINE_FORMATS = ("verl", "openrlhf", "openrlhf-legacy")  # external engines: a script per point, its log imported
ENGINES = (*ENGINE_FORMATS, "batchscale")  # batchscale: `batchscale train` of the point's own config, no import
LAUNCHERS = ("skypilot", "slurm")  # job files around an engine's scripts (--engine)
FORMATS = (*ENGINES, *LAUNCHERS)
RAY_ENGINES = ENGINE_FORMATS  # the engines that span several nodes through one Ray cluster
DEFAULT_ENGINE = "verl"
# GPUs per node by default: one for batchscale (it trains on one device), a node of 8 for the Ray engines (as verl's
# and OpenRLHF's examples assume). SkyPilot needs an accelerator name; Slurm's GPU type names vary by site.
DEFAULT_GPUS_PER_NODE = {"batchscale": 1, "ray": 8}
DEFAULT_SKYPILOT_GPU = "H100"
