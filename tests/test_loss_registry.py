"""Losses chosen by `loss.type` (trainer/losses/): the registry, each loss's own config checks, DAPO's loss on a
hand-worked example, the RLConfig / [trainer.args.loss] key, the trainer naming no loss's metric, and a real
two-step RLTrainer run with the DAPO loss on the tiny model."""

from __future__ import annotations

import ast
import dataclasses
import math
import os
import re
from pathlib import Path

import pytest
import torch

import verifiers_rl as vf
from verifiers_rl.config.loading import ConfigError, parse_args
from verifiers_rl.config.schema import resolve_run
from verifiers_rl.trainer.loss import LossConfig, LossInputs, compute_loss
from verifiers_rl.trainer.losses import LOSSES, MODE_LOSS
from verifiers_rl.trainer.typed_table import get_loss, loss_types
from verifiers_rl.trainer.losses.distill import SFTLossConfig
from verifiers_rl.trainer.typed_table import resolve_loss
from verifiers_rl.trainer.losses.trl_types import DAPO, DAPOLossConfig

dapo_loss = DAPO.fn

REPO = Path(__file__).resolve().parents[1]
SMALL = dict(batch_size=4, micro_batch_size=2, rollouts_per_example=2, report_to="none")


def config(tmp_path, **kw) -> vf.RLConfig:
    return vf.RLConfig(output_dir=str(tmp_path / "o"), **{**SMALL, **kw})


# --- registry ---------------------------------------------------------------------------------------------------------


def test_registry_names_each_loss_with_its_own_config_and_mode():
    trl = ["grpo", "bnpo", "dr_grpo", "cispo", "sapo", "luspo", "vespo"]  # TRL's loss types (tests/test_trl_losses.py)
    assert loss_types() == ["default", "dapo", *trl, "opd", "sft"]
    assert loss_types("rl") == ["default", "dapo", *trl] and loss_types("opd") == ["opd"] and loss_types("sft") == ["sft"]
    for name in LOSSES:
        spec = get_loss(name)
        assert spec.name == name and dataclasses.is_dataclass(spec.config) and callable(spec.fn)
        spec.config()  # the defaults are valid
    assert {get_loss(MODE_LOSS[m]).mode for m in MODE_LOSS} == set(MODE_LOSS)
    assert get_loss("default").config is LossConfig and get_loss("dapo").config is DAPOLossConfig
    assert get_loss("sft").config is SFTLossConfig


def test_unknown_type_is_one_line_listing_the_registered_ones():
    with pytest.raises(ValueError) as e:
        get_loss("gspoo")
    assert str(e.value) == ("loss.type='gspoo' is not one of default, dapo, grpo, bnpo, dr_grpo, cispo, sapo, luspo, vespo, opd, sft; "
                            "set loss.type to one of them, or to an import path 'package.module:SPEC'")


@pytest.mark.parametrize("cls, kw, match", [
    (LossConfig, dict(mask_ratio_low=1.5),
     "loss.mask_ratio_low=1.5 and loss.mask_ratio_high=8.0 must satisfy 0 <= low < 1"),
    (LossConfig, dict(mask_ratio_high=0.9), "loss.mask_ratio_high=0.9 must satisfy"),
    (LossConfig, dict(kl_tau=-1.0), "loss.kl_tau=-1.0 must be >= 0"),
    (LossConfig, dict(beta=-0.5), "loss.beta=-0.5 must be >= 0"),
    (DAPOLossConfig, dict(epsilon_low=1.0), r"loss.epsilon_low=1.0 must be in \[0, 1\) \(TRL's epsilon: 0.2\)"),
    (DAPOLossConfig, dict(epsilon_high=0.0), r"loss.epsilon_high=0.0 must be > 0"),
])
def test_each_loss_config_checks_its_own_values_in_one_line(cls, kw, match):
    with pytest.raises(ValueError, match=match) as e:
        cls(**kw)
    assert "\n" not in str(e.value)


# --- DAPO on a hand-worked example -------------------------------------------------------------------------------------


def dapo_example():
    """Two rollouts, A = +1 and A = -1, ratios chosen around DAPO's window [0.8, 1.28]; the last token of row 1 is
    off the mask with a placeholder log-prob of 120 (must not turn into NaN)."""
    ratios = torch.tensor([[1.5, 0.5, 1.0, 1.0], [0.5, 1.5, 1.0, 1.0]])
    sampling = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-1.5, -0.7, -1.0, 0.0]])
    trainer = (sampling + ratios.log()).clone()
    trainer[1, 3] = 120.0
    trainer.requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]], dtype=torch.bool)
    return trainer, sampling, torch.tensor([1.0, -1.0]), mask


