"""batchscale: when do larger batches help scale LLM reinforcement learning?

Implements the two-stage procedure of "When Do Larger Batches Help Scale LLM Reinforcement Learning?" (arXiv 2608.29296):
align learning on the sample axis (samples-to-target N*, penalty rN), then accelerate (throughput q), and pick the
configuration maximizing q / rN.
"""

__version__ = "0.1.0"
