"""`python -m batchscale`: the `batchscale` command for a tree used from PYTHONPATH without installing it (the GPU
check runs it so on a machine whose python3 is not ours: benchmarks/gpu_check.sh)."""

import sys

from batchscale.cli import main

sys.exit(main())
