"""What the sampler is told, decided once: the trainer's log-probs assume one sampling distribution, and every request
we build and every server we start must produce exactly that one.

- vLLM fills an omitted parameter from the checkpoint's `generation_config.json` (Qwen3's `top_k = 20`), so requests
  name every parameter (`stated_knobs`) and servers ignore the checkpoint's sampling defaults (`SERVER_FLAGS`).
- `top_k`, `top_p` and `min_p` are replayed: vLLM does not return its sampling mask, so the trainer rebuilds the support
  from its own logits with vLLM's rule (`Truncation`). `repetition_penalty` cannot be and is refused.
- Each `vllm serve` API-server process keeps its own LoRA adapter table, so LoRA runs one (`lora_server_args`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from verifiers_rl.plan.gpus import server_arg

# The values that turn each vLLM sampling knob off, named in every request (vLLM's own "disabled" values).
NEUTRAL = {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0,
           "frequency_penalty": 0.0}
# vLLM's server flag: sampling defaults are vLLM's neutral ones, not the checkpoint's generation config
SERVER_FLAGS = ("--generation-config", "vllm")


@dataclass(frozen=True)
class Truncation:
    """The part of the sampling distribution a sampler keeps (after temperature): vLLM's order, min_p, then top_k,
    then top_p over what top_k kept. `top_k` 0 and `min_p` 0 and `top_p` 1 keep everything."""

    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0

    @property
    def active(self) -> bool:
        return self.top_k > 0 or self.top_p < 1.0 or self.min_p > 0.0

    def describe(self) -> str:
        parts = [f"top_k {self.top_k}" if self.top_k > 0 else "", f"top_p {self.top_p:g}" if self.top_p < 1 else "",
                 f"min_p {self.min_p:g}" if self.min_p > 0 else ""]
        return ", ".join(p for p in parts if p) or "none"


def truncation_of(temperature: float, top_k: int | None, top_p: float, min_p: float) -> Truncation:
    """The support a sampler with these settings keeps; none for greedy sampling (temperature 0), whose log-probs
    vLLM and the local engine report over the whole vocabulary."""
    if temperature <= 0:
        return Truncation()
    return Truncation(top_k=max(int(top_k or 0), 0), top_p=float(top_p), min_p=float(min_p))


def stated_knobs(temperature: float, top_p: float, top_k: int | None, min_p: float,
                     repetition_penalty: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """(top-level arguments, `extra_body`) of a chat-completions request that names every sampling parameter: the
    ones set, and each knob's neutral value where it is off (never left for the server to fill)."""
    top = {"temperature": temperature, "top_p": top_p, "presence_penalty": NEUTRAL["presence_penalty"],
           "frequency_penalty": NEUTRAL["frequency_penalty"]}
    extra = {"top_k": NEUTRAL["top_k"] if top_k is None or top_k <= 0 else int(top_k), "min_p": float(min_p),
             "repetition_penalty": float(repetition_penalty)}
    return top, extra


def without_neutral(sampling_args: dict[str, Any]) -> dict[str, Any]:
    """Request arguments without the knobs at their neutral value, for a server the trainer does not score against
    (an sft teacher: any OpenAI-compatible API, which may refuse vLLM's extra keys)."""
    out = {k: v for k, v in sampling_args.items() if not (k in NEUTRAL and v == NEUTRAL[k])}
    extra = {k: v for k, v in dict(out.pop("extra_body", None) or {}).items()
             if not (k in NEUTRAL and v == NEUTRAL[k])}
    return {**out, "extra_body": extra} if extra else out


def training_problem(repetition_penalty: float) -> str | None:
    """Why these sampling settings cannot be trained on (one line), or None."""
    if repetition_penalty != 1.0:
        return (f"repetition_penalty={repetition_penalty:g}: the sampler's penalized distribution depends on every "
                "earlier token, and the trainer's log-probs do not re-apply it (its importance ratios would be "
                "biased); set repetition_penalty = 1.0")
    return None


def lora_server_args(args: dict[str, Any], replicas: int, use_lora: bool) -> dict[str, Any]:
    """A started server's arguments for LoRA on `replicas` data-parallel replicas (see the module docstring); one
    line for an asked count above 1."""
    if not use_lora or replicas <= 1:
        return args
    asked = server_arg(args, "api_server_count")
    if asked is not None and int(asked) != 1:
        raise ValueError(f"inference.args.api_server_count = {asked}: with LoRA each API-server process keeps its own "
                         "adapter table and a sync reaches one of them; remove it (one API server feeds all "
                         f"{replicas} replicas) or train without LoRA")
    return {**args, "api_server_count": 1}


def lora_layout_line(replicas: int, use_lora: bool) -> str | None:
    if not use_lora or replicas <= 1:
        return None
    return (f"LoRA on {replicas} data-parallel replicas: one API-server process (--api-server-count 1) takes every "
            "request and sends each adapter load to all engines, so every replica serves the synced version")


@dataclass(frozen=True)
class SamplingPlan:
    """What reached the sampler, as the plan records it (plan.json, run.json) and the console prints it."""

    temperature: float
    top_p: float
    top_k: int
    min_p: float
    repetition_penalty: float
    truncation: str
    server_generation_config: str | None  # the flag a started server gets; None: no server started here

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        top, extra = stated_knobs(self.temperature, self.top_p, self.top_k, self.min_p, self.repetition_penalty)
        sent = ", ".join(f"{k} {v:g}" for k, v in {**top, **extra}.items())
        where = (f"; the server ignores the checkpoint's sampling defaults ({' '.join(SERVER_FLAGS)})"
                 if self.server_generation_config else "")
        scored = ("the trainer scores the same truncated support (" + self.truncation + ")"
                  if self.truncation != "none" else "the trainer scores the whole vocabulary")
        return f"sampling: every request states {sent}{where}; {scored}"


def sampling_plan(args: Any, *, start_server: bool) -> SamplingPlan:
    """The run's sampling as it reaches the sampler (an RLConfig's settings; `start_server`: a vLLM server is
    started by the run and gets `SERVER_FLAGS`)."""
    top_k = int(args.top_k) if args.top_k is not None and args.top_k > 0 else NEUTRAL["top_k"]
    trunc = truncation_of(args.temperature, args.top_k, args.top_p, args.min_p)
    return SamplingPlan(float(args.temperature), float(args.top_p), top_k, float(args.min_p),
                        float(args.repetition_penalty), trunc.describe(),
                        SERVER_FLAGS[1] if start_server else None)
