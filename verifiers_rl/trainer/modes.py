"""Training modes, ``rl`` | ``opd`` | ``sft`` (``RLConfig.training_mode``; docs/training-modes.md): what a step's
rollouts are and which loss trains on them. The settings' rules are here (``mode_problem``).
"""

from __future__ import annotations

from typing import Any

from verifiers_rl.record import get_field

TRAINING_MODES = ("rl", "opd", "sft")
_TEACHER_FIELDS = ("teacher_model", "teacher_url", "teacher_model_name", "teacher_api_key_var")


def mode_problem(c: Any, name: Any = str) -> tuple[str, str] | None:
    """What is wrong with an RLConfig's mode settings: (the field, one line naming it and the fix), or None.
    ``name`` spells a field as the caller's user wrote it (a vf-rl config: ``teacher.model``)."""
    mode = c.training_mode
    if mode not in TRAINING_MODES:
        return "training_mode", f"{name('training_mode')}={mode!r} is not one of {', '.join(TRAINING_MODES)}"
    set_fields = [f for f in _TEACHER_FIELDS if getattr(c, f) is not None]
    if mode == "rl":
        if set_fields or c.sft_min_reward is not None:
            field_name = (set_fields or ["sft_min_reward"])[0]
            key = name(field_name)
            return field_name, f"{key} is set but training_mode='rl'; set training_mode='opd' or 'sft', or remove {key}"
        return None
    model, url = name("teacher_model"), name("teacher_url")
    if c.teacher_model is None and c.teacher_url is None:
        return "training_mode", (f"training_mode={mode!r} needs a teacher: set {model} (a model dir, loaded "
                                 f"in-process) or {url} (a server)")
    if c.teacher_model is not None and c.teacher_url is not None:
        return "teacher_model", f"{model} and {url} are both set; keep one (a model loaded in-process, or a server)"
    if c.teacher_model_name is not None and c.teacher_url is None:
        return "teacher_model_name", (f"{name('teacher_model_name')} names the model at {url}, which is not set; "
                                      f"remove it or set {url}")
    if c.sft_min_reward is not None and mode != "sft":
        return "sft_min_reward", f"{name('sft_min_reward')} applies to training_mode='sft', not {mode!r}; remove it"
    loss = getattr(c, "loss", None)
    in_table = get_field(loss, "beta")
    in_table = isinstance(in_table, (int, float)) and in_table > 0  # a wrong type: the loss's own check names it
    for field_name, key, active in (("beta", "beta", (c.beta or 0) > 0), ("loss", "loss.beta", in_table),
                                    ("online_difficulty_filtering", "online_difficulty_filtering",
                                     c.online_difficulty_filtering),
                                    ("filter_zero_advantages", "filter_zero_advantages", c.filter_zero_advantages)):
        if active:
            return field_name, f"{name(key)} applies to training_mode='rl' (rewards), not {mode!r}; remove it"
    return None


def logprob_temperature(temperature: float) -> float:
    """The temperature the trainer's log-probs are taken at: the sampling one, 1.0 for greedy sampling (0), whose
    sampler log-probs are of the raw logits (the local engine; vLLM with processed logprobs)."""
    return temperature if temperature > 0 else 1.0


class RLMode:
    """``rl``; also the base of the distillation modes (same rollouts and batching, another loss)."""

    name = "rl"

    def __init__(self, trainer: Any, teacher: Any = None):
        from verifiers_rl.plan.sampling import truncation_of
        from verifiers_rl.trainer.typed_table import resolve_loss

        self.trainer = trainer
        self.args = a = trainer.args
        self.teacher = teacher  # opd / sft: trainer/teacher.py
        self.temperature = logprob_temperature(a.temperature)

        # the support the sampler keeps (top_k / top_p / min_p): log-probs, entropy and the reference's over it
        self.truncation = truncation_of(a.temperature, a.top_k, a.top_p, a.min_p)

        # the loss this mode's inputs go to (trainer/losses/: loss.type, or the mode's own)
        self.loss_spec, self.loss_config = resolve_loss(self.args)

    def generation(self, client: Any, model_name: Any) -> tuple[Any, Any]:
        """The client and model name the orchestrator's rollouts come from: the policy's."""
        return client, model_name

    def sampling_args(self) -> dict[str, Any]:
        """The rollouts' request arguments: every knob named (plan/sampling.py), the trainer scores them."""
        return self.args.sampling_args()

    def samples(self, states: list[dict[str, Any]], advantages: list[float]) -> list[Any]:
        from verifiers_rl.trainer.batching import build_samples

        a = self.args
        return build_samples(states, advantages, max_seq_len=a.max_seq_len, mask_env_responses=a.mask_env_responses,
                             mask_truncated_completions=a.mask_truncated_completions, max_prompt_len=a.max_prompt_len,
                             filter_zero_advantages=a.filter_zero_advantages)  # rl only: mode_problem

    def loss(self, model: Any, mb: Any, lp: Any, sampling: Any, totals: Any) -> Any:
        from verifiers_rl.trainer.loss import LossInputs

        # a loss with a reference KL weight (beta) gets the reference policy's log-probs
        ref = reference_logprobs(self.trainer, model, mb) if getattr(self.loss_config, "beta", 0) > 0 else None
        inputs = LossInputs(trainer_logprobs=lp, sampling_logprobs=sampling, advantages=mb.advantages,
                            loss_mask=mb.loss_mask, total_loss_tokens=totals.tokens, ref_logprobs=ref,
                            total_sequences=totals.sequences, total_micro_batches=totals.micro_batches,
                            max_completion_length=self.args.max_tokens or self.args.max_seq_len)
        return self.loss_spec.fn(inputs, self.loss_config)

    def close(self) -> None:
        if self.teacher is not None:
            self.teacher.close()