def test_dapo_loss_metrics_and_gradient_match_the_hand_computed_values():
    trainer, sampling, adv, mask = dapo_example()
    out = dapo_loss(LossInputs(trainer, sampling, adv, mask, total_loss_tokens=6), DAPOLossConfig())
    # per token -min(r A, clip(r, 0.8, 1.28) A):
    #   row 0 (A=+1): r=1.5 -> -1.28 (clipped), r=0.5 -> -0.5, r=1 -> -1
    #   row 1 (A=-1): r=0.5 -> +0.8 (clipped), r=1.5 -> +1.5, r=1 -> +1
    # sum = -1.28 - 0.5 - 1 + 0.8 + 1.5 + 1 = 0.52, over 6 loss tokens
    assert out.loss.item() == pytest.approx(0.52 / 6, abs=1e-6)
    out.loss.backward()
    # d/d lp of -r A is -r A (r = exp(lp - sampling)); the clipped tokens have none; divided by the 6 tokens
    expected = torch.tensor([[0.0, -0.5, -1.0, 0.0], [0.0, 1.5, 1.0, 0.0]]) / 6
    assert torch.allclose(trainer.grad, expected, atol=1e-6)
    m = {k: float(v) for k, v in out.metrics.items()}
    k3 = {1.5: 1.5 - math.log(1.5) - 1, 0.5: 0.5 - math.log(0.5) - 1, 1.0: 0.0}  # r - log r - 1
    assert m["loss_tokens"] == 6
    assert m["masked_fraction"] == pytest.approx(2 / 6)  # the two clipped tokens have no gradient
    assert m["masked_fraction/positive_advantage"] == pytest.approx(1 / 6)
    assert m["masked_fraction/negative_advantage"] == pytest.approx(1 / 6)
    assert m["importance_ratio/mean"] == pytest.approx((1.5 + 0.5 + 1 + 0.5 + 1.5 + 1) / 6)
    assert m["importance_ratio/min"] == pytest.approx(0.5) and m["importance_ratio/max"] == pytest.approx(1.5)
    assert m["mismatch_kl/mean"] == pytest.approx((2 * k3[1.5] + 2 * k3[0.5]) / 6, abs=1e-6)


def test_dapo_differs_from_the_default_loss_where_the_clip_acts():
    """Same tensors, default loss: no token leaves [0.125, 8], so every token trains (sum of -r A = -0.5 + ...)."""
    trainer, sampling, adv, mask = dapo_example()
    default = compute_loss(trainer, sampling, adv, mask, 6, LossConfig())
    # -(1.5 + 0.5 + 1) + (0.5 + 1.5 + 1) = 0
    assert default.loss.item() == pytest.approx(0.0, abs=1e-6)
    assert float(default.metrics["masked_fraction"]) == 0.0
    wide = dapo_loss(LossInputs(trainer, sampling, adv, mask, 6), DAPOLossConfig(epsilon_low=0.9, epsilon_high=9.0))
    assert wide.loss.item() == pytest.approx(0.0, abs=1e-6)  # a window holding every ratio: the same loss


def test_each_loss_names_the_tokens_it_leaves_out_and_the_token_export_writes_them():
    """`LossOutputs.no_gradient` is the loss's own: DAPO's active clip, the default loss's ratio window; the token
    export's `ratio_masked` is that tensor, whatever the loss."""
    from types import SimpleNamespace

    from verifiers_rl.trainer.token_export import sequence_records

    trainer, sampling, adv, mask = dapo_example()
    dapo = dapo_loss(LossInputs(trainer, sampling, adv, mask, 6), DAPOLossConfig())
    # row 0 (A=+1): r=1.5 above 1.28; row 1 (A=-1): r=0.5 below 0.8; the off-mask token never counts
    assert dapo.no_gradient.tolist() == [[True, False, False, False], [True, False, False, False]]
    narrow = compute_loss(trainer, sampling, adv, mask, 6, LossConfig(mask_ratio_low=0.6, mask_ratio_high=1.2))
    assert narrow.no_gradient.tolist() == [[True, True, False, False], [True, True, False, False]]
    sample = SimpleNamespace(input_ids=[1, 2, 3, 4], rollout_index=0, reward=1.0, advantage=1.0)
    mb = SimpleNamespace(samples=[sample, sample], loss_mask=mask, env_mask=torch.zeros_like(mask))
    records = sequence_records(mb, trainer.detach(), sampling, None, dapo.no_gradient, step=0)
    assert [r["ratio_masked"] for r in records] == [[1, 0, 0, 0], [1, 0, 0, 0]]
    assert [r["ratio_masked"] for r in sequence_records(mb, trainer.detach(), sampling, None, None, 0)] == \
        [[0, 0, 0, 0], [0, 0, 0, 0]]


