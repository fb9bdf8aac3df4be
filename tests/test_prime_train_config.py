"""`prime train` configs (prime-rl's RL config, which the prime CLI ships to hosted training) run through vf-rl:
translated onto the same run (config/prime_train.py), errors naming the prime-rl key, deprecated keys one warning
each, the retired `prime rl` format still translated with one warning. The configs below are written in the shape
of prime-rl's `examples/basic/*/rl.toml` (prime-rl-configs 559b447); the ids are the hosted ones (not installed here:
environments are not checked). A v1 one trains for real in tests/test_v1_envs.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from verifiers_rl.cli import rl as rl_cli
from verifiers_rl.config import hosted, prime_train
from verifiers_rl.config.loading import ConfigError, parse_args
from verifiers_rl.config.resolution import config_format
from verifiers_rl.config.schema import resolve_run
from verifiers_rl.trainer.advantage_types.length_penalty import LengthPenaltyConfig
from verifiers_rl.trainer.typed_table import resolve_advantage

ONE_SEAT = '''
max_steps = 40
seq_len = 1024

[model]
name = "Qwen/Qwen3-0.6B"

[orchestrator]
batch_size = 64
group_size = 8

[orchestrator.train.sampling]
max_completion_tokens = 96
temperature = 0.9

[[orchestrator.train.source]]
name = "sorting"

[orchestrator.train.source.env.taskset]
id = "alphabet-sort"
min_turns = 2
max_turns = 4

[orchestrator.train.source.env.agent.harness]
id = "null"

[orchestrator.train.source.env.agent.runtime]
type = "subprocess"

[trainer.optim]
lr = 2e-6

[trainer.model.lora]
rank = 16
alpha = 32

[ckpt]
interval = 10

[inference]

[deployment]
num_train_gpus = 1
num_infer_gpus = 1
'''

TWO_SEATS_GATED = '''
max_steps = 30

[model]
name = "Qwen/Qwen3-1.7B"

[monitors.wandb]
project = "duel"

[orchestrator]
batch_size = 32
group_size = 4

[orchestrator.concurrency]
initial_inflight = 64

[[orchestrator.train.source]]
curriculum = { gates = { skip_flat = { type = "advantage_range" } } }

[orchestrator.train.source.env.taskset]
id = "kuhn-poker"

[orchestrator.train.source.env.player.harness]
id = "null"

[orchestrator.train.source.env.opponent.harness]
id = "null"

[orchestrator.renderer]
name = "prime-qwen3"

[orchestrator.eval]
interval = 10
num_examples = 16
skip_first_step = true

[[orchestrator.eval.source]]
[orchestrator.eval.source.env.taskset]
id = "kuhn-poker"

[trainer.scheduler]
type = "cosine"
warmup_steps = 3
'''

OPD = '''
[model]
name = "Qwen/Qwen3-0.6B"

[orchestrator]
batch_size = 16
group_size = 2

[orchestrator.algo]
type = "opd"
teacher = { base_url = "http://teacher:8000/v1", name = "Qwen/Qwen3-8B", api_key_var = "TEACHER_KEY" }

[[orchestrator.train.source]]
env = { taskset = { id = "reverse-text" } }
ratio = 3.0

[[orchestrator.train.source]]
env = { taskset = { id = "gsm8k" } }

[trainer.loss]
kl_tau = 0.002
'''


def load(tmp_path: Path, text: str, *override: str) -> tuple[dict, dict]:
    path = tmp_path / "prime.toml"
    path.write_text(text)
    _, raw, opts = parse_args(["@", str(path), *override])
    return raw, opts


def translated(tmp_path: Path, text: str, *override: str) -> dict:
    raw, _ = load(tmp_path, text, *override)
    assert config_format(raw) == "prime-train"
    return prime_train.translate(raw)[0]


def test_a_one_seat_v1_config_translates_onto_the_same_run(tmp_path, capsys):
    native = translated(tmp_path, ONE_SEAT)
    assert native["model"] == "Qwen/Qwen3-0.6B"
    assert native["env"] == {"id": "alphabet-sort", "api": "v1", "name": "sorting", "args": {
        "taskset": {"min_turns": 2, "max_turns": 4},
        "agent": {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}}}}
    assert native["trainer"]["args"] == {
        "max_steps": 40, "max_seq_len": 1024, "batch_size": 64, "micro_batch_size": 8, "rollouts_per_example": 8,
        "max_tokens": 96, "temperature": 0.9, "learning_rate": 2e-6, "weight_decay": 0.01, "max_grad_norm": 1.0,
        "lr_scheduler_type": "constant", "use_lora": True, "lora_rank": 16, "lora_alpha": 32, "save_steps": 10,
        # prime-rl's defaults that change training: its loss's kl_tau, zero-advantage tokens out of the loss
        "loss": {"kl_tau": 1e-3}, "filter_zero_advantages": True, "max_prompt_len": 1023,  # no prompt budget
        "gradient_checkpointing": True}  # prime-rl checkpoints activations unless told not to
    # the deployment's keys are set aside in one line that names them
    lines = [l for l in capsys.readouterr().err.splitlines() if "set aside" in l]
    assert len(lines) == 1 and "deployment.num_train_gpus" in lines[0], lines
    run = resolve_run(load(tmp_path, ONE_SEAT)[0], {"output_dir": str(tmp_path / "out")}, check_environments=False)
    assert run.hosted and run.args.rollouts_per_example == 8 and run.args.use_lora


@pytest.mark.parametrize("algo, advantage", [
    ('type = "max_rl"', {"type": "max_rl"}),
    ('type = "rae"\ndecay = 0.9', {"type": "rae", "decay": 0.9}),
    ('type = "grpo"\nlength_penalty = { type = "linear", num_output_tokens_weight = 0.5 }',
     {"length_penalty": {"type": "linear", "num_output_tokens_weight": 0.5}}),
], ids=["max_rl", "rae", "length_penalty"])
def test_prime_rls_max_rl_and_length_penalty_translate_to_the_advantage(algo, advantage, tmp_path):
    text = ONE_SEAT + f"\n[orchestrator.algo]\n{algo}\n"
    native = translated(tmp_path, text)
    assert native["trainer"]["args"]["advantage"] == advantage and "training_mode" not in native
    run = resolve_run(load(tmp_path, text)[0], {"output_dir": str(tmp_path / "o")}, check_environments=False)
    spec, config = resolve_advantage(run.args)
    assert spec.name == advantage.get("type", "grpo")
    if "length_penalty" in advantage:
        assert config.length_penalty == LengthPenaltyConfig(num_output_tokens_weight=0.5)


def test_two_seats_a_gate_a_renderer_and_eval_translate(tmp_path):
    native = translated(tmp_path, TWO_SEATS_GATED)
    args = native["trainer"]["args"]
    assert native["env"]["args"] == {"taskset": {}, "player": {"harness": {"id": "null"}},
                                     "opponent": {"harness": {"id": "null"}}, "renderer": {"name": "prime-qwen3"}}
    assert args["online_difficulty_filtering"] is True and args["use_lora"] is False  # no lora table: full FT
    assert (args["lr_scheduler_type"], args["warmup_steps"], args["learning_rate"]) == ("cosine", 3, 1e-6)
    assert args["wandb"] == {"project": "duel"}
    assert native["eval"] == {"interval": 10, "num_examples": 16, "rollouts_per_example": 1, "before": False,
                              "after": False, "env": [{"id": "kuhn-poker", "api": "v1", "args": {
                                  "taskset": {}, "renderer": {"name": "prime-qwen3"}}}]}
    run = resolve_run(load(tmp_path, TWO_SEATS_GATED)[0], {"output_dir": str(tmp_path / "o")},
                      check_environments=False)
    assert run.args.online_difficulty_filtering and not run.args.use_lora


def test_opd_with_a_served_teacher_and_two_weighted_sources(tmp_path):
    native = translated(tmp_path, OPD)
    assert native["training_mode"] == "opd"
    assert native["teacher"] == {"url": "http://teacher:8000/v1", "name": "Qwen/Qwen3-8B",
                                 "api_key_var": "TEACHER_KEY"}
    assert [(e["id"], e["ratio"]) for e in native["env"]] == [("reverse-text", 3.0), ("gsm8k", 1.0)]
    assert native["trainer"]["args"]["loss"] == {"kl_tau": 0.002}


@pytest.mark.parametrize("edit, expected", [
    (("[orchestrator.algo]\ntype = \"opd\"", "[orchestrator.algo]\ntype = \"echo\""),
     "orchestrator.algo.type: 'echo' is not supported by the local trainer"),
    (("[trainer.loss]\nkl_tau = 0.002", "[trainer.loss]\ndppo_mask_low = 0.1"),
     "trainer.loss.dppo_mask_low: not supported yet by the local trainer"),
    (("ratio = 3.0", "ratio = 3.0\ngroup_size = 4"),
     "orchestrator.train.source.0.group_size: 4 differs from orchestrator.group_size 2"),
    (("env = { taskset = { id = \"gsm8k\" } }", "env = { taskset = { name = \"gsm8k\" } }"),
     "orchestrator.train.source.1.env.taskset.id: required key is missing"),
    (("[orchestrator]\n", "[orchestrator]\nseed_everything = true\n"),
     "orchestrator.seed_everything: not supported yet by the local trainer"),
    (("teacher = { base_url", "teacher = { url"), "orchestrator.algo.teacher: a frozen model reference needs "
                                                  "base_url"),
])
def test_what_the_local_trainer_cannot_run_is_one_line_naming_the_prime_rl_key(edit, expected, tmp_path):
    raw, opts = load(tmp_path, OPD.replace(*edit))
    with pytest.raises(ConfigError) as e:
        resolve_run(raw, opts, check_environments=False)
    assert str(e.value).startswith(expected) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("override, expected", [
    ("--max-step", "max_step: unknown key (did you mean max_steps?)"),
    ("--orchestrator.group-siz", "orchestrator.group_siz: unknown key (did you mean orchestrator.group_size?)"),
    ("--orchestrator.train.sampling.temprature",
     "orchestrator.train.sampling.temprature: unknown key (did you mean orchestrator.train.sampling.temperature?)"),
    ("--trainer.optim.lrr", "trainer.optim.lrr: unknown key (did you mean trainer.optim.lr?)"),
    ("--trainer.optim.foo", "trainer.optim.foo: not supported yet by the local trainer"),  # no such key: as before
])
def test_a_misspelt_prime_rl_key_is_named_as_one_not_as_unsupported(override, expected, tmp_path):
    # Before: every key the translation did not read was "not supported yet by the local trainer", a typo too, so a
    # user would drop a setting the local trainer does run.
    raw, opts = load(tmp_path, ONE_SEAT, override, "3")
    with pytest.raises(ConfigError) as e:
        resolve_run(raw, opts, check_environments=False)
    assert str(e.value) == expected


def test_a_later_error_names_the_key_the_user_wrote(tmp_path):
    raw, opts = load(tmp_path, ONE_SEAT, "--orchestrator.batch-size", "60")
    with pytest.raises(ConfigError) as e:
        resolve_run(raw, opts, check_environments=False)
    assert str(e.value).startswith("orchestrator.batch_size: batch_size=60 must be a multiple of "
                                   "rollouts_per_example=8"), str(e.value)


def test_deprecated_keys_translate_with_one_warning_each(tmp_path, capsys):
    text = TWO_SEATS_GATED.replace("skip_first_step = true", "eval_base_model = true") \
        .replace("[orchestrator]\n", "[orchestrator]\ntrajectory_strategy = \"interleaved\"\n")
    native = translated(tmp_path, text)
    assert native["eval"]["before"] is True  # eval_base_model = true is skip_first_step = false
    warnings = [l for l in capsys.readouterr().err.splitlines() if l.startswith("warning:")]
    assert len(warnings) == 2, warnings
    assert any("orchestrator.eval.eval_base_model is deprecated" in w for w in warnings)
    assert any("orchestrator.trajectory_strategy is deprecated" in w for w in warnings)


def test_the_retired_prime_rl_format_still_runs_with_one_warning(tmp_path, capsys):
    path = tmp_path / "old.toml"
    path.write_text('model = "Qwen/Qwen3-0.6B"\nmax_steps = 5\nbatch_size = 8\nrollouts_per_example = 2\n'
                    '[[env]]\nid = "reverse-text"\n')
    raw = parse_args(["@", str(path)])[1]
    native, _ = hosted.translate(raw)
    assert native["env"] == {"id": "reverse-text", "args": {}}
    warnings = [l for l in capsys.readouterr().err.splitlines() if l.startswith("warning:")]
    assert len(warnings) == 1 and "`prime train` takes prime-rl's own config" in warnings[0], warnings


def test_a_v1_config_without_verifiers_04_is_one_line_naming_the_extra(tmp_path, capsys):
    """This venv has no verifiers 0.4 (the v1 venv's run of the same config: tests/test_v1_envs.py)."""
    try:
        import verifiers.v1  # noqa: F401
        pytest.skip("verifiers 0.4 is installed here")
    except ImportError:
        pass
    raw_path = tmp_path / "prime.toml"
    raw_path.write_text(ONE_SEAT)
    with pytest.raises(SystemExit) as e:
        rl_cli.main(["@", str(raw_path), "--dry-run", "--output-dir", str(tmp_path / "out")])
    err = [l for l in capsys.readouterr().err.splitlines() if l.startswith("error:")]
    assert e.value.code == 2 and len(err) == 1, err
    assert err[0].startswith("error: orchestrator.train.source.0.api: a verifiers v1 environment needs "
                             "verifiers>=0.4") and "uv sync --extra verifiers-v1" in err[0]


def test_eval_sampling_the_local_eval_cannot_take_is_one_line(tmp_path):
    raw, opts = load(tmp_path, TWO_SEATS_GATED.replace("skip_first_step = true",
                                                       "skip_first_step = true\nsampling = { top_k = 20 }"))
    with pytest.raises(ConfigError) as e:
        resolve_run(raw, opts, check_environments=False)
    assert str(e.value).startswith("orchestrator.eval.sampling.top_k: not supported yet"), str(e.value)


def test_no_wandb_turns_off_the_configs_monitor_and_eval_has_its_own_length(tmp_path):
    args = translated(tmp_path, TWO_SEATS_GATED, "--no-wandb")["trainer"]["args"]
    assert "wandb" not in args  # [monitors.wandb] is on in the file: the command line turns it off
    assert translated(tmp_path, TWO_SEATS_GATED, "--wandb.name", "r1")["trainer"]["args"]["wandb"] == {
        "project": "duel", "name": "r1"}
    lengths = TWO_SEATS_GATED.replace("group_size = 4", "group_size = 4\n\n[orchestrator.train.sampling]\n"
                                      "max_completion_tokens = 64").replace(
        "skip_first_step = true", "skip_first_step = true\nsampling = { max_completion_tokens = 64 }")
    assert translated(tmp_path, lengths)["trainer"]["args"]["max_tokens"] == 64  # prime-rl's configs repeat it
    # an eval length of its own is [eval] max_tokens (before: refused, the local eval sampled the training one)
    longer = lengths.replace("sampling = { max_completion_tokens = 64 }", "sampling = { max_completion_tokens = 128 }")
    assert translated(tmp_path, longer)["eval"]["max_tokens"] == 128
    raw, opts = load(tmp_path, longer.replace("[orchestrator.eval.source.env.taskset]",
                                              "sampling = { max_completion_tokens = 32 }\n"
                                              "[orchestrator.eval.source.env.taskset]"))
    with pytest.raises(ConfigError) as e:
        resolve_run(raw, opts, check_environments=False)
    assert str(e.value).startswith("orchestrator.eval.source.0.sampling.max_completion_tokens: 32 differs from "
                                   "orchestrator.eval.sampling's (128)"), str(e.value)


def test_a_lora_table_without_a_rank_takes_prime_rls_default_rank(tmp_path):
    lora = TWO_SEATS_GATED.replace("[trainer.scheduler]", "[trainer.model.lora]\nalpha = 64\n\n[trainer.scheduler]")
    args = translated(tmp_path, lora)["trainer"]["args"]
    assert (args["use_lora"], args["lora_rank"], args["lora_alpha"]) == (True, 16, 64)


def test_checkpoints_come_at_the_interval_or_at_the_end_only(tmp_path):
    assert translated(tmp_path, TWO_SEATS_GATED)["trainer"]["args"]["save_steps"] == 30  # no [ckpt]: max_steps
    alone = TWO_SEATS_GATED.replace("[trainer.scheduler]", "[ckpt]\nkeep_last = 2\n\n[trainer.scheduler]")
    assert translated(tmp_path, alone)["trainer"]["args"]["save_steps"] == 30
    assert translated(tmp_path, alone.replace("keep_last = 2", "interval = 10"))["trainer"]["args"][
        "save_steps"] == 10


def test_prime_rls_resume_table_resumes_the_local_run(tmp_path):
    # Before: [resume] was set aside as the hosted run's, so a resumed config started afresh.
    assert "resume_from_checkpoint" not in translated(tmp_path, TWO_SEATS_GATED)["trainer"]["args"]
    for table, expected in (("[resume]\n", "auto"), ("[resume]\nstep = 20\n", 20),
                            ("[resume]\ndir = 'out/checkpoint-20'\n", "out/checkpoint-20")):
        args = translated(tmp_path, TWO_SEATS_GATED + "\n" + table)["trainer"]["args"]
        assert args["resume_from_checkpoint"] == expected
    with pytest.raises(ConfigError, match=r"^resume.step, resume.dir: give one"):
        translated(tmp_path, TWO_SEATS_GATED + "\n[resume]\nstep = 2\ndir = 'x'\n")


def test_an_empty_resume_table_continues_a_run_or_starts_one(tmp_path, capsys):
    """prime-rl's empty [resume] resumes the newest checkpoint when there is one and otherwise starts from scratch
    (before: a first run with it was refused for having no checkpoint)."""
    from verifiers_rl.trainer.checkpoints import resolve_resume

    path, out = tmp_path / "prime.toml", tmp_path / "out"
    path.write_text(ONE_SEAT + "\n[resume]\n")
    _, raw, opts = parse_args(["@", str(path), "--output-dir", str(out)])
    args = resolve_run(raw, opts, check_environments=False).args
    assert args.resume_from_checkpoint == "auto"
    assert resolve_resume(str(out), args.resume_from_checkpoint, say=True) is None
    assert f"no complete checkpoint in {out} yet: starting from scratch" in capsys.readouterr().out
    (out / "checkpoint-10").mkdir(parents=True)
    (out / "checkpoint-10" / "trainer_state.json").write_text("{}")
    (out / "checkpoint-10" / "scheduler.pt").write_text("x")
    assert resolve_resume(str(out), args.resume_from_checkpoint) == str(out / "checkpoint-10")


def test_the_policy_may_be_named_by_the_trainer_and_the_run_by_run_name(tmp_path):
    """prime-rl's shared [model] is optional (each part may name its own model) and its run's name is [run] name;
    trainer.enable_token_export is vf-rl's option of the same name."""
    split = ONE_SEAT.replace('[model]\nname = "Qwen/Qwen3-0.6B"', '[run]\nname = "r1"\n\n[trainer]\n'
                             'enable_token_export = true\n\n[trainer.model]\nname = "zai-org/GLM-5.1"\n\n'
                             '[orchestrator.model]\nname = "zai-org/GLM-5.1-FP8"')
    native = translated(tmp_path, split)
    assert native["model"] == "zai-org/GLM-5.1"  # the weights trained; the orchestrator's names a served copy
    assert (native["trainer"]["args"]["run_name"], native["trainer"]["args"]["enable_token_export"]) == ("r1", True)
    served_only = ONE_SEAT.replace('[model]\nname = "Qwen/Qwen3-0.6B"', '[orchestrator.model]\nname = "m/x"')
    assert translated(tmp_path, served_only)["model"] == "m/x"
    with pytest.raises(ConfigError, match=r"^model.name: required key is missing .* or trainer.model.name\)$"):
        translated(tmp_path, ONE_SEAT.replace('[model]\nname = "Qwen/Qwen3-0.6B"', ""))


def test_the_orchestrators_part_of_a_split_run_is_one_line_not_an_sft_config(tmp_path):
    """prime-rl's k8s examples split a run into trainer, orchestrator and inference files; the orchestrator's has a
    [model] table and no [orchestrator], as an SFT config (before: vf-rl called it one and sent it to vf-sft)."""
    orch = ('max_steps = 20\nbatch_size = 128\ngroup_size = 16\n\n[model]\nname = "m"\n\n[[train.source]]\n'
            'name = "reverse-text"\n\n[train.source.env.taskset]\nid = "reverse-text"\n')
    raw, _ = load(tmp_path, orch)
    with pytest.raises(ConfigError, match=r"^train: a key of prime-rl's orchestrator config, one part of a run "
                                          r"split .*put this file's keys under \[orchestrator\]"):
        config_format(raw)


def test_activation_checkpointing_turns_on_gradient_checkpointing(tmp_path, capsys):
    # Before: on only with a [trainer.model.ac] table; prime-rl's trainer checkpoints activations without one too.
    assert translated(tmp_path, ONE_SEAT)["trainer"]["args"]["gradient_checkpointing"] is True
    ac = ONE_SEAT.replace("[trainer.model.lora]", "[trainer.model.ac]\nfreq = 1\n\n[trainer.model.lora]")
    assert translated(tmp_path, ac)["trainer"]["args"]["gradient_checkpointing"] is True
    assert "trainer.model.ac" not in capsys.readouterr().err
    every_other = ac.replace("freq = 1", "freq = 2")
    assert translated(tmp_path, every_other)["trainer"]["args"]["gradient_checkpointing"] is True
    assert "trainer.model.ac: this trainer checkpoints every layer whole" in capsys.readouterr().err


def test_chat_template_kwargs_in_extra_body_reach_the_policys_template(tmp_path):
    thinking = ONE_SEAT.replace("temperature = 0.9", "temperature = 0.9\nextra_body = {chat_template_kwargs = "
                                "{enable_thinking = false}}")
    assert translated(tmp_path, thinking)["trainer"]["args"]["chat_template_kwargs"] == {"enable_thinking": False}
    with pytest.raises(ConfigError) as e:
        translated(tmp_path, thinking.replace("extra_body = {", "extra_body = {top_k = 20, "))
    assert str(e.value) == "orchestrator.train.sampling.extra_body.top_k: not supported yet by the local trainer"


@pytest.mark.parametrize("optim, expected", [
    ("type = 'muon'\nmu = 0.9\nlr = 3e-4", {"optim": "muon", "optim_args": "momentum=0.9,nesterov=false",
                                             "adam_beta2": 0.95, "learning_rate": 3e-4}),
    ("type = 'muon'\nbetas1 = 0.8\nbetas2 = 0.99", {"optim": "muon", "optim_args": "momentum=0.95,nesterov=false",
                                                   "adam_beta1": 0.8, "adam_beta2": 0.99}),
    ("type = 'sign_sgd'\nweight_decay = 0.0", {"optim": "sign_sgd", "weight_decay": 0.0}),
    ("type = 'sgd'\nnesterov = false", {"optim": "sgd", "optim_args": "momentum=0.9,nesterov=False"}),
])
def test_prime_rls_muon_sign_sgd_and_sgd_translate_to_optim(optim, expected, tmp_path):
    # Before: every optimizer but adamw was refused ("not supported yet"), so prime-rl's Muon examples did not run.
    text = ONE_SEAT.replace("[trainer.optim]\nlr = 2e-6", f"[trainer.optim]\n{optim}")
    args = translated(tmp_path, text)["trainer"]["args"]
    assert {k: args.get(k) for k in expected} == expected
    run = resolve_run(load(tmp_path, text)[0], {"output_dir": str(tmp_path / "out")}, check_environments=False)
    assert run.args.optim == expected["optim"]


def test_dist_timeout_seconds_is_the_process_groups_timeout(tmp_path):
    args = translated(tmp_path, ONE_SEAT + "\n[trainer]\ndist_timeout_seconds = 3600\n")["trainer"]["args"]
    assert args["ddp_timeout"] == 3600


def _lr_per_step(args) -> list[float]:
    import torch
    from transformers import get_scheduler

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=args.learning_rate)
    sched = get_scheduler(args.lr_scheduler_type, opt, num_warmup_steps=args.warmup_steps,
                          num_training_steps=args.max_steps, scheduler_specific_kwargs=args.lr_scheduler_kwargs)
    lrs = []
    for _ in range(args.max_steps):
        lrs.append(opt.param_groups[0]["lr"] / args.learning_rate)
        opt.step(), sched.step()
    return lrs


