"""Hosted-training configs (the retired `prime rl` format; `prime train`'s is config/prime_train.py) translated to
the same `vf-rl` run (config/resolution.py config_format tells the formats apart). Defaults: docs/hosted.md, generated
from `MAPPING`.

`translate` also returns `origin` (vf-rl key path → hosted key), so a later error names the key the user wrote.
"""

from __future__ import annotations

import functools
import math
import sys
from typing import Any, Literal

from pydantic import Field, ValidationError

from verifiers_rl.config import prime_train
from verifiers_rl.config.loading import ConfigError
from verifiers_rl.config.prime_train_table import DEFAULT_MICRO_BATCH, Rule
from verifiers_rl.config.sections import Section, TeacherSection, one_line

# The prompt budget of a hosted run: max_seq_len = PROMPT_BUDGET + sampling.max_tokens (seq_len is not user-set
# in the hosted format; it is RLConfig.max_prompt_len's default).
PROMPT_BUDGET = 512
DEFAULT_EVAL_INTERVAL = 100

RETIRED_WARNING = ("warning: this is the `prime rl` config format (a top-level model = \"...\" and [[env]]), which "
                   "the prime CLI retired: `prime train` takes prime-rl's own config (docs/hosted.md); translated "
                   "as before")


class HostedSampling(Section):
    max_tokens: int | None = Field(None, description="max tokens to generate per turn")
    temperature: float = Field(1.0, description="sampling temperature (>= 0; 0 samples greedily)")
    enable_thinking: bool | None = Field(None, description="the chat template's enable_thinking (Qwen3, Nemotron)")
    reasoning_effort: str | None = Field(None, description="the chat template's reasoning_effort (gpt-oss)")


class HostedEnv(Section):
    id: str = Field(..., description="environment id (owner/name)")
    name: str | None = Field(None, description="display name")
    args: dict[str, Any] = Field(default_factory=dict, description="load_environment() args")


class HostedEvalEnv(HostedEnv):
    num_examples: int | None = None
    rollouts_per_example: int | None = None


class HostedEval(Section):
    interval: int = DEFAULT_EVAL_INTERVAL
    num_examples: int = -1
    rollouts_per_example: int = 1
    eval_base_model: bool = False
    env: list[HostedEvalEnv] = Field(default_factory=list)


class HostedVal(Section):
    num_examples: int | None = None
    rollouts_per_example: int | None = None
    interval: int


class HostedBuffer(Section):
    online_difficulty_filtering: bool | None = None
    easy_threshold: float | None = None
    hard_threshold: float | None = None
    easy_fraction: float | None = None
    hard_fraction: float | None = None
    env_ratios: list[float] | None = None
    skip_verification: bool = False
    seed: int | None = None


class HostedWandb(Section):
    project: str | None = None
    entity: str | None = None
    name: str | None = None


class HostedConfig(Section):
    name: str | None = None
    model: str
    max_steps: int = 100
    batch_size: int = 128
    rollouts_per_example: int = 8
    trajectory_strategy: Literal["interleaved", "branching"] | None = None
    learning_rate: float | None = None
    lora_alpha: int | None = None
    oversampling_factor: float | None = None
    max_async_level: int | None = None
    env_file: list[str] = Field(default_factory=list)
    sampling: HostedSampling = Field(default_factory=HostedSampling)
    env: list[HostedEnv] = Field(..., min_length=1)
    eval: HostedEval | None = None
    val: HostedVal | None = None
    buffer: HostedBuffer | None = None
    wandb: HostedWandb | None = None
    training_mode: Literal["rl", "opd", "sft"] | None = None
    teacher: TeacherSection | None = None


