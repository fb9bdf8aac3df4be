"""verifiers' error classes. A `vf.Error` raised inside a rollout is recorded in `state["error"]` and ends the
rollout; other exceptions propagate. The project's own errors (ModelServerError, ConfigError, ...) follow them."""

# verifiers' error API (`verifiers.errors`, what `utils.error_utils.vf_error_types` rebuilds): the project's own
# errors further down are not part of it.
__all__ = ["Error", "ModelError", "InvalidModelResponseError", "EmptyModelResponseError", "OverlongPromptError",
           "ToolError", "ToolParseError", "ToolCallError", "InfraError", "TunnelError", "SandboxError",
           "BrowserSandboxError"]


class Error(Exception):
    """Base class of the errors a rollout records."""


class ModelError(Error):
    """Talking to the model failed."""


class InvalidModelResponseError(ModelError):
    """The model's response is malformed."""


class EmptyModelResponseError(InvalidModelResponseError):
    """The model returned nothing (no text, no tool calls)."""


class OverlongPromptError(Error):
    """The prompt (plus the requested tokens) does not fit the model's context."""


class ToolError(Error):
    """Base class of tool errors."""


class ToolParseError(ToolError):
    """A tool call's name or arguments could not be parsed."""


class ToolCallError(ToolError):
    """A tool raised while running."""


class InfraError(Error):
    """Infrastructure (a sandbox, a tunnel, a server) failed; retryable."""


class TunnelError(InfraError):
    pass


class SandboxError(InfraError):
    pass


class BrowserSandboxError(SandboxError):
    pass


class ModelServerError(RuntimeError):
    """The inference server could not be reached or kept failing. Not a `vf.Error` on purpose: it would fail
    every rollout, so it ends the run (one line) instead of being recorded per rollout."""


class VLLMLaunchError(ModelServerError):
    """The vLLM server could not be started (bad settings, missing vLLM, crash during start-up, timeout)."""


class TrainingStalledError(RuntimeError):
    """Several steps in a row trained nothing (every rollout dropped or errored); the message names the cause and
    the setting to change. Ends a vf-rl run with that one line."""


class GenerationTimeoutError(TrainingStalledError):
    """A step's rollouts took longer than ``generation_timeout``: one line naming the setting (not a traceback)."""


class ConfigError(ValueError):
    """A config mistake: its message is one line naming the key and the fix."""


class SettingError(ValueError):
    """A setting's value or combination is wrong: ``key`` names it as RLConfig spells it, so vf-rl reports
    ``trainer.args.<key>: <message>`` without reading the message."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class NetworkError(RuntimeError):
    """The model hub or a server could not be reached; the message names what and what to do instead (a local path,
    HF_HUB_OFFLINE=1, dataset_source=offline). Ends a vf-rl / vf-eval / vf-sft run with that one line."""


class ModelNotFoundError(FileNotFoundError):
    """A model named by a path that does not exist (not a hub id): one line, before any download is tried."""