def test_prime_rls_linear_schedule_holds_the_peak_until_its_last_decay_steps(tmp_path):
    # prime-rl's `linear` is warm-up, constant, then a linear decay over the last decay_steps (default 10) to min_lr.
    # Before: it became transformers' `linear`, which decays from the end of the warm-up on (the peak held one step),
    # and min_lr / decay_steps were refused.
    text = ONE_SEAT.replace("[trainer.optim]\nlr = 2e-6", "[trainer.optim]\nlr = 1e-4\n\n[trainer.scheduler]\n"
                            "type = 'linear'\nwarmup_steps = 4\nmin_lr = 1e-5")
    text = text.replace("max_steps = 40", "max_steps = 20")
    run = resolve_run(load(tmp_path, text)[0], {"output_dir": str(tmp_path / "out")}, check_environments=False)
    lrs = _lr_per_step(run.args)
    assert lrs[0] == pytest.approx(0.1) and lrs[4:10] == [pytest.approx(1.0)] * 6  # from min_lr; the peak, held
    assert lrs[10:] == sorted(lrs[10:], reverse=True) and 0.1 <= lrs[-1] < 0.3  # the last 10 decay toward min_lr
    cosine = text.replace("type = 'linear'", "type = 'cosine'")
    lrs = _lr_per_step(resolve_run(load(tmp_path, cosine)[0], {"output_dir": str(tmp_path / "o2")},
                                   check_environments=False).args)
    assert lrs[4] == pytest.approx(1.0) and lrs[-1] == pytest.approx(0.1, abs=0.02)  # cosine down to min_lr


