"""The `vf-rl` config sections (pydantic, unknown keys forbidden; `Section` is every table's base, the hosted
format's too) and `one_line`, which makes a ValidationError `key.path: what is wrong (and the fix)`."""

from __future__ import annotations

import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from verifiers_rl.plan.inference import INFERENCE_BACKENDS
from verifiers_rl.value_check import close_match, describe_type  # noqa: F401  (describe_type: re-exported)


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TinyModelSection(Section):
    """Build the offline tiny model at `path` (skipped when it already exists)."""
    path: str = Field("outputs/tiny-model", description="where the model is built (reused when it exists)")
    layers: int = Field(4, description="decoder layers")
    hidden: int = Field(128, description="hidden size")
    heads: int = Field(4, description="attention heads")
    kv_heads: int = Field(2, description="key/value heads")
    intermediate: int = Field(384, description="MLP size")
    tie_embeddings: bool = Field(False, description="tie input and output embeddings")
    seed: int = Field(0, description="init seed")


class WarmupSection(Section):
    """SFT warm-up on the training env's data before RL; reused when a finished one has the same settings."""
    output_dir: str = Field("outputs/warmup", description="where the warmed-up model goes (reused when finished)")
    model: str | None = Field(None, description="model to warm up; default: [tiny_model].path, else `model`")
    completion_format: str = Field(..., description="assistant reply built from a row's answer, e.g. '<a>{answer}</a>'")
    max_steps: int = Field(700, ge=1, description="SFT steps")
    learning_rate: float = Field(3e-3, ge=0, description="SFT learning rate")
    batch_size: int = Field(32, ge=1, description="SFT batch size")
    micro_batch_size: int | None = Field(None, ge=1, description="rows per forward, gradients accumulating up to "
                                         "batch_size (a divisor of it); default: the whole batch at once")
    lr_scheduler_type: str = Field("cosine", description="transformers scheduler name")
    num_examples: int = Field(-1, description="training rows to use (-1: all)")
    max_length: int = Field(512, ge=1, description="max tokens per SFT sample")
    seed: int = Field(0, description="SFT seed")

    @model_validator(mode="after")
    def _whole_forwards(self) -> "WarmupSection":
        problem = micro_batch_problem(self.batch_size, self.micro_batch_size)
        if problem:
            raise ValueError(problem)
        return self


def micro_batch_problem(batch_size: int, micro_batch_size: int | None) -> str | None:
    """vf-sft's and the warm-up's rule (one process; sft/launch.py shares the rows among several): a step's rows split
    into whole forwards."""
    if micro_batch_size and batch_size % micro_batch_size:
        return (f"micro_batch_size = {micro_batch_size} does not divide batch_size = {batch_size}: the step's rows "
                "must split into whole forwards")
    return None


ENV_API_DOC = ("which verifiers API the environment speaks: 'classic' (a module with load_environment(**args)), "
               "'v1' (a verifiers 0.4 taskset package; needs `uv sync --extra verifiers-v1`), 'auto' (v1 when "
               "verifiers 0.4 is installed and the module exports a v1 Taskset/Env and no load_environment(), "
               "else classic)")
ENV_ARGS_DOC = ("classic: keyword arguments of its load_environment(); v1: its env config (`taskset = {<config "
                "fields>}`, `agent = {harness = {id = ...}, runtime = {type = ...}}`; default harness 'null', runtime "
                "'subprocess')")
ENV_PATH_DOC = "a directory put first on sys.path, holding the environment's module (relative to the config file)"


class EnvSection(Section):
    id: str = Field(..., description="environment id: `name` or `owner/name` (module `name` with '-' → '_'); v1: "
                    "the taskset id")
    args: dict[str, Any] = Field(default_factory=dict, description=ENV_ARGS_DOC)
    api: Literal["auto", "classic", "v1"] = Field("auto", description=ENV_API_DOC)
    path: str | None = Field(None, description=ENV_PATH_DOC)
    name: str | None = Field(None, description="display name (metric prefix); default: the id's name")
    ratio: float | None = Field(None, gt=0, description="with several [[env]]: relative share of each batch's "
                                "groups (default 1)")


