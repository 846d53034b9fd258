"""The confined scoring worker's entry point: `python -m batchscale.tasks.scorer_worker FD PARENT_PID`
(isolated_scorer.IsolatedScorer starts it; FD is its end of a socket pair). The work itself is
`isolated_scorer.serve_scorer`."""

from __future__ import annotations

import sys
from multiprocessing.connection import Connection

from batchscale.tasks.isolated_scorer import serve_scorer

if __name__ == "__main__":
    serve_scorer(Connection(int(sys.argv[1])), int(sys.argv[2]))