@pytest.mark.parametrize("scheduler, expected", [
    ("type = 'linear'\nwarmup_steps = 0\ndecay_steps = 0", "trainer.scheduler: a linear schedule needs warmup_steps"),
    ("type = 'linear'\nwarmup_steps = 30\ndecay_steps = 20", "trainer.scheduler.decay_steps: warmup_steps (30) + "
                                                            "decay_steps (20) exceed max_steps (40)"),
])
def test_a_linear_schedule_prime_rl_would_refuse_is_one_line(scheduler, expected, tmp_path):
    raw, opts = load(tmp_path, ONE_SEAT + f"\n[trainer.scheduler]\n{scheduler}\n")
    with pytest.raises(ConfigError) as e:
        resolve_run(raw, opts, check_environments=False)
    assert str(e.value).startswith(expected) and "\n" not in str(e.value), str(e.value)


def test_prime_rls_defaults_that_change_training_are_kept_or_overridden(tmp_path):
    # Before: kl_tau defaulted to 0 (prime-rl: 1e-3), filter_zero_advantages was accepted and dropped (prime-rl
    # leaves zero-advantage tokens out of the loss and its token count), ckpt.keep_interval was dropped.
    text = ONE_SEAT.replace("[ckpt]\ninterval = 10", "[ckpt]\ninterval = 10\nkeep_interval = 20").replace(
        "[orchestrator.train.sampling]", "[orchestrator.train]\nfilter_zero_advantages = false\n\n"
                                         "[orchestrator.train.sampling]")
    args = translated(tmp_path, text.replace("[trainer.optim]", "[trainer.loss]\nkl_tau = 0.0\n\n[trainer.optim]"))
    args = args["trainer"]["args"]
    assert (args["loss"], args["filter_zero_advantages"], args["save_keep_interval"]) == ({"kl_tau": 0.0}, False, 20)
    run = resolve_run(load(tmp_path, ONE_SEAT)[0], {"output_dir": str(tmp_path / "out")}, check_environments=False)
    assert run.args.filter_zero_advantages and run.args.loss_config().kl_tau == 1e-3
    opd = translated(tmp_path, OPD)["trainer"]["args"]
    assert "filter_zero_advantages" not in opd  # no advantages in opd: nothing to filter (prime-rl: a no-op)
    wsd = translated(tmp_path, ONE_SEAT + "\n[trainer.scheduler]\ntype = 'linear'\nwarmup_steps = 3\n"
                                          "decay_steps = 0\n")["trainer"]["args"]
    assert (wsd["lr_scheduler_type"], wsd["warmup_steps"]) == ("constant_with_warmup", 3)