# --- the config surface ------------------------------------------------------------------------------------------------


def test_rlconfig_loss_table_config_object_and_the_deprecated_top_level_keys(tmp_path, monkeypatch):
    assert config(tmp_path).loss_config() == LossConfig()
    assert config(tmp_path, loss={"kl_tau": 0.01, "beta": 0.1}).loss_config() == LossConfig(kl_tau=0.01, beta=0.1)
    monkeypatch.setattr("verifiers_rl.trainer.typed_table._WARNED", set())  # once per process: as if the first
    with pytest.warns(FutureWarning, match="RLConfig's kl_tau is deprecated: set loss.kl_tau instead"):
        assert config(tmp_path, kl_tau=0.01, beta=0.1).loss_config() == LossConfig(kl_tau=0.01, beta=0.1)
    c = config(tmp_path, loss={"type": "dapo", "epsilon_high": 0.3})
    assert c.loss_config() == DAPOLossConfig(epsilon_high=0.3)
    c = config(tmp_path, loss=DAPOLossConfig(epsilon_low=0.1))  # notebook: the config object, kept as its table
    assert c.loss == {"type": "dapo", "epsilon_low": 0.1, "epsilon_high": 0.28, "beta": 0.0,  # a None default: left out
                      "importance_sampling_mode": "none", "importance_sampling_clip_max": 3.0,
                      "use_bias_correction_kl": True, "importance_sampling_level": "token"}
    assert c.loss_config() == DAPOLossConfig(epsilon_low=0.1)
    c = config(tmp_path, loss={"type": "default", "beta": 0.2})
    assert c.beta is None and c.loss_config() == LossConfig(beta=0.2)
    for mode in ("opd", "sft"):  # each mode's own loss when loss.type is not set
        spec, _ = resolve_loss(config(tmp_path, training_mode=mode, teacher_model="t", rollouts_per_example=1))
        assert spec.name == mode


@pytest.mark.parametrize("kw, match", [
    (dict(loss={"type": "gspoo"}), "loss.type='gspoo' is not one of default, dapo, grpo, bnpo, dr_grpo, cispo, "
                                   "sapo, luspo, vespo, opd, sft"),
    (dict(loss={"type": "dapo", "epsilon": 0.2}),
     "loss.epsilon is not a key of loss type 'dapo'; its keys: beta, importance_sampling_mode, "
     "importance_sampling_clip_min, importance_sampling_clip_max, use_bias_correction_kl, epsilon_low, epsilon_high, "
     "delta, importance_sampling_level"),
    (dict(loss={"type": "dapo", "epsilon_low": 1.5}), r"loss.epsilon_low=1.5 must be in \[0, 1\)"),
    (dict(loss={"type": "sft"}), "loss.type='sft' trains training_mode='sft', not 'rl'; set training_mode='sft' or "
                                 "loss.type to one of default, dapo"),
    (dict(loss={"type": "dapo"}, kl_tau=0.1), "kl_tau=0.1 applies to loss.type one of default, opd, not 'dapo'"),
    (dict(kl_tau=0.1, loss={"kl_tau": 0.2}), "kl_tau=0.1 and loss.kl_tau=0.2 are both set; keep one"),
    (dict(loss=5), "loss=5 must be a type"),
    (dict(loss="dapoo"), "loss.type='dapoo' is not one of default, dapo"),
])
def test_rlconfig_refuses_a_bad_loss_in_one_line(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match) as e:
        config(tmp_path, **kw)
    assert "\n" not in str(e.value)


def test_a_loss_and_an_estimator_given_by_their_type_alone_are_that_table(tmp_path):
    """`loss = "dapo"` (TRL's loss_type spelling) is `{type = "dapo"}`; likewise `advantage = "rloo"`."""
    from verifiers_rl.trainer.typed_table import resolve_advantage, resolve_loss

    alone, table = config(tmp_path, loss="dapo", advantage="rloo"), config(tmp_path, loss={"type": "dapo"},
                                                                           advantage={"type": "rloo"})
    assert resolve_loss(alone) == resolve_loss(table) and resolve_loss(alone)[0].name == "dapo"
    assert resolve_advantage(alone) == resolve_advantage(table) and resolve_advantage(alone)[0].name == "rloo"


