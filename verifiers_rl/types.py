"""Data shapes of verifiers' classic API: messages, tools, model responses, rollout inputs/outputs, State.

Every record is a `dict` subclass with attribute access, so environment code of either style works. An unset optional
field is not a key (`msg.get("tool_calls", [])` is `[]`, as older verifiers' dicts) but reads as None by attribute (as
verifiers' pydantic messages); `model_dump()` / `model_validate()` exist too.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, ClassVar, Literal, TypeAlias

from pydantic import BaseModel, Field

from verifiers_rl.record import Record
from verifiers_rl.rollout_timing import RolloutTiming, TimeSpan, TimeSpans  # noqa: F401  (verifiers.types names)

if sys.version_info < (3, 12):
    from typing_extensions import NotRequired, TypedDict
else:  # pragma: no cover
    from typing import NotRequired, TypedDict

if TYPE_CHECKING:
    from datasets import Dataset

ClientType = Literal["openai_completions", "openai_chat_completions", "openai_chat_completions_token",
                     "anthropic_messages"]
MessageType = Literal["chat", "completion"]
FinishReason = Literal["stop", "length", "tool_calls"] | None


def _records(conv: Any) -> Callable[[Any], Any]:
    return lambda items: [conv(x) for x in items] if isinstance(items, (list, tuple)) else items


# --- content parts ---------------------------------------------------------------------------------------
class TextContentPart(Record):
    _defaults = {"type": "text"}
    _required = ("text",)


class ImageUrlSource(Record):
    _required = ("url",)


class ImageUrlContentPart(Record):
    _defaults = {"type": "image_url"}
    _required = ("image_url",)


class InputAudioSource(Record):
    _required = ("data", "format")


class InputAudioContentPart(Record):
    _defaults = {"type": "input_audio"}
    _required = ("input_audio",)


class GenericContentPart(Record):
    _required = ("type",)


ContentPart: TypeAlias = TextContentPart | ImageUrlContentPart | InputAudioContentPart | GenericContentPart | dict
MessageContent: TypeAlias = str | list[ContentPart]


# --- tools -----------------------------------------------------------------------------------------------
class ToolCall(Record):
    """A model's call of a tool: `id`, `name`, `arguments` (a JSON string). OpenAI's nested form reads too:
    `tc["function"]["name"]`, `tc.function.arguments`, `tc["type"]`."""

    _required = ("id", "name", "arguments")

    def __init__(self, *args: Any, **kwargs: Any):
        data = dict(*args, **kwargs)
        fn = data.pop("function", None)
        if fn is not None:  # OpenAI form {"id", "type": "function", "function": {"name", "arguments"}}
            fn = fn if isinstance(fn, dict) else {"name": fn.name, "arguments": fn.arguments}
            data.setdefault("name", fn.get("name", ""))
            data.setdefault("arguments", fn.get("arguments") or "")
        data.pop("type", None)
        data.setdefault("id", "")
        if not isinstance(data.get("arguments"), str):
            import json

            data["arguments"] = json.dumps(data.get("arguments") or {})
        super().__init__(data)

    def __missing__(self, key: str) -> Any:
        if key == "function":
            return Record(name=self["name"], arguments=self["arguments"])
        if key == "type":
            return "function"
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        if key in ("function", "type"):
            return self[key]
        return super().get(key, default)

    def to_openai(self) -> dict[str, Any]:
        return {"id": self["id"], "type": "function",
                "function": {"name": self["name"], "arguments": self["arguments"]}}


def _tool_call(x: Any) -> Any:
    if isinstance(x, ToolCall):
        return x
    if isinstance(x, dict):
        return ToolCall(x)
    if hasattr(x, "function"):  # an openai ChatCompletionMessageToolCall
        return ToolCall(id=x.id, name=x.function.name, arguments=x.function.arguments)
    if hasattr(x, "model_dump"):
        return ToolCall(x.model_dump())
    return x


class Tool(Record):
    """A tool the model may call: `name`, `description`, `parameters` (JSON schema), `strict`."""

    _defaults = {"description": "", "parameters": dict, "strict": None}
    _required = ("name",)


# --- messages --------------------------------------------------------------------------------------------
class SystemMessage(Record):
    _defaults = {"role": "system"}
    _required = ("content",)


class UserMessage(Record):
    _defaults = {"role": "user"}
    _required = ("content",)


class AssistantMessage(Record):
    _defaults = {"role": "assistant", "content": None, "reasoning_content": None, "thinking_blocks": None,
                 "tool_calls": None}
    _nested = {"tool_calls": _records(_tool_call)}


class ToolMessage(Record):
    _defaults = {"role": "tool"}
    _required = ("tool_call_id", "content")


class TextMessage(Record):
    _defaults = {"role": "text"}
    _required = ("content",)


Message: TypeAlias = SystemMessage | UserMessage | AssistantMessage | ToolMessage | TextMessage
Messages = list[Message]
# verifiers' older spelling of a chat message list (openenv examples import it from verifiers.types)
ChatMessage: TypeAlias = Message
ChatMessages = list[ChatMessage]
MESSAGE_CLASSES: dict[str, type[Record]] = {"system": SystemMessage, "user": UserMessage,
                                            "assistant": AssistantMessage, "tool": ToolMessage, "text": TextMessage}


# --- model responses -------------------------------------------------------------------------------------
class Usage(Record):
    _defaults = {"prompt_tokens": 0, "reasoning_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


class ResponseTokens(Record):
    """Token ids and sampling logprobs of one model call (masks: 1 = counts for training)."""

    _required = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "completion_logprobs")
    _defaults = {"routed_experts": None, "prompt_attribution": None}


class ResponseMessage(AssistantMessage):
    _defaults = {**AssistantMessage._defaults, "finish_reason": None, "is_truncated": None, "tokens": None}
    _nested = {**AssistantMessage._nested, "tokens": ResponseTokens}


class Response(Record):
    _defaults = {"id": "", "created": 0, "model": "", "usage": None}
    _required = ("message",)
    _nested = {"message": ResponseMessage, "usage": Usage}


# --- rollouts --------------------------------------------------------------------------------------------
Info = dict[str, Any]
SamplingArgs = dict[str, Any]
IndividualRewardFunc = Callable[..., float | Awaitable[float]]
GroupRewardFunc = Callable[..., list[float] | Awaitable[list[float]]]
RewardFunc = IndividualRewardFunc | GroupRewardFunc
DatasetBuilder: TypeAlias = "Callable[[], Dataset]"
JsonPrimitive = Literal["string", "number", "integer", "boolean", "array", "object"]


class TrajectoryStepTokens(TypedDict):
    prompt_ids: list[int]
    prompt_mask: list[int]
    completion_ids: list[int]
    completion_mask: list[int]
    completion_logprobs: list[float]
    overlong_prompt: bool
    is_truncated: bool
    routed_experts: list[list[list[int]]] | None


class TokenUsage(TypedDict):
    input_tokens: float
    output_tokens: float


class VersionInfo(TypedDict):
    vf_version: str
    vf_commit: str | None
    env_version: str | None
    env_commit: str | None


class TrajectoryStep(TypedDict):
    """One model call of a rollout: what it saw, what it said, and its tokens."""

    prompt: Messages
    completion: Messages
    response: Response
    tokens: TrajectoryStepTokens | None
    reward: float | None
    advantage: float | None
    is_truncated: bool
    trajectory_id: str
    extras: dict[str, Any]


class BaseRolloutInput(TypedDict):
    prompt: Messages
    example_id: int
    task: str


class RolloutInput(BaseRolloutInput, total=False):
    answer: str
    info: Info | str


class ErrorInfo(TypedDict):
    """A rollout's error as data (a saved output's `error`): verifiers 0.3's ErrorData, 0.1.11's fields + message."""
    error: str
    message: str
    error_chain_repr: str
    error_chain_str: str


ErrorData = ErrorInfo  # verifiers 0.3's name


class RolloutOutput(dict):
    """A rollout serialized for saving (JSON-ready), plus any `state_columns` asked for."""


class State(dict):
    """One rollout's data. The input fields (`prompt`, `answer`, `task`, `info`, `example_id`) live in
    `state["input"]` and read/write through to it; attribute access is a convenience."""

    INPUT_FIELDS: ClassVar[list[str]] = ["prompt", "answer", "task", "info", "example_id"]

    def __getitem__(self, key: str) -> Any:
        if key in self.INPUT_FIELDS and dict.__contains__(self, "input"):
            inp = dict.__getitem__(self, "input")
            if key in inp:
                return inp[key]
        return dict.__getitem__(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        if key in self.INPUT_FIELDS and dict.__contains__(self, "input"):
            inp = dict.__getitem__(self, "input")
            if key in inp:
                inp[key] = value
                return
        dict.__setitem__(self, key, value)

    def __contains__(self, key: object) -> bool:
        if dict.__contains__(self, key):
            return True
        return key in self.INPUT_FIELDS and dict.__contains__(self, "input") and key in dict.__getitem__(self, "input")

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError as e:
            raise AttributeError(name) from e

    def assert_serializable(self) -> None:
        """TypeError unless the state can be sent on (verifiers 0.3): JSON, plus what a trainer's binary
        transport carries as is (dataclasses such as multi-modal data, raw buffers, numpy values, paths)."""
        import json

        try:
            json.dumps(self, default=_transportable)
        except TypeError as e:
            raise TypeError("Task and State values must be JSON-serializable.") from e


def _transportable(obj: Any) -> Any:
    """A stand-in for a value the transport ships without JSON; anything else raises (json's default hook)."""
    import dataclasses

    if isinstance(obj, (bytes, bytearray, memoryview, Path)) or dataclasses.is_dataclass(obj):
        return f"<{type(obj).__name__}>"
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, (np.generic, np.ndarray)):
        return obj.tolist()
    if isinstance(obj, BaseModel):
        return obj.model_dump()
    raise TypeError(f"{type(obj).__name__} is not serializable")