class InferenceSection(Section):
    backend: Literal[INFERENCE_BACKENDS] = Field(  # type: ignore[valid-type]
        "auto", description="'local': in-process generation with the policy; 'vllm': a vLLM server (started by the "
        "trainer unless `urls` are given); 'auto': vllm with `urls`, or when there is a GPU and a Python with vLLM, "
        "else local")
    gpus: int | list[int] = Field(1, description="GPUs for the vLLM server: a count (the first ones) or device ids")
    colocate: bool | None = Field(None, description="server and trainer share one GPU, the server capped by "
                                  "gpu_memory_utilization; None: exactly when one GPU is visible and inference.gpus "
                                  "and trainer.gpus are both 1")
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1, description="share of its GPU's memory the "
                                                 "server may take (vLLM's default 0.9; colocated: 0.3)")
    args: dict[str, Any] = Field(default_factory=dict, description="vLLM server flags: key → --key (true → bare "
                                 "flag, false → omitted, list → repeated values)")
    urls: list[str] = Field(default_factory=list, description="base URLs of already-running servers (nothing is "
                            "started: args, env, python and gpu_memory_utilization are refused beside them); → "
                            "trainer.args.vllm_server_urls")
    python: str | None = Field(None, description="Python that runs the server (a venv with vLLM); default: "
                               "$VF_VLLM_PYTHON, else .vllm-venv/bin/python, else this one")
    host: str = Field("127.0.0.1", description="host the started server binds to")
    port: int | None = Field(None, description="port of the started server (None: a free port); a server already "
                             "answering there is used as it was started (args, env, python and "
                             "gpu_memory_utilization then do not apply: one warning line)")
    env: dict[str, str] = Field(default_factory=dict, description="environment variables of the started server "
                                "(e.g. VLLM_CPU_KVCACHE_SPACE = \"1\" for vLLM on a small CPU machine)")


class TrainerSection(Section):
    gpus: int | list[int] = Field(1, description="GPUs for training: a count (after the inference GPUs) or device "
                                  "ids; > 1 starts one training process per GPU with torchrun")
    processes: int | None = Field(None, ge=1, description="training processes on a machine without GPUs (torchrun, "
                                  "gloo): each generates its share of a step's groups; with GPUs, one per "
                                  "trainer GPU (set it only to the same number). Sharding: trainer.args fsdp / "
                                  "fsdp_config (docs/multi-node.md)")
    args: dict[str, Any] = Field(default_factory=dict, description="RLConfig fields (see the table below)")


class EvalEnvSection(Section):
    id: str = Field(..., description="environment id")
    name: str | None = Field(None, description="display name (metric prefix); default: the id's name")
    args: dict[str, Any] = Field(default_factory=dict, description=ENV_ARGS_DOC)
    api: Literal["auto", "classic", "v1"] = Field("auto", description="as [env] api")
    path: str | None = Field(None, description=ENV_PATH_DOC)
    num_examples: int | None = Field(None, description="eval prompts (-1: all); default: [eval].num_examples")
    rollouts_per_example: int | None = Field(None, ge=1, description="default: [eval].rollouts_per_example")


class EvalSection(Section):
    """Held-out eval of the starting policy and of the trained one on the same examples, and every `interval`."""
    num_examples: int = Field(256, description="eval prompts per env (-1: the whole eval split)")
    rollouts_per_example: int = Field(1, ge=1, description="rollouts per eval prompt")
    temperature: float | None = Field(None, description="default: the training temperature")
    max_tokens: int | None = Field(None, ge=1, description="new tokens per eval turn; default: the training "
                                   "max_tokens")
    before: bool = Field(True, description="evaluate the starting policy before RL (a resumed run does not again)")
    after: bool = Field(True, description="evaluate the trained policy after RL (with the paired gain)")
    interval: int | None = Field(None, description="also evaluate every N training steps (None: never)")
    env: list[EvalEnvSection] = Field(default_factory=list, description="[[eval.env]] eval environments; "
                                      "default: the training env's eval split")


class TeacherSection(Section):
    """The teacher of `training_mode = "opd" | "sft"` (docs/training-modes.md): `model` or `url`, not both."""
    model: str | None = Field(None, description="a model dir or hub id, loaded in-process (sft: the local engine "
                              "generates with it); opd needs the policy's tokenizer")
    url: str | None = Field(None, description="base URL (…/v1) of a server with the teacher: vLLM for opd (it scores "
                            "with prompt_logprobs), any OpenAI-compatible endpoint for sft")
    name: str | None = Field(None, description="the model name sent to `url` (default: the first of its /v1/models)")
    api_key_var: str | None = Field(None, description="environment variable holding `url`'s API key")
    min_reward: float | None = Field(None, description="sft: train only on teacher rollouts with reward >= this")


TEACHER_ARGS = {"model": "teacher_model", "url": "teacher_url", "name": "teacher_model_name",
                "api_key_var": "teacher_api_key_var", "min_reward": "sft_min_reward"}