# The hosted format, stated once: `translate` applies the direct rules and the code below does the rest.
MAPPING: list[Rule] = [
    Rule("name", "trainer.args.run_name", "run name; the output dir is outputs/<name>", direct=True),
    Rule("model", "model", "as is"),
    Rule("max_steps", "trainer.args.max_steps", "default 100", direct=True),
    Rule("batch_size", "trainer.args.batch_size", "rollouts per step, default 128; also sets trainer.args."
         "micro_batch_size = gcd(batch_size, 8)", direct=True),
    Rule("rollouts_per_example", "trainer.args.rollouts_per_example", "default 8", direct=True),
    Rule("trajectory_strategy", "—", "\"interleaved\" is what the trainer does (a rollout's turns are one sample); "
         "\"branching\" is an error (not supported yet)"),
    Rule("learning_rate", "trainer.args.learning_rate", "as is", direct=True),
    Rule("lora_alpha", "trainer.args.lora_alpha", "as is (LoRA is on by default)", direct=True),
    Rule("oversampling_factor", "trainer.args.oversampling_factor", "generate that many times the groups a step "
         "needs, so the groups left after buffer.online_difficulty_filtering fill it (needs the filter)", direct=True),
    Rule("max_async_level", "trainer.args.max_async_level", "as is", direct=True),
    Rule("env_file", "env_file", "paths relative to the config file; values go to the process environment only"),
    Rule("sampling.max_tokens", "trainer.args.max_tokens", f"and trainer.args.max_seq_len = {PROMPT_BUDGET} + "
         f"max_tokens, trainer.args.max_prompt_len = {PROMPT_BUDGET}", direct=True),
    Rule("sampling.temperature", "trainer.args.temperature", "default 1.0; >= 0 (0: greedy sampling, the trainer's "
         "log-probs at temperature 1; a group's greedy rollouts are alike, so rl learns little)", direct=True),
    Rule("sampling.enable_thinking / reasoning_effort", "trainer.args.chat_template_kwargs", "as is, into the "
         "policy's chat template (e.g. {enable_thinking = false})"),
    Rule("training_mode", "training_mode", "as is: 'rl' (default), 'opd' or 'sft' (docs/training-modes.md)"),
    Rule("[teacher]", "[teacher]", "`model`, `url`, `name`, `api_key_var`, `min_reward` as is (opd/sft)"),
    Rule("[[env]] (one)", "[env]", "`id`, `args`, `name` as is"),
    Rule("[[env]] (several)", "env (a list)", "trained together (EnvGroup); batches in proportion to "
         "buffer.env_ratios"),
    Rule("eval.interval", "eval.interval", f"periodic eval every N steps (default {DEFAULT_EVAL_INTERVAL})"),
    Rule("eval.num_examples", "eval.num_examples", "default for each [[eval.env]] (-1 = all, the default)"),
    Rule("eval.rollouts_per_example", "eval.rollouts_per_example", "default for each [[eval.env]] (default 1)"),
    Rule("eval.eval_base_model", "eval.before", "also evaluate the starting model (default false); eval.after = false"),
    Rule("[[eval.env]]", "[[eval.env]]", "`id`, `name`, `args`, `num_examples`, `rollouts_per_example` as is; none "
         "given: the training env"),
    Rule("val.interval", "trainer.args.eval_steps", "periodic validation on the training env's eval split (its "
         "train split when it has none), logged as `val/<env>/...` (`[eval]` logs `eval/<name>/...`)", direct=True),
    Rule("val.num_examples", "trainer.args.eval_num_examples", "as is", direct=True),
    Rule("val.rollouts_per_example", "trainer.args.eval_rollouts_per_example", "as is", direct=True),
    Rule("buffer.online_difficulty_filtering", "trainer.args.online_difficulty_filtering", "as is", direct=True),
    Rule("buffer.easy_threshold", "trainer.args.easy_threshold", "as is", direct=True),
    Rule("buffer.hard_threshold", "trainer.args.hard_threshold", "as is", direct=True),
    Rule("buffer.easy_fraction", "trainer.args.easy_fraction", "as is", direct=True),
    Rule("buffer.hard_fraction", "trainer.args.hard_fraction", "as is", direct=True),
    Rule("buffer.env_ratios", "env.N.ratio", "one positive ratio per [[env]]: each batch holds the envs' groups in "
         "that proportion"),
    Rule("buffer.skip_verification", "—", "false: as is; true: error (not supported yet)"),
    Rule("buffer.seed", "trainer.args.seed", "the run's seed (data order, sampling, buffer draws)", direct=True),
    Rule("wandb.project / entity / name", "trainer.args.wandb", "turns W&B logging on; the API key comes from "
         "WANDB_API_KEY (e.g. in an env_file)"),
]


