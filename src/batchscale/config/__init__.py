"""Typed, validated run configuration (`config.schema`, `config.checks`, `config.load`) and what is derived from it once
per run or sweep point (`config.derived`: the batch plan, learning-rate scaling, the run descriptor).

Most code imports what it needs from here: `from batchscale.config import Config, derive_plan, load_config`.
"""

from batchscale.config.checks import check_combinations, check_device_name, check_rollout_mode, nearest_divisor
from batchscale.config.derived import (AUTO_CHECKPOINT_S, BatchPlan, CriticPlan, derive_plan, lr_rule_exponent,
                                       read_lr_rule, resolved_config, run_descriptor, scale_lr, tracker_names)
from batchscale.config.load import apply_overrides, load_config, parse_override, read_toml, validate_config
from batchscale.config.schema import (DEFAULT_LR_RULE, LR_RULE_EXPONENTS, AlgorithmConfig, BatchConfig, Config,
                                      CriticConfig, ModelConfig, OptimConfig, RolloutConfig, RunConfig, SamplingConfig,
                                      Section, TaskConfig)

__all__ = [
    "AUTO_CHECKPOINT_S", "DEFAULT_LR_RULE", "LR_RULE_EXPONENTS", "AlgorithmConfig", "BatchConfig", "BatchPlan",
    "Config", "CriticConfig", "CriticPlan", "ModelConfig", "OptimConfig", "RolloutConfig", "RunConfig",
    "SamplingConfig", "Section", "TaskConfig", "apply_overrides", "check_combinations", "check_device_name",
    "check_rollout_mode", "derive_plan", "load_config", "lr_rule_exponent", "nearest_divisor", "parse_override",
    "read_lr_rule", "read_toml", "resolved_config", "run_descriptor", "scale_lr", "tracker_names", "validate_config",
]