def reference_logprobs(trainer: Any, model: Any, mb: Any) -> Any:
    """The reference (initial) policy's log-probs for ``beta``: its frozen copy, or the base under the adapter."""
    import torch

    from verifiers_rl.trainer.logprobs import policy_token_logprobs

    with torch.no_grad():
        args = (mb.input_ids, mb.attention_mask, logprob_temperature(trainer.args.temperature))
        trunc = trainer.mode.truncation  # the sampler's, as the policy's own log-probs use
        if trainer.ref_model is not None:
            return policy_token_logprobs(trainer.ref_model, *args, mask=mb.loss_mask, truncation=trunc)[0]
        with trainer.accelerator.unwrap_model(model).disable_adapter():
            return policy_token_logprobs(model, *args, mask=mb.loss_mask, truncation=trunc)[0]


class OPDMode(RLMode):
    name = "opd"

    def __init__(self, trainer: Any, teacher: Any):
        super().__init__(trainer, teacher)
        self._scores: dict[int, list[float]] = {}  # by URL: id(sample) → the teacher's per-token log-probs

    def samples(self, states: list[dict[str, Any]], advantages: list[float]) -> list[Any]:
        samples = super().samples(states, advantages)
        if self.teacher.url is not None:
            scored = [s for s in samples if any(s.loss_mask)]
            self._scores = {id(s): lp for s, lp in zip(scored, self.teacher.score([s.input_ids for s in scored]))}
        return samples

    def _teacher_logprobs(self, mb: Any, mask: Any) -> Any:
        import torch

        if self.teacher.url is None:
            return self.teacher.logprobs(mb.input_ids, mb.attention_mask, mask)
        out = torch.zeros(mb.input_ids.shape, dtype=torch.float32)
        for r, s in enumerate(mb.samples):
            lp = self._scores.get(id(s))
            if lp is not None:
                out[r, :len(lp)] = torch.tensor(lp, dtype=torch.float32)
        return out.to(mb.input_ids.device)

    def loss(self, model: Any, mb: Any, lp: Any, sampling: Any, totals: Any) -> Any:
        from verifiers_rl.trainer.distill_loss import DistillInputs

        mask = mb.loss_mask & ~mb.env_mask  # the KL only on the policy's own sampled tokens
        inputs = DistillInputs(trainer_logprobs=lp, loss_mask=mask, total_loss_tokens=totals.tokens,
                               sampling_logprobs=sampling, teacher_logprobs=self._teacher_logprobs(mb, mask))
        return self.loss_spec.fn(inputs, self.loss_config)


class SFTMode(RLMode):
    name = "sft"

    def __init__(self, trainer: Any, teacher: Any):
        super().__init__(trainer, teacher)
        self.temperature = 1.0  # cross-entropy of the policy itself, whatever temperature the teacher sampled at
        self.truncation = None

    def generation(self, client: Any, model_name: Any) -> tuple[Any, Any]:
        from verifiers_rl.clients.openai_chat_completions_client import OpenAIChatCompletionsClient

        teacher = OpenAIChatCompletionsClient(self.teacher.chat_client(self.args.max_seq_len),
                                              allow_empty=self.args.keep_empty_replies)
        name = self.teacher.name
        return teacher, lambda: name

    def sampling_args(self) -> dict[str, Any]:
        """The teacher's samples are learned from, not scored against its log-probs: neutral knobs left out, so
        any OpenAI-compatible teacher takes the request."""
        from verifiers_rl.plan.sampling import without_neutral

        return without_neutral(self.args.sampling_args())

    def samples(self, states: list[dict[str, Any]], advantages: list[float]) -> list[Any]:
        from verifiers_rl.trainer.teacher_samples import teacher_samples

        a = self.args
        return teacher_samples(states, self.trainer.processing_class, max_seq_len=a.max_seq_len,
                               max_prompt_len=a.max_prompt_len, min_reward=a.sft_min_reward,
                               tools=getattr(self.trainer.env, "tool_defs", None))

    def loss(self, model: Any, mb: Any, lp: Any, sampling: Any, totals: Any) -> Any:
        from verifiers_rl.trainer.distill_loss import DistillInputs

        inputs = DistillInputs(trainer_logprobs=lp, loss_mask=mb.loss_mask, total_loss_tokens=totals.tokens)
        return self.loss_spec.fn(inputs, self.loss_config)


def build_mode(trainer: Any) -> RLMode:
    """The trainer's mode object; loads the teacher (opd/sft), checking an opd teacher's vocabulary."""
    mode = trainer.args.training_mode
    if mode == "rl":
        return RLMode(trainer)
    from verifiers_rl.trainer.teacher import Teacher

    teacher = Teacher(trainer.args, trainer.processing_class, trainer.args.device)
    return OPDMode(trainer, teacher) if mode == "opd" else SFTMode(trainer, teacher)
