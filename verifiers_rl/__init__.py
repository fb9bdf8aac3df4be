"""verifiers-rl: train language models with reinforcement learning on verifiable environments.

`import verifiers_rl as vf` gives the environment API (`vf.SingleTurnEnv`, `vf.Rubric`, ...) and the
trainer (`vf.RLTrainer`, `vf.RLConfig`). Names load lazily so `import verifiers_rl` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_TYPES = ("SystemMessage", "UserMessage", "AssistantMessage", "ToolMessage", "TextMessage", "Message", "Messages",
          "Tool", "ToolCall", "Response", "ResponseMessage", "ResponseTokens", "Usage", "State", "Info",
          "SamplingArgs", "RewardFunc", "RolloutInput", "RolloutOutput", "RolloutTiming", "TrajectoryStep",
          "TrajectoryStepTokens", "GenerateMetadata", "GenerateOutputs", "RolloutScore", "RolloutScores",
          "ClientConfig", "ClientType", "DatasetBuilder", "TokenUsage", "ErrorInfo", "ErrorData")
_ERRORS = ("Error", "ModelError", "InvalidModelResponseError", "EmptyModelResponseError", "OverlongPromptError",
           "ToolError", "ToolParseError", "ToolCallError", "InfraError", "TunnelError", "SandboxError")

_EXPORTS = {
    **{name: "verifiers_rl.types" for name in _TYPES},
    **{name: "verifiers_rl.errors" for name in _ERRORS},
    "stop": "verifiers_rl.decorators",
    "cleanup": "verifiers_rl.decorators",
    "teardown": "verifiers_rl.decorators",
    "Environment": "verifiers_rl.envs.environment",
    "MultiTurnEnv": "verifiers_rl.envs.multiturn_env",
    "SingleTurnEnv": "verifiers_rl.envs.singleturn_env",
    "ToolEnv": "verifiers_rl.envs.tool_env",
    "StatefulToolEnv": "verifiers_rl.envs.stateful_tool_env",
    "EnvGroup": "verifiers_rl.envs.env_group",
    "GymEnv": "verifiers_rl.envs.experimental.gym_env",
    "SandboxEnv": "verifiers_rl.envs.sandbox_env",
    "PythonEnv": "verifiers_rl.envs.python_env",
    "MCPEnv": "verifiers_rl.envs.experimental.mcp_env",
    "HarborEnv": "verifiers_rl.envs.experimental.harbor_env",
    "CliAgentEnv": "verifiers_rl.envs.experimental.cli_agent_env",
    "BrowserEnv": "verifiers_rl.envs.integrations.browser_env",
    "OpenEnvEnv": "verifiers_rl.envs.integrations.openenv_env",
    "TextArenaEnv": "verifiers_rl.envs.integrations.textarena_env",
    "ReasoningGymEnv": "verifiers_rl.envs.integrations.reasoninggym_env",
    "load_environment": "verifiers_rl.envs.loading",
    "Rubric": "verifiers_rl.rubrics.rubric",
    "RubricGroup": "verifiers_rl.rubrics.rubric_group",
    "JudgeRubric": "verifiers_rl.rubrics.judge_rubric",
    "MathRubric": "verifiers_rl.rubrics.math_rubric",
    "ToolRubric": "verifiers_rl.rubrics.tool_rubric",
    "Parser": "verifiers_rl.parsers.parser",
    "XMLParser": "verifiers_rl.parsers.xml_parser",
    "ThinkParser": "verifiers_rl.parsers.think_parser",
    "MaybeThinkParser": "verifiers_rl.parsers.maybe_think_parser",
    "Client": "verifiers_rl.clients.client",
    "OpenAIChatCompletionsClient": "verifiers_rl.clients.openai_chat_completions_client",
    "extract_boxed_answer": "verifiers_rl.utils.data_utils",
    "extract_hash_answer": "verifiers_rl.utils.data_utils",
    "load_example_dataset": "verifiers_rl.utils.data_utils",
    "BOXED_SYSTEM_PROMPT": "verifiers_rl.utils.data_utils",
    "THINK_BOXED_SYSTEM_PROMPT": "verifiers_rl.utils.data_utils",
    "ensure_keys": "verifiers_rl.utils.config_utils",
    "MissingKeyError": "verifiers_rl.utils.config_utils",
    "maybe_await": "verifiers_rl.utils.async_utils",
    "setup_logging": "verifiers_rl.utils.logging_utils",
    "log_level": "verifiers_rl.utils.logging_utils",
    "quiet_verifiers": "verifiers_rl.utils.logging_utils",
    "print_prompt_completions_sample": "verifiers_rl.utils.logging_utils",
    "LocalEngine": "verifiers_rl.inference.local_engine",
    "RLConfig": "verifiers_rl.trainer.config",
    "RLTrainer": "verifiers_rl.trainer.rl_trainer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'verifiers_rl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)


# `import verifiers` in environment code answers with this package or the real one: the hook installed here decides
# on the first such import, unless `load_environment` decided first (see verifiers_runtime).
def _install_runtime_hook() -> None:
    from verifiers_rl import verifiers_runtime

    verifiers_runtime.install_alias()


_install_runtime_hook()
