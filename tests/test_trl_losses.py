"""Each of TRL's loss types here equals TRL 1.16's own: the loss value and its gradient, computed by TRL's
`GRPOTrainer._compute_loss` on the same tensors (its log-prob forward replaced by the tensors: the one part that
needs a model; no TRL formula is copied), within 1e-6, with masked tokens, uneven lengths and a KL term.

TRL's trainer state and ours: its `old_per_token_logps` are our sampler log-probs; one micro-batch, no gradient
accumulation, one process, so `num_items_in_batch` is the batch's loss tokens, `max_completion_length` the
width of the completion, and our step totals are this batch's (losses/trl_types.py says which stands for which)."""

from __future__ import annotations

import types
from collections import defaultdict

import pytest
import torch

trl_grpo = pytest.importorskip("trl.trainer.grpo_trainer")

from verifiers_rl.trainer.loss import LossInputs  # noqa: E402
from verifiers_rl.trainer.typed_table import get_loss  # noqa: E402

B, T = 5, 9


def batch(seed: int, beta: float) -> dict:
    g = torch.Generator().manual_seed(seed)
    lengths = [9, 4, 7, 1, 6]  # uneven: the mask ends early; one sequence of one token
    mask = torch.zeros(B, T)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    mask[2, 3] = 0  # a masked token inside a sequence (an env response)
    lp = -torch.rand(B, T, generator=g) * 3 - 0.05
    old = lp + torch.randn(B, T, generator=g) * 0.4  # ratios well inside and outside the clip
    ref = lp + torch.randn(B, T, generator=g) * 0.3
    adv = torch.randn(B, generator=g)
    adv[1] = 0.0
    return {"lp": lp, "old": old, "ref": ref if beta else None, "mask": mask, "adv": adv}


class _Accel:
    num_processes = 1
    sync_gradients = True

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x


VESPO = (2.0, 3.0, 3.0, 2.0)  # TRL's vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg


def trl_loss(kind: str, b: dict, *, beta: float, level: str, eps_low: float, eps_high: float, sapo=(1.0, 1.05),
             delta=None, vespo=VESPO, is_ratio=None, bias=True) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's value and d loss / d log-probs: its `_compute_loss` on a trainer object holding only the settings it
    reads (a stub: constructing a GRPOTrainer needs a model and a dataset), its forward giving our tensors.
    `is_ratio`: TRL's vLLM sampler correction is on, with these weights; its old log-probs are then the trainer's
    own (recomputed before the update: the current ones, detached) and `b["old"]` is the sampler's."""
    lp = b["lp"].clone().requires_grad_(True)
    t = object.__new__(trl_grpo.GRPOTrainer)
    t.__dict__.update(
        loss_type=kind, beta=beta, importance_sampling_level=level, epsilon_low=eps_low, epsilon_high=eps_high,
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, use_vllm=is_ratio is not None,
        vllm_importance_sampling_correction=is_ratio is not None, aux_loss_enabled=False,
        _entropy_bonus_enabled=False, current_gradient_accumulation_steps=1, max_completion_length=T,
        accelerator=_Accel(), model=types.SimpleNamespace(training=True),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        args=types.SimpleNamespace(delta=delta, use_bias_correction_kl=bias, sapo_temperature_pos=sapo[0],
                                   sapo_temperature_neg=sapo[1], steps_per_generation=1, vespo_k_pos=vespo[0],
                                   vespo_lambda_pos=vespo[1], vespo_k_neg=vespo[2], vespo_lambda_neg=vespo[3]),
    )
    t._get_per_token_logps_and_entropies = lambda *a, **k: (lp, torch.zeros(B, T), None)
    inputs = {"prompt_ids": torch.zeros(B, 1, dtype=torch.long), "prompt_mask": torch.ones(B, 1, dtype=torch.long),
              "completion_ids": torch.zeros(B, T, dtype=torch.long), "completion_mask": b["mask"].long(),
              "advantages": b["adv"], "old_per_token_logps": b["old"], "num_items_in_batch": b["mask"].sum()}
    if is_ratio is not None:
        inputs.update(old_per_token_logps=b["lp"].clone(), sampling_per_token_logps=b["old"],
                      importance_sampling_ratio=is_ratio)
    if beta:
        inputs["ref_per_token_logps"] = b["ref"]
    loss = t._compute_loss(None, inputs)
    loss.backward()
    return loss.detach(), lp.grad