def test_vf_rl_toml_and_command_line_reach_the_loss_table(tmp_path):
    toml = tmp_path / "rl.toml"
    toml.write_text('model = "m"\n[env]\nid = "reverse-text"\n[trainer.args]\nbatch_size = 4\nmicro_batch_size = 2\n'
                    'rollouts_per_example = 2\n[trainer.args.loss]\ntype = "dapo"\nepsilon_high = 0.3\n')
    _, raw, _ = parse_args(["@", str(toml), "--trainer.args.loss.epsilon-low", "0.1",
                            "--output-dir", str(tmp_path / "o")])
    run = resolve_run(raw, {"output_dir": str(tmp_path / "o")}, check_environments=False)
    assert run.args.loss_config() == DAPOLossConfig(epsilon_low=0.1, epsilon_high=0.3)
    raw["trainer"]["args"]["loss"] = {"type": "gspoo"}
    with pytest.raises(ConfigError) as e:
        resolve_run(raw, {"output_dir": str(tmp_path / "o")}, check_environments=False)
    assert str(e.value).startswith("trainer.args.loss: loss.type='gspoo' is not one of default, dapo, grpo, bnpo, "
                                   "dr_grpo, cispo, sapo, luspo, vespo, opd, sft")


# --- the trainer names no loss's metric --------------------------------------------------------------------------------


def test_the_trainer_modules_name_no_loss_metric():
    """Metric names a loss returns appear only in the loss modules: the trainer logs what the loss returns."""
    names = set()
    for name in LOSSES:
        spec = get_loss(name)
        names |= set(spec.when_empty) | {k for k, _ in spec.console}
    names |= {"masked_fraction", "ref_kl/mean", "mismatch_kl/std", "teacher_kl/std"}
    trainer_dir = REPO / "verifiers_rl" / "trainer"
    loss_side = {"loss.py", "distill_loss.py", "token_export.py"}  # token_export: its own per-token field names
    for path in sorted(trainer_dir.glob("*.py")):
        if path.name in loss_side:
            continue
        strings = {n.value for n in ast.walk(ast.parse(path.read_text()))
                   if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        assert not strings & names, f"{path.name} names {sorted(strings & names)}"


# --- built once per run ------------------------------------------------------------------------------------------------


def test_a_three_step_run_builds_its_loss_and_its_estimator_once_each(tiny_model_dir, tmp_path, monkeypatch):
    """The loss's and the estimator's configs are built from the run's settings once (when the RLConfig is made) and
    handed to every step after, not rebuilt per step or per micro-batch."""
    from test_trainer import make_config, make_env, read_metrics

    from verifiers_rl.trainer import typed_table

    built = {"loss": 0, "advantage": 0}

    def counted(name, key):
        build = getattr(typed_table, name)

        def wrapper(c):
            built[key] += 1
            return build(c)
        monkeypatch.setattr(typed_table, name, wrapper)

    counted("_build_loss", "loss")
    counted("_build_advantage", "advantage")
    args = make_config(tmp_path, max_steps=3, loss={"type": "dapo", "epsilon_high": 0.3},
                       advantage={"type": "rloo"})
    vf.RLTrainer(str(tiny_model_dir), make_env(), args).train()
    assert len([r for r in read_metrics(tmp_path) if "loss/mean" in r]) == 3
    assert built == {"loss": 1, "advantage": 1}


# --- a real run with the DAPO loss --------------------------------------------------------------------------------------


def test_a_real_rltrainer_run_trains_with_the_dapo_loss(tiny_model_dir, tmp_path, monkeypatch):
    from test_trainer import lora_weights, make_config, make_env, read_metrics

    from verifiers_rl.trainer.losses import trl_types

    calls = []

    def recorded(inputs, cfg):  # wraps the registered function: checks each micro-batch's value independently
        out = dapo_loss(inputs, cfg)
        lp, m = inputs.trainer_logprobs.detach(), inputs.loss_mask
        r = torch.exp(torch.where(m, lp - inputs.sampling_logprobs, torch.zeros_like(lp)))
        a = inputs.advantages.unsqueeze(1)
        per = -torch.minimum(r * a, r.clamp(1 - cfg.epsilon_low, 1 + cfg.epsilon_high) * a)
        assert out.loss.item() == pytest.approx((per * m).sum().item() / float(inputs.total_loss_tokens), abs=1e-6)
        calls.append(cfg)
        return out

    monkeypatch.setattr(trl_types, "DAPO", dataclasses.replace(trl_types.DAPO, fn=recorded))
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(),
                           make_config(tmp_path, loss={"type": "dapo", "epsilon_high": 0.3}))
    before = lora_weights(trainer.model)
    trainer.train()
    assert calls and all(c == DAPOLossConfig(epsilon_high=0.3) for c in calls)
    assert len(calls) == 2 * 2  # 2 steps x 2 micro-batches of 4 rollouts
    after = lora_weights(trainer.model)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    steps = [r for r in read_metrics(tmp_path) if "loss/mean" in r]
    assert len(steps) == 2 and all("masked_fraction" in r and "importance_ratio/min" in r for r in steps)
    assert all(math.isfinite(r["loss/mean"]) for r in steps)