def test_a_samples_length_is_the_orchestrators_and_any_prompt_that_fits_trains(tmp_path):
    # Before: the prompt budget was derived (max_seq_len - max_tokens), so a rollout whose prompt was longer carried
    # no loss, where prime-rl trains every sample up to seq_len; and orchestrator.seq_len (a sample's length in
    # prime-rl, trainer.model.seq_len being the packing budget) was set aside.
    args = translated(tmp_path, ONE_SEAT.replace("[orchestrator]\n", "[orchestrator]\nseq_len = 512\n"))
    assert (args["trainer"]["args"]["max_seq_len"], args["trainer"]["args"]["max_prompt_len"]) == (512, 511)
    run = resolve_run(load(tmp_path, ONE_SEAT)[0], {"output_dir": str(tmp_path / "out")}, check_environments=False)
    assert (run.args.max_seq_len, run.args.max_prompt_len, run.args.max_tokens) == (1024, 1023, 96)


def test_prime_rls_rae_runs_its_default_group_of_one(tmp_path):
    # prime-rl's configs/debug/algo/rae.toml shape: rae with group_size left at its default of 1 (a per-agent
    # baseline, not the group's). Before: refused; grpo with a group of one still is, in one line.
    text = ONE_SEAT.replace("group_size = 8\n", "") + "\n[orchestrator.algo]\ntype = \"rae\"\n"
    run = resolve_run(load(tmp_path, text)[0], {"output_dir": str(tmp_path / "o")}, check_environments=False)
    assert run.args.rollouts_per_example == 1 and resolve_advantage(run.args)[1].decay == 0.95
    with pytest.raises(ConfigError, match="rollouts_per_example=1 must be >= 2"):
        resolve_run(load(tmp_path, ONE_SEAT.replace("group_size = 8\n", ""))[0], {"output_dir": str(tmp_path / "p")},
                    check_environments=False)
