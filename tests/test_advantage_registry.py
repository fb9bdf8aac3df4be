"""Advantage estimators chosen by `advantage.type` (trainer/advantage_types/): the registry, RLOO on hand-computed
values, GRPO identical to compute_advantages, each config's own checks, the RLConfig / [trainer.args.advantage]
key, one place that computes a run's advantages, a real two-step RLTrainer run with RLOO on the tiny model, and
prime-rl's max_rl and length penalty (by hand: prime-rl's own code needs its orchestrator and verifiers' v1
episodes) with a real run each."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
import torch

import verifiers_rl as vf
from verifiers_rl.config.loading import ConfigError, parse_args
from verifiers_rl.config.schema import resolve_run
from verifiers_rl.trainer.advantage_types import ADVANTAGES
from verifiers_rl.trainer.advantage_types.grpo import GRPOAdvantageConfig
from verifiers_rl.trainer.advantage_types.rloo import RLOOAdvantageConfig
from verifiers_rl.trainer.advantages import advantages_for
from verifiers_rl.trainer.typed_table import get_advantage, resolve_advantage
from verifiers_rl.trainer.advantages import compute_advantages, rloo_advantages

REPO = Path(__file__).resolve().parents[1]
SMALL = dict(batch_size=4, micro_batch_size=2, rollouts_per_example=2, report_to="none")
# two groups of 4: rewards worked by hand below
REWARDS = torch.tensor([1.0, 0.0, 0.0, 3.0, 2.0, 2.0, 2.0, 2.0])


def config(tmp_path, **kw) -> vf.RLConfig:
    return vf.RLConfig(output_dir=str(tmp_path / "o"), **{**SMALL, **kw})


# --- registry and the estimators --------------------------------------------------------------------------------------


def test_registry_names_each_estimator_with_its_own_config():
    assert list(ADVANTAGES) == ["grpo", "rloo", "max_rl", "rae"]
    for name in ADVANTAGES:
        spec = get_advantage(name)
        assert spec.name == name and dataclasses.is_dataclass(spec.config) and callable(spec.fn)
        spec.config()  # the defaults are valid
    assert get_advantage("grpo").config is GRPOAdvantageConfig and get_advantage("rloo").min_group_size == 2
    with pytest.raises(ValueError) as e:
        get_advantage("gae")
    assert str(e.value) == "advantage.type='gae' is not one of grpo, rloo, max_rl, rae; set advantage.type to one of them, or to an import path 'package.module:SPEC'"


def test_rloo_baselines_each_rollout_by_the_mean_of_the_others():
    # group 0: rewards 1, 0, 0, 3 -> others' means (0+0+3)/3=1, (1+0+3)/3=4/3, 4/3, (1+0+0)/3=1/3
    #   A = 1-1=0, 0-4/3, 0-4/3, 3-1/3=8/3; group 1: all 2 -> others' mean 2 -> A = 0
    expected = torch.tensor([0.0, -4 / 3, -4 / 3, 8 / 3, 0.0, 0.0, 0.0, 0.0])
    adv = rloo_advantages(REWARDS, 4, RLOOAdvantageConfig())
    assert torch.allclose(adv, expected, atol=1e-6)
    # G = 2: each rollout's baseline is its partner's reward
    assert rloo_advantages(torch.tensor([1.0, 0.0, 0.5, 2.0]), 2, RLOOAdvantageConfig()).tolist() == \
        [1.0, -1.0, -1.5, 1.5]
    with pytest.raises(ValueError, match=r"advantage.type='rloo' needs group_size >= 2 \(got 1\)") as e:
        rloo_advantages(REWARDS, 1, RLOOAdvantageConfig())
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="not a positive multiple of group_size=3"):  # whole groups, as GRPO
        rloo_advantages(REWARDS, 3, RLOOAdvantageConfig())


@pytest.mark.parametrize("scale", ["none", "group", "batch"])
def test_grpo_is_compute_advantages_exactly(scale):
    adv = get_advantage("grpo").fn(REWARDS, 4, GRPOAdvantageConfig(scale_rewards=scale))
    assert torch.equal(adv, compute_advantages(REWARDS, 4, scale))


def test_grpo_config_checks_its_value_in_one_line():
    with pytest.raises(ValueError) as e:
        GRPOAdvantageConfig(scale_rewards="std")
    assert str(e.value) == "advantage.scale_rewards='std' is not one of none, group, batch"


def test_grpo_takes_trls_bool_scale_rewards(tmp_path):
    # TRL's GRPOConfig took scale_rewards=True / False before its strings; True is its per-group std
    assert GRPOAdvantageConfig(scale_rewards=True).scale_rewards == "group"
    assert GRPOAdvantageConfig(scale_rewards=False).scale_rewards == "none"
    assert resolve_advantage(config(tmp_path, advantage={"scale_rewards": True}))[1].scale_rewards == "group"


# --- the config surface -----------------------------------------------------------------------------------------------


def test_rlconfig_default_is_grpo_and_the_deprecated_top_level_scale_rewards_fills_it(tmp_path, monkeypatch):
    assert resolve_advantage(config(tmp_path)) == (get_advantage("grpo"), GRPOAdvantageConfig())
    c = config(tmp_path, advantage={"scale_rewards": "group"})
    assert resolve_advantage(c)[1] == GRPOAdvantageConfig(scale_rewards="group") and c.scale_rewards is None
    monkeypatch.setattr("verifiers_rl.trainer.typed_table._WARNED", set())  # once per process: as if the first
    with pytest.warns(FutureWarning, match="RLConfig's scale_rewards is deprecated: set advantage.scale_rewards"):
        c = config(tmp_path, scale_rewards="group")
    assert resolve_advantage(c)[1] == GRPOAdvantageConfig(scale_rewards="group") and c.advantage is None
    c = config(tmp_path, advantage={"type": "rloo"})
    spec, cfg = resolve_advantage(c)
    assert spec.name == "rloo" and cfg == RLOOAdvantageConfig()
    c = config(tmp_path, advantage=RLOOAdvantageConfig())  # notebook: the config object, kept as its table
    assert c.advantage == {"type": "rloo"}
    c = config(tmp_path, advantage=GRPOAdvantageConfig(scale_rewards="group"))
    assert c.advantage == {"type": "grpo", "scale_rewards": "group"} and c.scale_rewards is None


def test_advantages_for_applies_the_chosen_estimator(tmp_path):
    grpo = config(tmp_path, rollouts_per_example=4, batch_size=8, advantage={"scale_rewards": "group"})
    assert torch.equal(advantages_for(REWARDS, 4, resolve_advantage(grpo)), compute_advantages(REWARDS, 4, "group"))
    rloo = config(tmp_path, rollouts_per_example=4, batch_size=8, advantage={"type": "rloo"})
    rloo_adv = advantages_for(REWARDS, 4, resolve_advantage(rloo))
    assert torch.equal(rloo_adv, rloo_advantages(REWARDS, 4, RLOOAdvantageConfig()))
    assert not torch.equal(rloo_adv, advantages_for(REWARDS, 4, resolve_advantage(config(tmp_path))))


@pytest.mark.parametrize("kw, match", [
    (dict(advantage={"type": "gae"}), "advantage.type='gae' is not one of grpo, rloo, max_rl, rae; set advantage.type"),
    (dict(advantage={"type": "grpo", "std": "group"}),
     "advantage.std is not a key of advantage type 'grpo'; its keys: scale_rewards"),
    (dict(advantage={"type": "rloo", "scale_rewards": "group"}),
     "advantage.scale_rewards is not a key of advantage type 'rloo'; its keys: none"),
    (dict(advantage={"type": "rloo"}, scale_rewards="group"),
     "scale_rewards='group' applies to advantage.type 'grpo', not 'rloo'; remove it"),
    (dict(advantage={"scale_rewards": "batch"}, scale_rewards="group"),
     "scale_rewards='group' and advantage.scale_rewards='batch' are both set; keep one"),
    (dict(advantage={"type": "grpo", "scale_rewards": "std"}),
     "advantage.scale_rewards='std' is not one of none, group, batch"),
    (dict(scale_rewards="std"), "advantage.scale_rewards='std' is not one of none, group, batch"),
    (dict(advantage=3), "advantage=3 must be a type"),
    (dict(advantage={"type": "rloo"}, training_mode="sft", teacher_model="t", rollouts_per_example=1),
     "advantage.type='rloo' needs rollouts_per_example >= 2, got 1"),
])
def test_rlconfig_refuses_a_bad_advantage_in_one_line(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match) as e:
        config(tmp_path, **kw)
    assert "\n" not in str(e.value)


def test_vf_rl_toml_and_command_line_reach_the_advantage_table(tmp_path):
    toml = tmp_path / "rl.toml"
    toml.write_text('model = "m"\n[env]\nid = "reverse-text"\n[trainer.args]\nbatch_size = 4\nmicro_batch_size = 2\n'
                    'rollouts_per_example = 2\n[trainer.args.advantage]\ntype = "grpo"\n')
    _, raw, _ = parse_args(["@", str(toml), "--trainer.args.advantage.scale-rewards", "group",
                            "--output-dir", str(tmp_path / "o")])
    run = resolve_run(raw, {"output_dir": str(tmp_path / "o")}, check_environments=False)
    assert resolve_advantage(run.args)[1] == GRPOAdvantageConfig(scale_rewards="group")
    raw["trainer"]["args"]["advantage"] = {"type": "rloo"}
    run = resolve_run(raw, {"output_dir": str(tmp_path / "o")}, check_environments=False)
    assert resolve_advantage(run.args)[0].name == "rloo"
    raw["trainer"]["args"]["advantage"] = {"type": "gae"}
    with pytest.raises(ConfigError) as e:
        resolve_run(raw, {"output_dir": str(tmp_path / "o")}, check_environments=False)
    assert str(e.value).startswith("trainer.args.advantage: advantage.type='gae' is not one of grpo, rloo")


# --- one place computes a run's advantages ----------------------------------------------------------------------------


def _called_names(tree: ast.AST) -> set[str]:
    names = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            f = n.func
            names.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "")
    return names


def test_only_the_advantage_modules_call_compute_advantages():
    package = REPO / "verifiers_rl"
    own = {package / "trainer" / "advantages.py", *(package / "trainer" / "advantage_types").glob("*.py")}
    callers = {p.relative_to(REPO).as_posix() for p in package.rglob("*.py")
               if p not in own and "compute_advantages" in _called_names(ast.parse(p.read_text()))}
    assert callers == set()
    users = {p.relative_to(REPO).as_posix() for p in package.rglob("*.py")
             if "advantages_for" in _called_names(ast.parse(p.read_text()))}
    assert users == {"verifiers_rl/trainer/step.py"}  # the W&B table shows the step's own advantages
    # the check sees a direct call written elsewhere (it can fail)
    assert "compute_advantages" in _called_names(ast.parse("from m import f\nx = f.compute_advantages(r, 2)\n"))


# --- a real run with RLOO ---------------------------------------------------------------------------------------------


@pytest.mark.integration  # trains for many seconds in-process
def test_a_real_rltrainer_run_trains_with_rloo_advantages(tiny_model_dir, tmp_path, monkeypatch):
    from test_trainer import GROUP, lora_weights, make_config, make_env, read_metrics

    from verifiers_rl.trainer.advantage_types import rloo
    from verifiers_rl.trainer.loss import ratio_masked_policy_gradient
    from verifiers_rl.trainer.losses import default

    steps, trained = [], []

    def recorded(rewards, group_size, cfg):  # wraps the registered function: checks each step's values by hand
        out = rloo_advantages(rewards, group_size, cfg)
        for g in range(0, len(rewards), group_size):
            r = rewards[g:g + group_size].tolist()
            others = [(sum(r) - x) / (group_size - 1) for x in r]
            assert out[g:g + group_size].tolist() == pytest.approx([x - o for x, o in zip(r, others)], abs=1e-5)
        steps.append(out.clone())
        return out

    def loss(inputs, cfg):  # the loss sees the advantages RLOO returned
        trained.extend(inputs.advantages.detach().flatten().tolist())
        return ratio_masked_policy_gradient(inputs, cfg)

    monkeypatch.setattr(rloo, "ADVANTAGE", dataclasses.replace(rloo.ADVANTAGE, fn=recorded))
    monkeypatch.setattr(default, "LOSS", dataclasses.replace(default.LOSS, fn=loss))
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path, advantage={"type": "rloo"}))
    before = lora_weights(trainer.model)
    trainer.train()
    # once per step in the trainer (the W&B table is off: sample_log_interval=0)
    assert len(steps) == 2 and all(len(a) % GROUP == 0 for a in steps)
    assert sorted(trained) == pytest.approx(sorted(torch.cat(steps).tolist()), abs=1e-6)
    after = lora_weights(trainer.model)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    logged = [r for r in read_metrics(tmp_path) if "loss/mean" in r]
    assert [r["advantage/abs_mean"] for r in logged] == pytest.approx([float(a.abs().mean()) for a in steps])


# --- prime-rl's max_rl and length penalty -----------------------------------------------------------------------------


def test_max_rl_divides_the_centred_rewards_by_the_group_mean():
    from verifiers_rl.trainer.advantage_types.max_rl import MaxRLAdvantageConfig
    from verifiers_rl.trainer.advantages import max_rl_advantages

    # group 0: mean 1 -> (r - 1) / 1; group 1: all 2 -> 0; group 2: mean 0 -> no signal, 0 (prime-rl's rule)
    rewards = torch.tensor([1.0, 0.0, 0.0, 3.0, 2.0, 2.0, 2.0, 2.0, 0.0, 0.0, 0.0, 0.0])
    assert max_rl_advantages(rewards, 4, MaxRLAdvantageConfig()).tolist() == [0, -1, -1, 2, 0, 0, 0, 0, 0, 0, 0, 0]
    # binary rewards: a prompt solved 1 time in 4 weighs 3x one solved 3 times in 4 (~1/p)
    adv = max_rl_advantages(torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 0]), 4, MaxRLAdvantageConfig())
    assert adv.tolist() == pytest.approx([3, -1, -1, -1, 1 / 3, 1 / 3, 1 / 3, -1])
    c = vf.RLConfig(output_dir="o", **{**SMALL, "advantage": {"type": "max_rl"}})
    assert torch.equal(advantages_for(rewards, 4, resolve_advantage(c)),
                       max_rl_advantages(rewards, 4, MaxRLAdvantageConfig()))


def test_the_length_penalty_shapes_rewards_before_the_group_baseline():
    from verifiers_rl.trainer.advantage_types.length_penalty import LengthPenaltyConfig, RolloutLengths

    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0])  # groups of 2; the last group is in `kept` below
    lengths = RolloutLengths(output=torch.tensor([10.0, 20.0, 5.0, 50.0, 8.0, 4.0]),
                             input=torch.tensor([30.0, 30.0, 6.0, 6.0, 3.0, 3.0]),
                             turns=torch.tensor([1.0, 2.0, 1.0, 1.0, 1.0, 1.0]))
    penalty = {"num_output_tokens_weight": 0.25, "num_input_tokens_weight": 0.1, "num_turns_weight": 0.1}
    c = vf.RLConfig(output_dir="o", **{**SMALL, "batch_size": 6, "advantage": {"length_penalty": penalty}})
    adv = advantages_for(rewards, 2, resolve_advantage(c), lengths=lengths)
    # group 0, pass rate 1: shaped 1 - (0.25 * 10/20 + 0.1 * 1 + 0.1 * 1/2) = 0.725 and 1 - (0.25 + 0.1 + 0.1) = 0.55
    assert adv[:2].tolist() == pytest.approx([0.0875, -0.0875])
    assert adv[2:4].tolist() == [0.0, 0.0]  # pass rate 0: no penalty, no signal
    # group 2, pass rate 0.5: 1 - 0.5 * (0.25 + 0.1 + 0.1) = 0.775 and 0 - 0.5 * (0.125 + 0.1 + 0.1) = -0.1625
    assert adv[4:].tolist() == pytest.approx([0.46875, -0.46875])
    # a dropped rollout leaves the group: the others' lengths are what the penalty compares
    kept = advantages_for(rewards, 2, resolve_advantage(c), [True, True, True, True, True, False], lengths)
    assert kept[:4].tolist() == pytest.approx(adv[:4].tolist()) and kept[4:].tolist() == [0.0, 0.0]
    # off by default; its table's keys and values are checked in one line; kept as a table from a notebook object
    assert resolve_advantage(vf.RLConfig(output_dir="o", **SMALL))[1].length_penalty is None
    with pytest.raises(ValueError, match=r"advantage.length_penalty.num_tokens_weight is not a key of the length "):
        vf.RLConfig(output_dir="o", **{**SMALL, "advantage": {"length_penalty": {"num_tokens_weight": 1}}})
    with pytest.raises(ValueError, match=r"advantage.length_penalty.num_turns_weight=-1 must be a finite number >= 0"):
        vf.RLConfig(output_dir="o", **{**SMALL, "advantage": {"length_penalty": {"num_turns_weight": -1}}})
    nb = vf.RLConfig(output_dir="o", **{**SMALL, "advantage": GRPOAdvantageConfig(
        length_penalty=LengthPenaltyConfig(num_turns_weight=0.0))})
    assert nb.advantage == {"type": "grpo", "scale_rewards": "none", "length_penalty": {
        "num_output_tokens_weight": 0.25, "num_input_tokens_weight": 0.1, "num_turns_weight": 0.0}}


@pytest.mark.integration  # trains for many seconds in-process
@pytest.mark.parametrize("advantage", [{"type": "max_rl"}, {"type": "grpo", "length_penalty": {}}],
                         ids=["max_rl", "length_penalty"])
def test_a_real_rltrainer_run_trains_with_prime_rls_estimators(advantage, tiny_model_dir, tmp_path, monkeypatch):
    from test_trainer import GROUP, make_config, make_env, read_metrics

    from verifiers_rl.trainer.advantage_types import grpo, max_rl

    module = max_rl if advantage["type"] == "max_rl" else grpo
    registered, seen = module.ADVANTAGE.fn, []

    def recorded(rewards, group_size, cfg, **kw):  # the registered function, each step's inputs kept
        out = registered(rewards, group_size, cfg, **kw)
        seen.append((rewards.clone(), kw.get("lengths"), out.clone()))
        return out

    monkeypatch.setattr(module, "ADVANTAGE", dataclasses.replace(module.ADVANTAGE, fn=recorded))
    vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path, advantage=advantage)).train()
    assert len(seen) == 2
    for rewards, lengths, out in seen:
        if module is max_rl:  # by hand: (r - mean) / mean per group, 0 where the mean is 0
            r = rewards.view(-1, GROUP)
            mean = r.mean(1, keepdim=True)
            want = torch.where(mean > 0, (r - mean) / mean.clamp(min=1e-12), torch.zeros_like(r)).view(-1)
            assert lengths is None and out.tolist() == pytest.approx(want.tolist(), abs=1e-6)
        else:  # the run handed each rollout's lengths: tokens the model wrote and read, in one turn each
            assert (lengths.output > 0).all() and (lengths.input > 0).all() and (lengths.turns == 1).all()
    logged = [r for r in read_metrics(tmp_path) if "loss/mean" in r]
    assert [r["advantage/abs_mean"] for r in logged] == pytest.approx([float(o.abs().mean()) for *_, o in seen])



# --- rae: per-agent moving baselines (prime-rl's RAEAlgorithm) --------------------------------------------------------


def _prime_rls_rae(rewards: list[float], agents: list[str], decay: float, baselines: dict) -> list[float]:
    """prime-rl's RAEAlgorithm.score_group, restated: each trace against its agent's baseline, then the update."""
    out = []
    for r, a in zip(rewards, agents):
        b = baselines.get(a, 0.0)
        out.append(r - b)
        baselines[a] = decay * b + (1.0 - decay) * r
    return out


def test_rae_scores_each_rollout_against_its_agents_baseline_before_updating_it():
    from verifiers_rl.trainer.advantage_types.rae import RAEAdvantageConfig, agent_of
    from verifiers_rl.trainer.advantages import rae_advantages

    # a zero-sum two-seat game over three steps: the first mover wins more often, so a shared (group) mean would
    # credit the first seat for the order alone
    steps = [([1.0, -1.0, 1.0, -1.0], ["g/first", "g/second"] * 2), ([-1.0, 1.0, 1.0, -1.0], ["g/first", "g/second"] * 2),
             ([1.0, -1.0], ["g/first", "g/second"])]
    ours, theirs = {}, {}
    for rewards, agents in steps:
        got = rae_advantages(torch.tensor(rewards), 1, RAEAdvantageConfig(decay=0.5), agents=agents, baselines=ours)
        assert got.tolist() == pytest.approx(_prime_rls_rae(rewards, agents, 0.5, theirs))
    assert ours == pytest.approx(theirs) and ours["g/first"] > 0 > ours["g/second"]
    # first step, decay 0.5 by hand: 1 - 0 = 1, then b_first = 0.5; the second game's first seat: 1 - 0.5 = 0.5
    assert rae_advantages(torch.tensor([1.0, 1.0]), 1, RAEAdvantageConfig(decay=0.5), agents=["a", "a"],
                          baselines={}).tolist() == [1.0, 0.5]
    assert agent_of({"task": "kuhn", "info": {"agent": "player_0"}}) == "kuhn/player_0"
    assert agent_of({"task": None, "info": None}) == "/"
    with pytest.raises(Exception, match=r"advantage.decay=1.5 must be in \[0, 1\)"):
        RAEAdvantageConfig(decay=1.5)


def test_rae_learns_from_groups_of_one_where_grpo_is_refused(tmp_path):
    assert config(tmp_path, batch_size=4, micro_batch_size=2, rollouts_per_example=1,
                  advantage={"type": "rae"}).rollouts_per_example == 1
    with pytest.raises(Exception, match="rollouts_per_example=1 must be >= 2"):
        config(tmp_path, batch_size=4, micro_batch_size=2, rollouts_per_example=1)


@pytest.mark.integration  # trains for many seconds in-process
def test_a_real_rltrainer_run_trains_with_rae_on_groups_of_one(tiny_model_dir, tmp_path, monkeypatch):
    from test_trainer import make_config, make_env, read_metrics

    from verifiers_rl.trainer.advantage_types import rae

    registered, seen = rae.ADVANTAGE.fn, []

    def recorded(rewards, group_size, cfg, *, agents, baselines):
        before = dict(baselines)
        out = registered(rewards, group_size, cfg, agents=agents, baselines=baselines)
        seen.append((rewards.clone(), list(agents), before, out.clone()))
        return out

    monkeypatch.setattr(rae, "ADVANTAGE", dataclasses.replace(rae.ADVANTAGE, fn=recorded))
    args = make_config(tmp_path, rollouts_per_example=1, advantage={"type": "rae", "decay": 0.5})
    vf.RLTrainer(str(tiny_model_dir), make_env(), args).train()
    assert len(seen) == 2 and seen[0][2] == {}  # two steps; the baselines start empty and carry over
    baselines: dict = {}
    for rewards, agents, before, out in seen:
        assert before == pytest.approx(baselines) and len(set(agents)) == 1  # one seat: REINFORCE, moving baseline
        assert out.tolist() == pytest.approx(_prime_rls_rae(rewards.tolist(), agents, 0.5, baselines))
    assert any(o.abs().sum() > 0 for *_, o in seen)  # a group of one still gets a signal
    logged = [r for r in read_metrics(tmp_path) if "loss/mean" in r]
    assert [r["advantage/abs_mean"] for r in logged] == pytest.approx([float(o.abs().mean()) for *_, o in seen])


@pytest.mark.integration  # trains for many seconds in-process
def test_rae_baselines_resume_with_the_checkpoint(tiny_model_dir, tmp_path):
    import json

    from test_trainer import StopAt, lora_weights, make_config, make_env, read_metrics

    cfg = dict(max_steps=4, save_steps=2, rollouts_per_example=1, advantage={"type": "rae"})  # decay 0.95
    straight = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path / "straight", **cfg))
    straight.train()
    out = tmp_path / "resumed"
    vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(out, **cfg), callbacks=[StopAt(2)]).train()
    saved = json.loads((out / "checkpoint-2" / "rl_state.json").read_text())["advantage_baselines"]
    assert saved and all(isinstance(v, float) for v in saved.values())
    resumed = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(out, **cfg))
    resumed.train(resume_from_checkpoint=True)
    assert resumed.steps.baselines == pytest.approx(straight.steps.baselines)

    def advantages(path):  # steps 3 and 4 are scored against the baselines steps 1 and 2 moved
        return {r["step"]: r["advantage/abs_mean"] for r in read_metrics(path) if "loss/mean" in r}

    assert advantages(out) == pytest.approx(advantages(tmp_path / "straight"), abs=1e-9)
    for name, w in lora_weights(straight.model).items():
        assert torch.allclose(lora_weights(resumed.model)[name], w, atol=1e-6), name