# --- a loss and an estimator from outside the package, by import path -------------------------------------------------

CUSTOM = '''
from dataclasses import dataclass
from pathlib import Path

import torch

from verifiers_rl.trainer.advantage_types import AdvantageSpec
from verifiers_rl.trainer.loss import LossOutputs
from verifiers_rl.trainer.losses import LossSpec

CALLS = Path(__file__).with_name("calls.txt")  # the run may train in a child process: calls go to a file


def called(what):
    with CALLS.open("a") as f:
        print(what, file=f)


@dataclass
class ReinforceConfig:
    scale: float = 1.0

    def __post_init__(self):
        if self.scale <= 0:
            raise ValueError(f"loss.scale={self.scale} must be > 0")


def reinforce(inputs, config):
    called("loss")
    mask = inputs.loss_mask.float()
    adv = inputs.advantages.float().unsqueeze(1)
    loss = -(config.scale * adv * inputs.trainer_logprobs * mask).sum() / inputs.total_loss_tokens
    return LossOutputs(loss=loss, metrics={"loss_tokens": mask.sum(), "reinforce/adv": (adv * mask).sum() / mask.sum()})


@dataclass
class MinBaselineConfig:
    pass


def min_baseline(rewards, group_size, config):
    called("advantage")
    r = rewards.float().view(-1, group_size)
    return (r - r.min(dim=1, keepdim=True).values).view(-1)


LOSS = LossSpec("reinforce", reinforce, ReinforceConfig)
ADVANTAGE = AdvantageSpec("min_baseline", min_baseline, MinBaselineConfig)
NOT_A_SPEC = 3
'''


@pytest.mark.integration  # vf-rl runs its trainer in a worker process
def test_a_custom_loss_and_estimator_by_import_path_train_two_steps(tiny_model_dir, tmp_path, monkeypatch):
    import importlib

    from two_steps import two_steps_through_vf_rl

    from verifiers_rl.trainer.typed_table import get_advantage

    (tmp_path / "my_objectives.py").write_text(CUSTOM)
    monkeypatch.syspath_prepend(str(tmp_path))
    custom = importlib.import_module("my_objectives")
    assert get_loss("my_objectives:LOSS") is custom.LOSS and get_advantage("my_objectives:ADVANTAGE") is \
        custom.ADVANTAGE
    for name, line in [("nowhere_module:LOSS", "cannot import 'nowhere_module' (ModuleNotFoundError"),
                       ("my_objectives:MISSING", "module 'my_objectives' has no 'MISSING'"),
                       ("my_objectives:NOT_A_SPEC", "is a int, not a LossSpec")]:
        with pytest.raises(ValueError, match=re.escape(line)):
            get_loss(name)
    with pytest.raises(ValueError, match=r"loss.scale=0 must be > 0"):
        vf.RLConfig(output_dir=str(tmp_path / "o"), loss={"type": "my_objectives:LOSS", "scale": 0})
    steps = two_steps_through_vf_rl(tiny_model_dir, tmp_path, monkeypatch, 'loss = { type = "my_objectives:LOSS", '
                                    'scale = 0.5 }\nadvantage = { type = "my_objectives:ADVANTAGE" }')
    assert [s["step"] for s in steps] == [1, 2]
    # the custom loss ran (its own metric is logged; the min baseline's advantages are never negative), and so
    # did the custom estimator, once per step
    assert all(s["reinforce/adv"] >= 0 for s in steps)
    calls = custom.CALLS.read_text().split()
    assert calls.count("advantage") == 2 and calls.count("loss") >= 2, calls