def our_loss(kind: str, b: dict, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
    spec = get_loss(kind)
    lp = b["lp"].clone().requires_grad_(True)
    inputs = LossInputs(trainer_logprobs=lp, sampling_logprobs=b["old"], advantages=b["adv"],
                        loss_mask=b["mask"].bool(), total_loss_tokens=int(b["mask"].sum()), ref_logprobs=b["ref"],
                        total_sequences=B, total_micro_batches=1, max_completion_length=T)
    out = spec.fn(inputs, spec.config(**config))
    out.loss.backward()
    return out.loss.detach(), lp.grad


CASES = [  # (our loss.type and its keys, TRL's loss_type and settings)
    ("grpo", {}, "grpo", {"eps_low": 0.2, "eps_high": 0.2}),
    ("grpo", {"epsilon_high": 0.28, "beta": 0.04}, "grpo", {"eps_low": 0.2, "eps_high": 0.28, "beta": 0.04}),
    ("grpo", {"delta": 1.5}, "grpo", {"eps_low": 0.2, "eps_high": 0.2, "delta": 1.5}),
    ("grpo", {"importance_sampling_level": "sequence"}, "grpo",  # GSPO
     {"eps_low": 3e-4, "eps_high": 4e-4, "level": "sequence"}),
    ("bnpo", {"beta": 0.1}, "bnpo", {"eps_low": 0.2, "eps_high": 0.2, "beta": 0.1}),
    ("dr_grpo", {}, "dr_grpo", {"eps_low": 0.2, "eps_high": 0.2}),
    ("dapo", {}, "dapo", {"eps_low": 0.2, "eps_high": 0.28}),
    ("cispo", {}, "cispo", {"eps_low": 0.2, "eps_high": 5.0}),
    ("cispo", {"epsilon_high": 1.1, "beta": 0.02}, "cispo", {"eps_low": 0.2, "eps_high": 1.1, "beta": 0.02}),
    ("sapo", {}, "sapo", {"eps_low": 0.2, "eps_high": 0.2}),
    ("sapo", {"importance_sampling_level": "sequence", "temperature_pos": 2.0}, "sapo",
     {"eps_low": 0.2, "eps_high": 0.2, "level": "sequence", "sapo": (2.0, 1.05)}),
    ("luspo", {}, "luspo", {"eps_low": 0.2, "eps_high": 0.2, "level": "sequence"}),
    ("vespo", {}, "vespo", {"eps_low": 0.2, "eps_high": 0.2}),
    ("dapo", {"beta": 0.04, "delta": 2.0}, "dapo", {"eps_low": 0.2, "eps_high": 0.28, "beta": 0.04, "delta": 2.0}),
    ("vespo", {"k_pos": 1.0, "lambda_neg": 4.0, "beta": 0.05}, "vespo",
     {"eps_low": 0.2, "eps_high": 0.2, "vespo": (1.0, 3.0, 3.0, 4.0), "beta": 0.05}),
    # TRL's KL without its bias correction (use_bias_correction_kl=False; before, the only KL here)
    ("grpo", {"beta": 0.04, "use_bias_correction_kl": False}, "grpo",
     {"eps_low": 0.2, "eps_high": 0.2, "beta": 0.04, "bias": False}),
    # a sequence-level ratio for every clipped type and cispo (before: token level, in silence), luspo's at token
    # level (before: sequence always), with the KL's bias correction on a sequence ratio
    ("dapo", {"importance_sampling_level": "sequence", "beta": 0.04}, "dapo",
     {"eps_low": 0.2, "eps_high": 0.28, "level": "sequence", "beta": 0.04}),
    ("bnpo", {"importance_sampling_level": "sequence"}, "bnpo", {"eps_low": 0.2, "eps_high": 0.2, "level": "sequence"}),
    ("dr_grpo", {"importance_sampling_level": "sequence"}, "dr_grpo",
     {"eps_low": 0.2, "eps_high": 0.2, "level": "sequence"}),
    ("cispo", {"importance_sampling_level": "sequence", "epsilon_high": 1.1}, "cispo",
     {"eps_low": 0.2, "eps_high": 1.1, "level": "sequence"}),
    ("luspo", {"importance_sampling_level": "token"}, "luspo", {"eps_low": 0.2, "eps_high": 0.2}),
    ("sapo", {"importance_sampling_level": "sequence", "beta": 0.04}, "sapo",
     {"eps_low": 0.2, "eps_high": 0.2, "level": "sequence", "beta": 0.04}),
    # vespo's weight ignores the level; TRL's KL bias correction reads it (before: dropped, in silence)
    ("vespo", {"importance_sampling_level": "sequence", "beta": 0.05}, "vespo",
     {"eps_low": 0.2, "eps_high": 0.2, "level": "sequence", "beta": 0.05}),
    ("vespo", {"importance_sampling_level": "sequence", "beta": 0.05, "use_bias_correction_kl": False}, "vespo",
     {"eps_low": 0.2, "eps_high": 0.2, "level": "sequence", "beta": 0.05, "bias": False}),
]


@pytest.mark.parametrize("ours, config, theirs, settings", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
@pytest.mark.parametrize("seed", [0, 1])
def test_each_loss_type_equals_trls_own_value_and_gradient(ours, config, theirs, settings, seed):
    settings = {"beta": 0.0, "level": "token", **settings}
    if ours == "grpo" and settings["level"] == "sequence":  # GSPO's clip range (its paper: 3e-4, 4e-4)
        config = {**config, "epsilon_low": 3e-4, "epsilon_high": 4e-4}
    b = batch(seed, settings["beta"])
    want, want_grad = trl_loss(theirs, b, **settings)
    got, got_grad = our_loss(ours, b, config)
    assert torch.allclose(got, want, atol=1e-6, rtol=0), (got.item(), want.item())
    assert torch.allclose(got_grad, want_grad, atol=1e-6, rtol=0), (got_grad - want_grad).abs().max()
    assert torch.all(got_grad[b["mask"] == 0] == 0)  # masked tokens get no gradient
    assert want.abs() > 1e-4  # a case where the loss is not trivially zero


def documented_is_ratio(trainer_lp, sampling_lp, mask, mode: str, lo, hi) -> torch.Tensor:
    """TRL's vLLM importance-sampling weights as GRPOConfig documents `vllm_importance_sampling_mode` (TRL computes
    them inline in its generation step, which needs a model and a vLLM server): exp(trainer - sampler) per token,
    or per sequence over its loss tokens; `*_truncate` clips to [lo, hi], `*_mask` sets ratios outside to 0."""
    diff = (trainer_lp - sampling_lp) * mask
    ratio = torch.exp(diff.sum(-1, keepdim=True) if mode.startswith("sequence") else diff)
    if mode.endswith("truncate"):
        return ratio.clamp(min=lo, max=hi)
    keep = (ratio >= (lo if lo is not None else float("-inf"))) & (ratio <= (hi if hi is not None else float("inf")))
    return ratio * keep


IS_CASES = [  # (our loss.type and keys, TRL's settings, the correction's mode and clip range)
    ("grpo", {}, {"eps_low": 0.2, "eps_high": 0.2}, "token_truncate", None, 3.0),
    ("grpo", {"beta": 0.04}, {"eps_low": 0.2, "eps_high": 0.2, "beta": 0.04}, "token_mask", 0.5, 1.5),
    ("dr_grpo", {}, {"eps_low": 0.2, "eps_high": 0.2}, "sequence_truncate", 0.5, 2.0),
    ("dapo", {}, {"eps_low": 0.2, "eps_high": 0.28}, "token_truncate", 0.8, 1.25),
    ("cispo", {}, {"eps_low": 0.2, "eps_high": 5.0}, "sequence_mask", None, 3.0),  # TRL's default mode
    ("sapo", {}, {"eps_low": 0.2, "eps_high": 0.2}, "token_mask", None, 1.3),
    ("vespo", {}, {"eps_low": 0.2, "eps_high": 0.2}, "token_truncate", None, 1.2),
    ("vespo", {}, {"eps_low": 0.2, "eps_high": 0.2}, "token_mask", 0.7, 1.4),
]


@pytest.mark.parametrize("ours, config, settings, mode, lo, hi", IS_CASES,
                         ids=[f"{c[0]}-{c[3]}" for c in IS_CASES])
def test_the_sampler_correction_equals_trls_vllm_importance_sampling(ours, config, settings, mode, lo, hi):
    settings = {"beta": 0.0, "level": "token", **settings}
    b = batch(3, settings["beta"])
    is_ratio = documented_is_ratio(b["lp"], b["old"], b["mask"], mode, lo, hi)
    want, want_grad = trl_loss(ours, b, **settings, is_ratio=is_ratio)
    keys = {"importance_sampling_mode": mode, "importance_sampling_clip_min": lo, "importance_sampling_clip_max": hi}
    spec = get_loss(ours)
    lp = b["lp"].clone().requires_grad_(True)
    out = spec.fn(LossInputs(trainer_logprobs=lp, sampling_logprobs=b["old"], advantages=b["adv"],
                             loss_mask=b["mask"].bool(), total_loss_tokens=int(b["mask"].sum()), ref_logprobs=b["ref"],
                             total_sequences=B, total_micro_batches=1, max_completion_length=T),
                  spec.config(**config, **keys))
    out.loss.backward()
    assert torch.allclose(out.loss.detach(), want, atol=1e-6, rtol=0), (out.loss.item(), want.item())
    assert torch.allclose(lp.grad, want_grad, atol=1e-6, rtol=0), (lp.grad - want_grad).abs().max()
    assert want.abs() > 1e-4
    # the metrics the correction implies, over the loss tokens
    m = b["mask"].bool()
    w = is_ratio.expand(B, T)[m]
    got = out.metrics
    assert torch.isclose(got["importance_sampling/ratio/mean"], w.mean())
    assert torch.isclose(got["importance_sampling/ratio/max"], w.max())
    assert torch.isclose(got["importance_sampling/ratio/min"], w.min())
    assert torch.isclose(got["importance_sampling/masked_fraction"], (w == 0).float().mean())
    if mode.endswith("mask") and ours != "vespo":  # the zeroed tokens are reported without gradient
        assert (w == 0).any() and torch.equal(out.no_gradient[m] & (is_ratio.expand(B, T)[m] == 0), (w == 0))


def test_the_settings_a_loss_cannot_take_are_one_line_each():
    with pytest.raises(ValueError, match="importance_sampling_level='seq' is not 'token' or 'sequence'"):
        get_loss("grpo").config(importance_sampling_level="seq")
    with pytest.raises(ValueError, match="importance_sampling_level='seq' is not 'token' or 'sequence'"):
        get_loss("vespo").config(importance_sampling_level="seq")
    with pytest.raises(TypeError):  # TRL's cispo has no lower clip (it ignores epsilon), nor a delta
        get_loss("cispo").config(epsilon_low=0.1)
    with pytest.raises(ValueError, match="loss.temperature_neg=0 must be > 0"):
        get_loss("sapo").config(temperature_neg=0)
    with pytest.raises(ValueError, match="loss.importance_sampling_mode='token' is not one of none, token_truncate"):
        get_loss("grpo").config(importance_sampling_mode="token")
    with pytest.raises(ValueError, match="vespo takes 'none', 'token_truncate' or 'token_mask'"):
        get_loss("vespo").config(importance_sampling_mode="sequence_mask")
    with pytest.raises(ValueError, match=r"loss.importance_sampling_clip_min=2.0 must be in \[0, clip_max=1.5\)"):
        get_loss("cispo").config(importance_sampling_clip_min=2.0, importance_sampling_clip_max=1.5)


# --- each TRL loss type trains two steps through vf-rl ------------------------------------------------------------------

TRL_TYPES = ["grpo", "bnpo", "dr_grpo", "cispo", "sapo", "luspo", "vespo"]


def _loss_line(kind: str) -> str:
    extra = {"grpo": ', importance_sampling_level = "sequence"',  # GSPO
             "cispo": ', importance_sampling_mode = "sequence_mask"',  # TRL's default sampler correction
             "vespo": ', importance_sampling_mode = "token_truncate"'}.get(kind, "")
    return f'loss = {{ type = "{kind}", beta = 0.01{extra} }}'


@pytest.mark.integration  # vf-rl runs its trainer in a worker process
def test_a_trl_loss_type_trains_two_steps_through_vf_rls_worker(tiny_model_dir, tmp_path, monkeypatch):
    from two_steps import two_steps_through_vf_rl

    _check_two_steps("vespo", two_steps_through_vf_rl(tiny_model_dir, tmp_path, monkeypatch, _loss_line("vespo")))


@pytest.mark.parametrize("kind", TRL_TYPES)
def test_each_trl_loss_type_trains_two_steps_from_a_vf_rl_config(kind, tiny_model_dir, tmp_path, monkeypatch):
    """Each type from a vf-rl config, checked and resolved by vf-rl, trained by the worker's code in this process
    (the worker process itself: the test above)."""
    from two_steps import two_steps_in_process

    _check_two_steps(kind, two_steps_in_process(tiny_model_dir, tmp_path, monkeypatch, _loss_line(kind)))


def _check_two_steps(kind: str, steps: list[dict]) -> None:
    assert [s["step"] for s in steps] == [1, 2], steps
    assert all(s["importance_ratio/min"] > 0 and s["loss_tokens"] > 0 for s in steps), steps[-1]
    if kind in ("cispo", "vespo"):  # the sampler correction's metrics reach the run's log
        assert all(0 < s["importance_sampling/ratio/mean"] <= 3.0 for s in steps), steps[-1]
