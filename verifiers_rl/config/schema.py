"""The `vf-rl` config schema and its resolution into a run: every name of the config layer, importable from here.
Every mistake is a one-line `ConfigError` starting with the key path (docs/configuration.md#errors)."""

from __future__ import annotations

from verifiers_rl.config.loading import ConfigError
from verifiers_rl.config.resolution import (
    ResolvedRun, build_rl_config, check_trainer_args, load_run, map_origin, resolve_run, validate_run_config,
)
from verifiers_rl.config.resolved_toml import (
    dumps_toml, resolved_dict, resolved_trainer_args, to_toml_data, write_resolved,
)
from verifiers_rl.config.sections import (
    OPTIONAL_SECTIONS, EnvSection, EvalEnvSection, EvalSection, InferenceSection, RunConfig, Section,
    TinyModelSection, TrainerSection, WarmupSection, describe_type, one_line,
)
from verifiers_rl.config.trainer_args import RLFieldInfo, rl_field_info
from verifiers_rl.config.validation import check_env, check_envs, gpu_ids, rl_config_kwargs

__all__ = [
    "OPTIONAL_SECTIONS", "ConfigError", "EnvSection", "EvalEnvSection", "EvalSection", "InferenceSection",
    "RLFieldInfo", "ResolvedRun", "RunConfig", "Section", "TinyModelSection", "TrainerSection", "WarmupSection",
    "build_rl_config", "check_env", "check_envs", "check_trainer_args", "describe_type", "dumps_toml", "gpu_ids",
    "load_run", "map_origin", "one_line", "resolve_run", "resolved_dict", "resolved_trainer_args", "rl_config_kwargs",
    "rl_field_info", "to_toml_data", "validate_run_config", "write_resolved",
]