@pytest.mark.integration  # the console script in a subprocess
def test_the_console_script_finds_a_loss_module_in_the_working_directory(tiny_model_dir, tmp_path):
    """`vf-rl` is a console script, whose sys.path lacks the working directory that its worker (`python -m`) has: a
    `my_objectives.py` beside the config imports in both (as uvicorn's `module:app`)."""
    import subprocess
    import sys

    (tmp_path / "my_objectives.py").write_text(CUSTOM)
    (tmp_path / "run.toml").write_text(
        f'model = "{tiny_model_dir}"\n[env]\nid = "reverse-text"\nargs = {{ dataset_source = "offline" }}\n'
        '[trainer.args]\nmax_steps = 2\nbatch_size = 8\nrollouts_per_example = 4\nmicro_batch_size = 8\n'
        'loss = { type = "my_objectives:LOSS", scale = 0.5 }\nadvantage = { type = "my_objectives:ADVANTAGE" }\n')
    script = Path(sys.executable).parent / "vf-rl"
    done = subprocess.run([str(script), "@", "run.toml", "--dry-run", "--output-dir", "out"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    written = (tmp_path / "out" / "configs" / "rl.toml").read_text()
    assert 'type = "my_objectives:LOSS"' in written and 'type = "my_objectives:ADVANTAGE"' in written


def test_a_run_builds_its_loss_and_estimator_once(tiny_model_dir, tmp_path, monkeypatch):
    """From the RLConfig to the end of a 3-step run (its checks, the mode, the console, each step's advantages and
    loss, the W&B-less samples path): one build each; a setting changed afterwards builds again."""
    from test_trainer import make_config, make_env

    from verifiers_rl.trainer import typed_table

    built = []
    real = typed_table.build_config

    def counted(section, *a, **k):
        built.append(section)
        return real(section, *a, **k)

    monkeypatch.setattr(typed_table, "build_config", counted)
    args = make_config(tmp_path, max_steps=3, loss={"type": "cispo"}, advantage={"type": "max_rl"})
    vf.RLTrainer(str(tiny_model_dir), make_env(), args).train()
    assert sorted(built) == ["advantage", "loss"], built
    args.loss = {"type": "cispo", "epsilon_high": 4.0}
    assert resolve_loss(args)[1].epsilon_high == 4.0 and sorted(built) == ["advantage", "loss", "loss"]


def test_a_setting_error_names_its_key_without_reading_the_message(tmp_path, monkeypatch):
    """RLConfig's checks, the loss/estimator configs' own, and a config from outside the package that raises a plain
    ValueError: vf-rl's `trainer.args.<key>:` comes from the error's key (SettingError), never its text."""
    from verifiers_rl.config.resolution import build_rl_config
    from verifiers_rl.errors import ConfigError, SettingError

    (tmp_path / "quiet_objectives.py").write_text(CUSTOM.replace(
        'raise ValueError(f"loss.scale={self.scale} must be > 0")', 'raise ValueError("must be positive")'))
    monkeypatch.syspath_prepend(str(tmp_path))
    base = {"output_dir": str(tmp_path / "o"), "batch_size": 16, "micro_batch_size": 8, "rollouts_per_example": 8}
    for extra, key in [({"top_p": 0.0}, "top_p"), ({"training_mode": "opd"}, "training_mode"),
                       ({"loss": {"type": "dapo", "epsilon_low": 2.0}}, "loss"), ({"loss": {"kl_tau": -1.0}}, "loss"),
                       ({"loss": {"type": "quiet_objectives:LOSS", "scale": 0}}, "loss"),
                       ({"advantage": {"type": "rloo"}, "rollouts_per_example": 1}, "rollouts_per_example")]:
        with pytest.raises(SettingError) as raised:
            vf.RLConfig(**{**base, **extra})
        assert raised.value.key == key, (extra, raised.value.key, str(raised.value))
        with pytest.raises(ConfigError) as line:
            build_rl_config({**base, **extra})
        assert str(line.value) == f"trainer.args.{key}: {raised.value}"
    with pytest.raises(ConfigError, match=r"^trainer\.args\.loss: must be positive$"):
        build_rl_config({**base, "loss": {"type": "quiet_objectives:LOSS", "scale": 0}})