def _validate(raw: dict[str, Any]) -> HostedConfig:
    raw = dict(raw)
    if isinstance(raw.get("env"), dict):
        raw["env"] = [raw["env"]]
    if isinstance(raw.get("env_file"), str):
        raw["env_file"] = [raw["env_file"]]
    try:
        return HostedConfig.model_validate(raw)
    except ValidationError as e:
        msg = one_line(e, HostedConfig)
        if msg.startswith("env: ") and ("missing" in msg or "at least 1" in msg):
            msg = "env: required key is missing (at least one [[env]] with an id)"
        raise ConfigError(msg) from None


def _envs(h: HostedConfig, o: Any) -> None:
    """[[env]] (with buffer.env_ratios) → vf-rl's `env`: one table, or a list for several."""
    ratios = h.buffer.env_ratios if h.buffer is not None else None
    if ratios is not None and (len(ratios) != len(h.env) or any(r <= 0 for r in ratios)):
        raise ConfigError(f"buffer.env_ratios: {ratios} for {len(h.env)} [[env]]: give one positive ratio per "
                          "[[env]]")
    envs: list[dict[str, Any]] = []
    for i, e in enumerate(h.env):
        item: dict[str, Any] = {"id": e.id, "args": dict(e.args)}
        if e.name is not None:
            item["name"] = e.name
        if ratios is not None and len(h.env) > 1:
            item["ratio"] = ratios[i]
        envs.append(item)
    o.put("env", envs[0] if len(envs) == 1 else envs, "env.0" if len(envs) == 1 else "env")


def _eval(e: HostedEval, origin: dict[str, str]) -> dict[str, Any]:
    origin["eval.before"] = "eval.eval_base_model"
    for k in ("interval", "num_examples", "rollouts_per_example", "env"):
        origin[f"eval.{k}"] = f"eval.{k}"
    return {
        "interval": e.interval, "num_examples": e.num_examples, "rollouts_per_example": e.rollouts_per_example,
        "before": e.eval_base_model, "after": False,
        "env": [{k: v for k, v in x.model_dump().items() if v is not None} for x in e.env],
    }


def translate(raw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A retired-format raw config → (vf-rl raw config, origin: vf-rl key path → hosted key path)."""
    h = _validate(raw)
    print(RETIRED_WARNING, file=sys.stderr, flush=True)
    o = prime_train.Translation()
    o.put("model", h.model, "model")
    for rule in MAPPING:  # the direct rules: the hosted value, when given, as is
        if rule.direct:
            value = functools.reduce(lambda v, part: getattr(v, part, None), rule.key.split("."), h)
            o.arg(rule.target.removeprefix("trainer.args."), value, rule.key)
    if h.batch_size >= 1:
        o.arg("micro_batch_size", math.gcd(h.batch_size, DEFAULT_MICRO_BATCH), "batch_size")
    if h.trajectory_strategy == "branching":
        raise ConfigError("trajectory_strategy: 'branching' is not supported yet by the local trainer; it trains "
                          "each rollout's turns as one sample ('interleaved')")
    template = {k: v for k in ("enable_thinking", "reasoning_effort") if (v := getattr(h.sampling, k)) is not None}
    if template:
        o.arg("chat_template_kwargs", template, f"sampling.{next(iter(template))}")
    if h.sampling.max_tokens is not None:
        o.arg("max_seq_len", PROMPT_BUDGET + h.sampling.max_tokens, "sampling.max_tokens")
        o.arg("max_prompt_len", PROMPT_BUDGET, "sampling.max_tokens")
    _envs(h, o)
    if h.buffer is not None and h.buffer.skip_verification:
        raise ConfigError("buffer.skip_verification: true is not supported yet by the local trainer (rollouts "
                          "are always scored)")
    if h.wandb is not None:
        o.arg("wandb", {k: v for k, v in h.wandb.model_dump().items() if v is not None}, "wandb")
    if h.env_file:
        o.put("env_file", list(h.env_file), "env_file")
    if h.eval is not None:
        o.raw["eval"] = _eval(h.eval, o.origin)
    if h.training_mode is not None:
        o.put("training_mode", h.training_mode, "training_mode")
    if h.teacher is not None:
        o.put("teacher", h.teacher.model_dump(exclude_none=True), "teacher")
    return o.raw, o.origin