# --- generation results ----------------------------------------------------------------------------------
class GenerateMetadata(TypedDict):
    env_id: str
    env_args: dict
    model: str
    base_url: str
    num_examples: int
    rollouts_per_example: int
    shuffle: NotRequired[bool]
    shuffle_seed: NotRequired[int | None]
    sampling_args: SamplingArgs
    date: str
    time: float  # seconds (verifiers 0.3)
    time_ms: float  # verifiers 0.1.11
    avg_reward: float
    avg_metrics: dict[str, float]
    avg_error: float
    pass_at_k: dict[str, float]
    pass_all_k: dict[str, float]
    pass_threshold: float
    usage: TokenUsage | None
    version_info: VersionInfo
    state_columns: list[str]
    path_to_save: Path
    tools: list[Tool] | None


class GenerateOutputs(TypedDict):
    outputs: list[RolloutOutput]
    metadata: GenerateMetadata


class RolloutScore(TypedDict):
    reward: float
    metrics: dict[str, float]


class RolloutScores(TypedDict):
    reward: list[float]
    metrics: dict[str, list[float]]


StartCallback = Callable[[list[RolloutInput], Any], None]
ProgressCallback = Callable[[list[RolloutOutput], list[RolloutOutput], GenerateMetadata], None]
LogCallback = Callable[[str], None]

Endpoint = TypedDict("Endpoint", {"key": str, "url": str, "model": str, "api_client_type": NotRequired[ClientType]})
Endpoints = dict[str, list[Endpoint]]


class EndpointClientConfig(BaseModel):
    client_idx: int = 0
    api_key_var: str = "PRIME_API_KEY"
    api_base_url: str = "https://api.pinference.ai/api/v1"
    timeout: float = 3600.0
    connect_timeout: float = 5.0
    max_connections: int = 28000
    max_keepalive_connections: int = 28000
    max_retries: int = 10
    extra_headers: dict[str, str] = Field(default_factory=dict)


class ClientConfig(EndpointClientConfig):
    """How to reach a model server (verifiers' `ClientConfig`); `client_type` picks the wire protocol."""

    client_type: ClientType = "openai_chat_completions"
    endpoint_configs: list[EndpointClientConfig] = Field(default_factory=list)