class RunConfig(Section):
    model: str | None = Field(None, description="the policy RL starts from: dir, hub id or PEFT adapter dir")
    env_file: list[str] = Field(default_factory=list, description=".env files (KEY=VALUE) loaded into the "
                                "environment, relative to the config file; values are never logged or saved")
    tiny_model: TinyModelSection | None = None
    warmup: WarmupSection | None = None
    env: EnvSection | list[EnvSection]
    verifiers_runtime: Literal["auto", "ours", "real"] | None = Field(
        None, description="who answers `import verifiers` in environment code: 'ours' (this package's classic API), "
        "'real' (an installed verifiers>=0.2.1,<0.4), 'auto' (real when installed in that range and allowed by the "
        "environment's requirements, else ours); default: $VF_VERIFIERS_RUNTIME, else auto")
    inference: InferenceSection = Field(default_factory=InferenceSection)
    trainer: TrainerSection = Field(default_factory=TrainerSection)
    eval: EvalSection | None = None
    training_mode: Literal["rl", "opd", "sft"] | None = Field(
        None, description="(default 'rl') 'rl': rewards train the policy; 'opd': on-policy distillation (the policy samples, its KL "
        "to the [teacher] falls); 'sft': the [teacher] generates the rollouts, the policy learns them "
        "(docs/training-modes.md)")
    teacher: TeacherSection | None = Field(None, description="the teacher of training_mode opd/sft: [teacher] below")

    @property
    def envs(self) -> list[EnvSection]:
        return list(self.env) if isinstance(self.env, list) else [self.env]


OPTIONAL_SECTIONS = {"tiny_model", "warmup", "eval"}


# --- one-line errors -------------------------------------------------------------------------------------------------


def _unwrap_model(ann: Any) -> Any:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    return next((m for a in typing.get_args(ann) if (m := _unwrap_model(a)) is not None), None)


def _walk(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[list[str], Any, list[str]]:
    """(clean key path, annotation of the last field, sibling field names at the last level)."""
    path: list[str] = []
    node: Any = model
    ann: Any = None
    siblings: list[str] = list(getattr(model, "model_fields", {}))
    for part in loc:
        if isinstance(part, int):
            path.append(str(part))
            lists = [node] if typing.get_origin(node) is list else [
                a for a in typing.get_args(node) if typing.get_origin(a) is list]
            item = typing.get_args(lists[0])[0] if lists and typing.get_args(lists[0]) else None
            node = ann = item
            continue
        m = _unwrap_model(node)
        if m is not None:
            siblings = list(m.model_fields)
            if part in m.model_fields:
                ann = node = m.model_fields[part].annotation
                path.append(part)
                continue
        if isinstance(part, str) and path and (part[:1].isupper() or part.startswith(("list[", "dict[", "function"))
                                               or part in ("int", "str", "float", "bool", "none")):
            if part.startswith("list["):  # the list member of a union: keep the list type for the index
                node = next((a for a in typing.get_args(node) if typing.get_origin(a) is list), node)
            continue  # a union member's tag, e.g. ('inference', 'gpus', 'int')
        path.append(str(part))
        node = ann = None
    return path, ann, siblings


_BOUNDS = {"greater_than": (">", "gt"), "greater_than_equal": (">=", "ge"), "less_than": ("<", "lt"),
           "less_than_equal": ("<=", "le")}


def one_line(err: ValidationError, model: type[BaseModel] = RunConfig, prefix: str = "",
             foreign: dict[str, str] | None = None) -> str:
    """The first error of a pydantic ValidationError as one line: `key.path: what is wrong (and the fix)`.
    `foreign`: an unknown key's full path → the hint for it (another tool's name for a setting)."""
    errors = err.errors()
    # Prefer the most specific error: an unknown or missing key over "not a list" from another union member.
    rank = {"extra_forbidden": 0, "missing": 1}
    e = sorted(errors, key=lambda x: rank.get(x["type"], 2))[0] if errors else {"type": "", "loc": (), "msg": str(err)}
    loc = tuple(e.get("loc", ()))
    path, ann, siblings = _walk(model, loc)
    key = prefix + ".".join(path) if path else prefix.rstrip(".")
    typ = e["type"]
    value = e.get("input")
    expected = describe_type(ann) if ann is not None else e["msg"]
    if typ == "extra_forbidden":
        if key in (foreign or {}):
            return f"{key}: unknown key ({foreign[key]})"
        close = close_match(str(loc[-1]), siblings)
        hint = f" (did you mean {prefix}{'.'.join([*path[:-1], close])}?)" if close else ""
        return f"{key}: unknown key{hint}"
    if typ == "missing":
        return f"{key}: required key is missing"
    if typ == "literal_error":
        return f"{key}: {value!r} is not {expected}"
    if typ in _BOUNDS:  # Field(ge=..., gt=...): the value has the right type, the wrong size
        op, bound = _BOUNDS[typ]
        return f"{key}: {value!r} must be {op} {e.get('ctx', {}).get(bound)}"
    if typ in ("value_error", "assertion_error"):
        msg = e["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        return f"{key}: {msg}" if key else msg
    return f"{key}: expected {expected}, got {value!r}" if key else e["msg"]
