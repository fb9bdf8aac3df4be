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
from verifiers_rl.trainer.losses import get_loss  # noqa: E402

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


def trl_loss(kind: str, b: dict, *, beta: float, level: str, eps_low: float, eps_high: float, sapo=(1.0, 1.05),
             delta=None) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's value and d loss / d log-probs: its `_compute_loss` on a trainer object holding only the settings it
    reads (a stub: constructing a GRPOTrainer needs a model and a dataset), its forward giving our tensors."""
    lp = b["lp"].clone().requires_grad_(True)
    t = object.__new__(trl_grpo.GRPOTrainer)
    t.__dict__.update(
        loss_type=kind, beta=beta, importance_sampling_level=level, epsilon_low=eps_low, epsilon_high=eps_high,
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, use_vllm=False,
        vllm_importance_sampling_correction=False, aux_loss_enabled=False, _entropy_bonus_enabled=False,
        current_gradient_accumulation_steps=1, max_completion_length=T, accelerator=_Accel(),
        model=types.SimpleNamespace(training=True), _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        args=types.SimpleNamespace(delta=delta, use_bias_correction_kl=False, sapo_temperature_pos=sapo[0],
                                   sapo_temperature_neg=sapo[1], steps_per_generation=1),
    )
    t._get_per_token_logps_and_entropies = lambda *a, **k: (lp, torch.zeros(B, T), None)
    inputs = {"prompt_ids": torch.zeros(B, 1, dtype=torch.long), "prompt_mask": torch.ones(B, 1, dtype=torch.long),
              "completion_ids": torch.zeros(B, T, dtype=torch.long), "completion_mask": b["mask"].long(),
              "advantages": b["adv"], "old_per_token_logps": b["old"], "num_items_in_batch": b["mask"].sum()}
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


def test_the_settings_a_loss_cannot_take_are_one_line_each():
    with pytest.raises(ValueError, match="importance_sampling_level='seq' is not 'token' or 'sequence'"):
        get_loss("grpo").config(importance_sampling_level="seq")
    with pytest.raises(TypeError):  # TRL refuses sequence-level ratios for bnpo, dr_grpo, dapo, cispo
        get_loss("dr_grpo").config(importance_sampling_level="sequence")
    with pytest.raises(ValueError, match="loss.temperature_neg=0 must be > 0"):
        get_loss("sapo").config(temperature_neg=0)


# --- each TRL loss type trains two steps through vf-rl ------------------------------------------------------------------

TRL_TYPES = ["grpo", "bnpo", "dr_grpo", "cispo", "sapo", "luspo"]


@pytest.mark.parametrize("kind", TRL_TYPES)
def test_each_trl_loss_type_trains_two_steps_through_vf_rl(kind, tiny_model_dir, tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).with_name("vf-rl")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "verifiers_rl.cli.rl"]
    extra = ', importance_sampling_level = "sequence"' if kind == "grpo" else ""
    (tmp_path / "run.toml").write_text(f"""
model = "{tiny_model_dir}"

[env]
id = "verifiers-rl/reverse-text"
args = {{ dataset_source = "offline", num_eval_examples = 4 }}

[inference]
backend = "local"

[eval]
before = false
after = false

[trainer.args]
max_steps = 2
batch_size = 8
rollouts_per_example = 4
micro_batch_size = 4
max_tokens = 8
max_seq_len = 128
max_prompt_len = 96
learning_rate = 1e-2
save_steps = 100
seed = 0
loss = {{ type = "{kind}", beta = 0.01{extra} }}
""")
    out = tmp_path / "out"
    r = subprocess.run([*cmd, "@", "run.toml", "--output-dir", str(out)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [s for s in steps if "loss/mean" in s]
    assert [s["step"] for s in steps] == [1, 2], steps
    assert all(s["importance_ratio/min"] > 0 and s["loss_tokens"] > 0 for s in steps), steps[-1]
