"""vf-rl config loading: merge / override / None / boolean rules, one-line errors, hosted-format translation,
--dry-run of every shipped config (and its round trip), the hardware check, init, vf-setup."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import pytest

from verifiers_rl.cli import rl as rl_cli
from verifiers_rl.config import hosted
from verifiers_rl.config.loading import ConfigError, load_env_files, parse_args, read_env_file
from verifiers_rl.config.resolution import config_format
from verifiers_rl.config.schema import resolve_run, validate_run_config

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs" / "vf-rl").glob("*.toml"))
BASE = {"model": "m", "env": {"id": "reverse-text"}}


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def err(fn, *a, **k) -> str:
    with pytest.raises(ConfigError) as e:
        fn(*a, **k)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def resolve(raw: dict, **options):
    return resolve_run(raw, options)


# --- merge / override / None / boolean rules -------------------------------------------------------------------------


def test_files_merge_left_to_right_tables_merge_lists_replace(tmp_path):
    a = write(tmp_path, "a.toml", 'model = "a"\nx = [1, 2, 3]\n[t]\nk1 = 1\nk2 = 2\n[t.sub]\ns = "a"\n')
    b = write(tmp_path, "b.toml", 'model = "b"\nx = [9]\n[t]\nk2 = 20\nk3 = 30\n[t.sub]\nu = "b"\n')
    files, raw, _ = parse_args(["@", str(a), "@", str(b)])
    assert files == [a, b]
    assert raw == {"model": "b", "x": [9], "t": {"k1": 1, "k2": 20, "k3": 30, "sub": {"s": "a", "u": "b"}}}
    _, raw2, _ = parse_args([f"@{a}"])  # '@file' without a space works too
    assert raw2["model"] == "a"


def test_overrides_win_kebab_or_snake_json_values(tmp_path):
    a = write(tmp_path, "a.toml", '[trainer.args]\nmax_steps = 100\nlearning_rate = 1e-5\nrun_name = "x"\n')
    _, raw, opts = parse_args(["@", str(a), "--trainer.args.max-steps", "5", "--trainer.args.learning_rate=2e-4",
                               "--trainer.args.run-name", "abc", "--trainer.args.lora-target-modules", '["q_proj"]',
                               "--env.args", '{"k": 1}', "--trainer.args.top-k", "-1"])
    args = raw["trainer"]["args"]
    assert args == {"max_steps": 5, "learning_rate": 2e-4, "run_name": "abc", "lora_target_modules": ["q_proj"],
                    "top_k": -1}
    assert raw["env"] == {"args": {"k": 1}}
    assert opts["config_files"] == [a]


def test_a_json_table_override_merges_into_the_table(tmp_path):
    a = write(tmp_path, "a.toml", '[env]\nid = "x"\n[env.args]\nkeep = 1\nchange = 2\n')
    _, raw, _ = parse_args(["@", str(a), "--env.args", '{"change": 3, "new": 4}'])
    assert raw["env"]["args"] == {"keep": 1, "change": 3, "new": 4}


def test_booleans_flag_and_no_flag(tmp_path):
    a = write(tmp_path, "a.toml", "[trainer.args]\nuse_lora = true\nbf16 = false\n")
    _, raw, _ = parse_args(["@", str(a), "--trainer.args.no-use-lora", "--trainer.args.bf16",
                            "--no-eval.before", "--trainer.args.shuffle-dataset", "false"])
    assert raw["trainer"]["args"] == {"use_lora": False, "bf16": True, "shuffle_dataset": False}
    assert raw["eval"] == {"before": False}


def test_none_string_in_toml_and_on_the_command_line(tmp_path):
    a = write(tmp_path, "a.toml", 'model = "None"\n[trainer.args]\nmax_tokens = "None"\nlst = ["None", 1]\n'
                                  '[env.args]\nsystem_prompt = "None"\n')
    _, raw, _ = parse_args(["@", str(a), "--trainer.args.top-k", "None", "--trainer.args.seed=None"])
    assert raw["model"] is None and raw["env"]["args"]["system_prompt"] is None
    assert raw["trainer"]["args"] == {"max_tokens": None, "lst": [None, 1], "top_k": None, "seed": None}


def test_list_index_overrides_and_append(tmp_path):
    a = write(tmp_path, "a.toml", '[[env]]\nid = "a"\n')
    _, raw, _ = parse_args(["@", str(a), "--env.0.id", "b", "--env.1.id", "c", "--eval.env.0.id", "d"])
    assert raw["env"] == [{"id": "b"}, {"id": "c"}]
    assert raw["eval"] == {"env": [{"id": "d"}]}
    assert "index 5 is past the end" in err(parse_args, ["@", str(a), "--env.5.id", "x"])


def test_run_options_are_not_config_keys(tmp_path):
    a = write(tmp_path, "a.toml", 'model = "m"\n')
    _, raw, opts = parse_args(["@", str(a), "--dry-run", "--output-dir", "out/x", "--detach"])
    assert raw == {"model": "m"}
    assert opts["dry_run"] is True and opts["output_dir"] == "out/x" and opts["detach"] is True


def test_loading_errors_are_one_line(tmp_path):
    assert "does not exist" in err(parse_args, ["@", str(tmp_path / "nope.toml")])
    bad = write(tmp_path, "bad.toml", "model = \n")
    assert "invalid TOML" in err(parse_args, ["@", str(bad)])
    assert "'@' must be followed" in err(parse_args, ["@"])
    assert "unexpected argument 'x'" in err(parse_args, ["x"])
    assert "x.toml does not exist" in err(parse_args, ["x.toml"])  # a .toml without @ is a config file


def test_optional_sections_bare_flag_enables_no_flag_disables():
    cfg = validate_run_config({**BASE, "eval": True, "tiny_model": {}})
    assert cfg.eval is not None and cfg.eval.num_examples == 256 and cfg.tiny_model is not None
    assert validate_run_config({**BASE, "eval": False}).eval is None
    assert validate_run_config({**BASE, "eval": None}).eval is None


def test_env_file_paths_are_relative_to_the_config_file(tmp_path):
    sub = tmp_path / "cfg"
    sub.mkdir()
    (sub / "secrets.env").write_text('# comment\nexport A_KEY="abc"\nB_KEY=def # trailing\n\nC_KEY=\'x y\'\n')
    a = write(sub, "a.toml", 'env_file = ["secrets.env"]\n')
    _, raw, _ = parse_args(["@", str(a)])
    assert raw["env_file"] == [str((sub / "secrets.env").resolve())]
    assert read_env_file(sub / "secrets.env") == {"A_KEY": "abc", "B_KEY": "def", "C_KEY": "x y"}
    environ = {"B_KEY": "already"}
    assert load_env_files(raw["env_file"], environ) == ["A_KEY", "B_KEY", "C_KEY"]
    assert environ == {"A_KEY": "abc", "B_KEY": "already", "C_KEY": "x y"}  # set variables win
    assert "env_file: " in err(load_env_files, [str(sub / "missing.env")], {})


# --- one-line errors -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw, expected", [
    ({**BASE, "inferenc": {}}, "inferenc: unknown key (did you mean inference?)"),
    ({**BASE, "learning_rate": 1e-5}, "learning_rate: unknown key (did you mean trainer.args.learning_rate?)"),
    ({**BASE, "env": {"idd": "x"}}, "env.idd: unknown key (did you mean env.id?)"),
    ({**BASE, "warmup": {"completion_format": "{answer}", "max_step": 3}},
     "warmup.max_step: unknown key (did you mean warmup.max_steps?)"),
    ({**BASE, "eval": {"env": [{"id": "x", "num_example": 3}]}},
     "eval.env.0.num_example: unknown key (did you mean eval.env.0.num_examples?)"),
    ({**BASE, "inference": {"gpus": "two"}}, "inference.gpus: expected int or list of int, got 'two'"),
    ({**BASE, "warmup": {"completion_format": "{answer}", "max_steps": "5"}},
     "warmup.max_steps: expected int, got '5'"),
    ({**BASE, "eval": {"before": "yes"}}, "eval.before: expected bool (true/false), got 'yes'"),
    ({**BASE, "tiny_model": {"layers": None}}, "tiny_model.layers: expected int, got None"),
    # the shape vf-tiny-model refuses is refused here too, before a run builds it (models/tiny.py shape_problem)
    ({**BASE, "tiny_model": {"layers": 0}}, "tiny_model.layers: layers=0 must be a positive integer"),
    ({**BASE, "tiny_model": {"heads": 3}}, "tiny_model.heads: hidden=128 must be divisible by heads=3; e.g. heads=2"),
    ({**BASE, "tiny_model": {"kv_heads": 3}}, "tiny_model.kv_heads: heads=4 must be divisible by kv_heads=3"),
    ({**BASE, "inference": {"backend": "sglang"}}, "inference.backend: 'sglang' is not one of 'auto', 'local', 'vllm'"),
    ({"model": "m"}, "env: required key is missing"),
    ({"model": "m", "env": {}}, "env.id: required key is missing"),
    ({**BASE, "warmup": {}}, "warmup.completion_format: required key is missing"),
    ({"env": {"id": "x"}}, "model: required key is missing"),
    ({**BASE, "warmup": {"completion_format": "<a></a>"}}, "warmup.completion_format: '<a></a>' must contain {answer}"),
    ({**BASE, "env": [{"id": "a"}, {"id": "x/a", "ratio": 0.5}]}, "env: two [[env]] entries are named 'a'"),
    ({**BASE, "env": [{"id": "a", "ratoi": 1}]}, "env.0.ratoi: unknown key (did you mean env.0.ratio?)"),
    ({**BASE, "inference": {"backend": "local", "urls": ["http://h:1/v1"]}}, "inference.urls: set, but"),
    # flags of a server vf-rl would start, beside servers it starts none of: refused, not silently dropped
    ({**BASE, "inference": {"urls": ["http://h:1/v1"], "args": {"max_model_len": 4096}}},
     "inference.args: is for the server vf-rl starts, and with inference.urls none is started"),
    ({**BASE, "inference": {"env": {"VLLM_CPU_KVCACHE_SPACE": "1"}},
      "trainer": {"args": {"vllm_server_urls": ["http://h:1/v1"]}}}, "inference.env: is for the server vf-rl starts"),
    ({**BASE, "inference": {"gpus": [0, 0]}}, "inference.gpus: [0, 0] must be distinct"),
    ({**BASE, "trainer": {"gpus": -1}}, "trainer.gpus: -1 must be >= 0"),
    ({**BASE, "eval": {"interval": 0}}, "eval.interval: 0 must be >= 1"),
    ({**BASE, "warmup": {"completion_format": "{answer}", "max_steps": -1}}, "warmup.max_steps: -1 must be >= 1"),
    ({**BASE, "warmup": {"completion_format": "{answer}", "micro_batch_size": 3}},
     "warmup: micro_batch_size = 3 does not divide batch_size = 32"),
    ({**BASE, "env": [{"id": "a", "ratio": 0}]}, "env.0.ratio: 0 must be > 0"),
    ({**BASE, "eval": {"env": [{"id": "a"}, {"id": "a"}]}}, "eval.env: two eval envs are named 'a'"),
])
def test_schema_errors(raw, expected):
    assert err(validate_run_config, raw).startswith(expected)


def test_one_entry_env_array_is_the_same_as_env_table():
    assert validate_run_config({**BASE, "env": [{"id": "reverse-text", "ratio": 1.0}]}).envs[0].id == "reverse-text"


@pytest.mark.parametrize("args, expected", [
    ({"max_step": 5}, "trainer.args.max_step: unknown key (did you mean trainer.args.max_steps?)"),
    ({"learnig_rate": 1e-5}, "trainer.args.learnig_rate: unknown key (did you mean trainer.args.learning_rate?)"),
    ({"num_generations": 8}, "trainer.args.num_generations: unknown key (TRL's GRPOConfig name: set "
     "rollouts_per_example)"),
    ({"generation_kwargs": {"top_k": 20}}, "trainer.args.generation_kwargs: unknown key (TRL's GRPOConfig name: set "
     "temperature, top_p, top_k, min_p"),  # it was pointed at generation_timeout ('did you mean')
    ({"max_steps": "ten"}, "trainer.args.max_steps: expected int, got 'ten'"),
    ({"use_lora": "yes"}, "trainer.args.use_lora: expected bool (true/false), got 'yes'"),
    ({"temperature": None}, "trainer.args.temperature: expected float, got None"),
    ({"lora_target_modules": [1]}, "trainer.args.lora_target_modules: expected list of str or str, got [1]"),
    ({"optim": "adamw_fancy"}, "trainer.args.optim: 'adamw_fancy' is not one of"),
    # RLConfig's own validators, mapped to the field they are about
    ({"batch_size": 48, "micro_batch_size": 32, "rollouts_per_example": 16},
     "trainer.args.batch_size: batch_size=48 must be divisible by micro_batch_size x world_size = 32 x 1"),
    ({"batch_size": 36, "rollouts_per_example": 8},
     "trainer.args.batch_size: batch_size=36 must be a multiple of rollouts_per_example=8"),
    ({"rollouts_per_example": 1}, "trainer.args.rollouts_per_example: rollouts_per_example=1 must be >= 2"),
    ({"micro_batch_size": 0}, "trainer.args.micro_batch_size: micro_batch_size=0 must be a positive integer"),
    ({"max_steps": -1}, "trainer.args.max_steps: max_steps=-1 must be a positive integer"),
    ({"use_lora": True, "lora_dropout": 1.0}, "trainer.args.lora_dropout: lora_dropout=1.0 must be in [0, 1)"),
    ({"loss": {"beta": -1.0}}, "trainer.args.loss: loss.beta=-1.0 must be >= 0"),
    ({"loss": {"kl_tau": "x"}}, "trainer.args.loss: loss.kl_tau: expected float, got 'x'"),
    ({"temperature": -1.0}, "trainer.args.temperature: temperature=-1.0 must be >= 0"),
    ({"eval_temperature": -0.5}, "trainer.args.eval_temperature: eval_temperature=-0.5 must be >= 0"),
    ({"top_p": 0.0}, "trainer.args.top_p: top_p=0.0 must be in (0, 1]"),
    ({"max_tokens": 2048}, "trainer.args.max_tokens: max_tokens=2048 must be in [1, max_seq_len=2048)"),
    ({"max_tokens": 4096, "max_seq_len": 1024}, "trainer.args.max_tokens: max_tokens=4096 must be in [1"),
    ({"max_prompt_len": 2048}, "trainer.args.max_prompt_len: max_prompt_len=2048 must be < max_seq_len=2048"),
    ({"use_lora": False, "lora_rank": 16}, "trainer.args.lora_rank: lora_rank is set but use_lora=False"),
    ({"use_lora": False, "lora_alpha": 64}, "trainer.args.lora_alpha: lora_alpha is set but use_lora=False"),
    ({"use_lora": False, "lora_dropout": 0.1}, "trainer.args.lora_dropout: lora_dropout is set but use_lora=False"),
    ({"use_lora": False, "lora_target_modules": "all-linear"},
     "trainer.args.lora_target_modules: lora_target_modules is set but use_lora=False"),
    ({"use_lora": False, "lora_modules_to_save": ["lm_head"]},
     "trainer.args.lora_modules_to_save: lora_modules_to_save is set but use_lora=False"),
    ({"advantage": {"scale_rewards": "std"}},
     "trainer.args.advantage: advantage.scale_rewards='std' is not one of none, group, batch"),
    ({"inference_backend": "sglang"},
     "trainer.args.inference_backend: inference_backend='sglang' is not one of auto, local, vllm"),
    ({"max_async_level": -1}, "trainer.args.max_async_level: max_async_level=-1 must be >= 0"),
    ({"loss": {"mask_ratio_low": 1.5}},
     "trainer.args.loss: loss.mask_ratio_low=1.5 and loss.mask_ratio_high=8.0 must satisfy"),
    ({"gradient_accumulation_steps": 4},
     "trainer.args.gradient_accumulation_steps: gradient_accumulation_steps=4 must be 1"),
    ({"eval_strategy": "steps"}, "trainer.args.eval_strategy: eval_strategy='steps' must be 'no'"),
    ({"eval_steps": 0}, "trainer.args.eval_steps: eval_steps=0"),
    ({"wandb": {"project": "p", "team": "t"}}, "trainer.args.wandb: wandb has unknown key(s) team"),
    ({"lr_scheduler_type": "warp"}, "trainer.args.lr_scheduler_type: 'warp' is not one of 'linear', 'cosine'"),
])
def test_trainer_args_errors(args, expected, tmp_path):
    raw = {**BASE, "trainer": {"args": {"output_dir": str(tmp_path / "o"), "batch_size": 32, "micro_batch_size": 8,
                                        "rollouts_per_example": 8, **args}}}
    assert err(resolve, raw).startswith(expected)


def test_batch_divisibility_with_several_trainer_gpus(tmp_path):
    raw = {**BASE, "trainer": {"gpus": 2, "args": {"output_dir": str(tmp_path), "batch_size": 48,
                                                   "micro_batch_size": 16, "rollouts_per_example": 16}}}
    assert err(resolve, raw).startswith(
        "trainer.args.batch_size: batch_size=48 must be divisible by micro_batch_size x trainer.gpus = 16 x 2")


def test_batch_divisibility_with_several_cpu_processes(tmp_path):
    raw = {**BASE, "trainer": {"processes": 2, "args": {"output_dir": str(tmp_path), "batch_size": 48,
                                                         "micro_batch_size": 16, "rollouts_per_example": 16}}}
    assert err(resolve, raw).startswith(
        "trainer.args.batch_size: batch_size=48 must be divisible by micro_batch_size x trainer.processes = 16 x 2")
    # what several processes do not support yet is refused before launch too (each rank checks it again)
    raw = {**BASE, "trainer": {"processes": 2, "args": {"output_dir": str(tmp_path), "batch_size": 32,
                                                         "micro_batch_size": 16, "rollouts_per_example": 16,
                                                         "online_difficulty_filtering": True}}}
    assert err(resolve, raw).startswith("trainer.args.online_difficulty_filtering: not supported with several "
                                        "training processes yet")


def test_env_that_cannot_be_loaded_and_unknown_env_args(tmp_path):
    raw = {"model": "m", "env": {"id": "owner/no-such-env"}, "trainer": {"args": {"output_dir": str(tmp_path)}}}
    msg = err(resolve, raw)
    assert msg.startswith("env.id: environment 'owner/no-such-env' not found") and "reverse-text" in msg
    raw = {"model": "m", "env": {"id": "reverse-text", "args": {"num_eval_exmples": 3}},
           "trainer": {"args": {"output_dir": str(tmp_path)}}}
    assert err(resolve, raw).startswith("env.args.num_eval_exmples: unknown argument of 'reverse-text''s "
                                        "load_environment() (did you mean env.args.num_eval_examples?)")
    raw = {**BASE, "eval": {"env": [{"id": "nope"}]}, "trainer": {"args": {"output_dir": str(tmp_path)}}}
    assert err(resolve, raw).startswith("eval.env.0.id: environment 'nope' not found")


def test_inference_pass_through_and_conflicts(tmp_path):
    raw = {**BASE, "inference": {"backend": "vllm", "urls": ["http://h:8000/v1"]},
           "trainer": {"args": {"output_dir": str(tmp_path)}}}
    run = resolve(raw)
    assert run.args.inference_backend == "vllm" and run.args.vllm_server_urls == ["http://h:8000/v1"]
    raw["trainer"]["args"]["inference_backend"] = "local"
    assert err(resolve, raw).startswith("trainer.args.inference_backend: 'local' conflicts with inference.backend")


def test_output_dir_option_and_run_name(tmp_path):
    run = resolve({**BASE}, output_dir=str(tmp_path / "my-run"))
    assert run.output_dir == str(tmp_path / "my-run") and run.run_name == "my-run"


@pytest.mark.integration  # spawns a process
def test_cli_error_is_one_line_exit_2_no_traceback(tmp_path, capsys):
    bad = write(tmp_path, "bad.toml", 'model = "m"\n[env]\nid = "reverse-text"\n[trainer.args]\nmax_stepz = 3\n')
    with pytest.raises(SystemExit) as e:
        rl_cli.main(["@", str(bad), "--dry-run"])
    assert e.value.code == 2
    out = capsys.readouterr()
    assert out.err == "error: trainer.args.max_stepz: unknown key (did you mean trainer.args.max_steps?)\n"
    # the real console script: one line on stderr, exit code 2, no traceback (an error found before RLConfig loads)
    bad2 = write(tmp_path, "bad2.toml", 'model = "m"\n[env]\nid = "reverse-text"\n[inference]\ngpus = "two"\n')
    r = subprocess.run([sys.executable, "-m", "verifiers_rl.cli.rl", "@", str(bad2)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == ["error: inference.gpus: expected int or list of int, got 'two'"]


def test_a_tiny_model_shape_it_cannot_build_stops_vf_rl_before_anything_launches(tmp_path, capsys):
    # Before: the dry run passed and the trainer process built the model, then failed with a traceback (ValueError:
    # hidden_size must be divisible by num_heads; a 0-layer model reached peft's NoMatchingPeftModuleError).
    cfg = write(tmp_path, "t.toml", f'[tiny_model]\npath = "{tmp_path / "tiny"}"\nheads = 3\n[env]\n'
                f'id = "reverse-text"\n[trainer.args]\noutput_dir = "{tmp_path / "run"}"\n')
    with pytest.raises(SystemExit) as e:
        rl_cli.main(["@", str(cfg)])
    assert e.value.code == 2
    assert capsys.readouterr().err == ("error: tiny_model.heads: hidden=128 must be divisible by heads=3; "
                                       "e.g. heads=2\n")
    assert not (tmp_path / "tiny").exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv, expected", [
    (["--gpus", "4"], "error: --gpus: a plan for N GPUs is shown by a dry run (add --dry-run); a run uses the GPUs it "
                      "sees (CUDA_VISIBLE_DEVICES)\n"),
    (["--dry-run", "--gpu-memory-gb", "40"],
     "error: --gpu-memory-gb sizes the GPUs of a dry run's plan: add --dry-run --gpus N\n"),
    (["--gpus", "2", "--gpu-memory-gb", "40"],
     "error: --gpus: a plan for N GPUs is shown by a dry run (add --dry-run); a run uses the GPUs it sees "
     "(CUDA_VISIBLE_DEVICES)\n"),
])
def test_plan_options_outside_a_dry_run_plan_are_one_line(tmp_path, capsys, argv, expected):
    # --gpu-memory-gb without a GPU plan was once ignored in silence
    cfg = write(tmp_path, "c.toml", f'model = "m"\n[env]\nid = "reverse-text"\n[trainer.args]\n'
                f'output_dir = "{tmp_path / "run"}"\n')
    with pytest.raises(SystemExit) as e:
        rl_cli.main(["@", str(cfg), *argv])
    assert e.value.code == 2 and capsys.readouterr().err == expected
    assert not (tmp_path / "run").exists()


def test_unknown_subcommand(capsys):
    with pytest.raises(SystemExit):
        rl_cli.main(["lsit"])
    assert "did you mean list?" in capsys.readouterr().err


# --- the hardware check ----------------------------------------------------------------------------------------------


def plan(raw: dict, gpus: int, has_vllm: bool = True):
    from plans import plan_for

    return plan_for(validate_run_config(raw), gpus, lambda: has_vllm)


def test_no_gpu_runs_on_cpu_with_the_local_engine():
    p = plan({**BASE, "inference": {"gpus": 4}, "trainer": {"gpus": 4}}, 0)
    assert p.backend == "local" and not p.start_server
    assert p.lines[0] == "no GPU found: running on the CPU with the local engine (in-process generation)"
    p = plan({**BASE, "inference": {"urls": ["http://h:1/v1"]}}, 0)
    assert p.backend == "vllm" and p.urls == ["http://h:1/v1"] and p.lines[0].startswith("no GPU found")
    p = plan({**BASE, "inference": {"backend": "vllm"}}, 0)
    assert p.start_server and p.lines[0].startswith("no GPU found: training on the CPU; inference: a vLLM server on")


@pytest.mark.integration  # spawns a process
def test_a_gpu_config_on_a_machine_without_gpus_stops_before_anything_loads(tmp_path):
    """A config that states GPUs (the defaults state none) on a CPU machine: one block and exit 2, unless
    --allow-cpu; the GPU count is given to the planner, then checked through the real CLI."""
    from plans import plan_for as plan_launch

    gpu_cfg = validate_run_config({**BASE, "inference": {"gpus": 1}, "trainer": {"gpus": 2}})
    with pytest.raises(ConfigError) as e:  # a short block, not one line: what it asks, what is here, what fits
        plan_launch(gpu_cfg, 0, allow_cpu=False, source="gpu.toml")
    msg = str(e.value)
    assert msg.splitlines()[0] == "this config asks for GPUs (inference.gpus = 1; trainer.gpus = 2)"
    assert "vf-rl @ configs/vf-rl/quickstart.toml" in msg and "--allow-cpu to run gpu.toml" in msg
    assert plan_launch(gpu_cfg, 0, allow_cpu=True).backend == "local"
    assert plan_launch(validate_run_config(BASE), 0, allow_cpu=False).backend == "local"  # defaults ask nothing
    cfg = write(tmp_path, "gpu.toml", 'model = "m"\n[env]\nid = "reverse-text"\n[trainer]\ngpus = 2\n')
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run([sys.executable, "-m", "verifiers_rl.cli.rl", "@", str(cfg), "--output-dir",
                          str(tmp_path / "out")], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 2 and "this config asks for GPUs (trainer.gpus = 2)" in run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "out" / "configs" / "plan.json").exists()


def test_fewer_gpus_than_asked_is_one_line():
    msg = err(plan, {**BASE, "inference": {"gpus": 1, "colocate": False}, "trainer": {"gpus": 1}}, 1)
    assert msg == ("inference.gpus + trainer.gpus: 2 GPUs asked (inference 1 + trainer 1) but only 1 is visible; "
                   "lower them (or set CUDA_VISIBLE_DEVICES)")
    assert err(plan, {**BASE, "inference": {"gpus": 1}, "trainer": {"gpus": 2}}, 1).startswith(
        "inference.gpus + trainer.gpus: 3 GPUs asked")
    assert err(plan, {**BASE, "inference": {"backend": "local"}, "trainer": {"gpus": 3}}, 2).startswith(
        "trainer.gpus: 3 GPUs asked (devices 0, 1, 2) but only 2 GPUs are visible")
    assert err(plan, {**BASE, "inference": {"gpus": [5]}}, 2).startswith("inference.gpus: GPU 5 asked but only 2 GPUs")


def test_gpu_assignment_and_backend_choice():
    p = plan({**BASE, "inference": {"gpus": 6}, "trainer": {"gpus": 2}}, 8)
    assert p.start_server and p.server_gpus == [0, 1, 2, 3, 4, 5] and p.trainer_gpus == [6, 7]
    assert p.lines[0] == "inference: a vLLM server on GPU 0, 1, 2, 3, 4, 5, started by the trainer; trainer on GPU 6, 7"
    p = plan({**BASE}, 2, has_vllm=False)
    assert p.backend == "local" and p.trainer_gpus == [0] and "no Python with vLLM found" in p.lines[0]
    p = plan({**BASE, "inference": {"backend": "local"}, "trainer": {"gpus": 0}}, 2)
    assert p.backend == "local" and p.trainer_gpus == [] and p.lines[-2] == "trainer on the CPU"
    assert p.lines[-1].startswith("sampling: every request states")
    p = plan({**BASE, "inference": {"gpus": [2]}, "trainer": {"gpus": [0, 1]}}, 3)
    assert p.server_gpus == [2] and p.trainer_gpus == [0, 1]


def test_one_gpu_is_shared_by_the_server_and_the_trainer(tmp_path):
    from verifiers_rl.inference.vllm_server import VLLMServer, VLLMServerConfig
    from verifiers_rl.launch import build_processes

    # (GPU counts are given to the planner: no GPU is needed or touched)
    p = plan({**BASE}, 1)  # the defaults: inference.gpus = trainer.gpus = 1
    assert p.colocated and p.start_server and p.server_gpus == [0] and p.trainer_gpus == [0]
    assert p.lines[0] == ("inference: a vLLM server on GPU 0, started by the trainer and sharing the GPU with it "
                          "(the server takes 0.3 of its memory: inference.gpu_memory_utilization)")
    assert not plan({**BASE}, 2).colocated  # two GPUs: split
    assert plan({**BASE, "inference": {"colocate": True}}, 2).trainer_gpus == [0]
    assert err(plan, {**BASE, "inference": {"colocate": True}, "trainer": {"gpus": 2}}, 2).startswith(
        "inference.colocate: server and trainer share one GPU")
    [trainer] = build_processes(p, tmp_path / "rl.toml")
    assert trainer.env["CUDA_VISIBLE_DEVICES"] == "0"
    # the plan's server settings: the trainer's server shares GPU 0 and is capped
    p = plan({**BASE, "inference": {"gpu_memory_utilization": 0.4}}, 1)
    sc = VLLMServerConfig(**p.server)
    sc.model = "/m"
    server = VLLMServer(sc, python="/py")
    assert server.layout.colocated and server.env()["CUDA_VISIBLE_DEVICES"] == "0"
    cmd = server.command()
    assert cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.4"
    assert err(validate_run_config, {**BASE, "inference": {"gpu_memory_utilization": 1.5}}).startswith(
        "inference.gpu_memory_utilization")


def test_trainer_process_and_vllm_server_config(tmp_path):
    from plans import plan_for as plan_launch
    from verifiers_rl.launch import build_processes

    p = plan({**BASE, "inference": {"gpus": 2}, "trainer": {"gpus": 2}}, 4)
    [trainer] = build_processes(p, tmp_path / "rl.toml")
    assert trainer.cmd[1:6] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    assert p.world_size == 2 and trainer.cmd[-4] == "-m"
    # [trainer] processes on the CPU: torchrun with that many; on GPUs it must match trainer.gpus
    cpu2 = plan({**BASE, "trainer": {"processes": 2}}, 0)
    assert cpu2.world_size == 2 and cpu2.launcher[1:6] == trainer.cmd[1:6]
    assert any("training: 2 processes (torchrun)" in line for line in cpu2.lines)
    assert err(plan, {**BASE, "trainer": {"gpus": 2, "processes": 3}}, 4).startswith("trainer.processes: 3 asked")
    assert trainer.cmd[-3:] == ["verifiers_rl.launch", "worker", str(tmp_path / "rl.toml")]
    assert trainer.env["CUDA_VISIBLE_DEVICES"] == "2,3"
    [cpu] = build_processes(plan(BASE, 0), tmp_path / "rl.toml")
    assert cpu.cmd[1:] == ["-m", "verifiers_rl.launch", "worker", str(tmp_path / "rl.toml")]
    assert "CUDA_VISIBLE_DEVICES" not in cpu.env
    # the plan's server settings: its GPUs as device ids (the trainer process sees the others)
    cfg = validate_run_config({**BASE, "inference": {"backend": "vllm", "gpus": 2, "port": 8123,
                                                     "args": {"enforce_eager": True}}, "trainer": {"gpus": 2}})
    sc = plan_launch(cfg, 4, lambda: True, output_dir=tmp_path).server
    # LoRA (the default) on 2 replicas: one API-server process, whose adapter loads reach both (plan/sampling.py)
    assert sc["env"] == {"CUDA_VISIBLE_DEVICES": "0,1"} and sc["args"] == {
        "enforce_eager": True, "data_parallel_size": 2, "api_server_count": 1, "dtype": "bfloat16"}
    assert sc["port"] == 8123 and sc["log_path"] == str(tmp_path / "logs" / "inference.log") and not sc["colocate"]


# --- hosted format ---------------------------------------------------------------------------------------------------

# Every example config of the hosted-training docs, verbatim: OLD_* from the first version, the others from the newer
# "Config Reference - Hosted Training" page.
OLD_BASIC = '''
model = "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT"
max_steps = 100
batch_size = 8
rollouts_per_example = 2

[sampling]
max_tokens = 128
temperature = 0.8

[[env]]
id = "your-username/your-env"
name = "my-training-run"
'''
OLD_ENV_ARGS = '''
model = "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT"
max_steps = 200
batch_size = 16
rollouts_per_example = 4

[sampling]
max_tokens = 256
temperature = 0.9

[[env]]
id = "your-username/your-env"
name = "custom-args-run"
args = { dataset_split = "train", system_prompt = "You are a helpful assistant." }
'''
OLD_EVAL = '''
model = "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT"
max_steps = 500
batch_size = 8
rollouts_per_example = 2

[sampling]
max_tokens = 128
temperature = 0.8

[[env]]
id = "your-username/your-env"
name = "training-with-eval"

[eval]
interval = 50  # Run eval every 50 steps

[[eval.env]]
id = "your-username/your-env"
num_examples = 10
rollouts_per_example = 2
'''
OLD_WANDB = '''
model = "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT"
max_steps = 100
batch_size = 8
rollouts_per_example = 2

[sampling]
max_tokens = 128
temperature = 0.8

[[env]]
id = "your-username/your-env"
name = "wandb-run"

[wandb]
project = "my-rl-project"
entity = "my-team"
name = "experiment-1"
'''
BASIC = '''
model = "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT"
max_steps = 100
batch_size = 128
rollouts_per_example = 8

[sampling]
max_tokens = 2048

[[env]]
id = "your-username/your-env"
'''
ENV_ARGS = '''
model = "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT"
max_steps = 200
batch_size = 512
rollouts_per_example = 16
env_file = ["secrets.env", "api-keys.env"]  # Loaded relative to config file

[sampling]
max_tokens = 256
temperature = 1.0

[[env]]
id = "your-username/your-env"
name = "custom-args-run"
args = { dataset_split = "train", system_prompt = "You are a helpful assistant.", api_key_var = "CUSTOM_API_KEY"}
'''
MULTI_ENV = '''
model = "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT"
max_steps = 100
batch_size = 128
rollouts_per_example = 8

[sampling]
max_tokens = 2048

[[env]]
id = "primeintellect/alphabet-sort"

[[env]]
id = "primeintellect/reverse-text"
'''
EVAL = '''
model = "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT"
max_steps = 500
batch_size = 8
rollouts_per_example = 2

[sampling]
max_tokens = 128
temperature = 0.8

[[env]]
id = "your-username/your-env"

[eval]
interval = 100
num_examples = -1          # default for all eval environments (-1 = all)
rollouts_per_example = 1   # default for all eval environments
eval_base_model = true     # also evaluate the base model

[[eval.env]]
id = "your-username/eval-env"
args = { split = "test" }
num_examples = 30          # environment-specific override
rollouts_per_example = 4   # environment-specific override
'''
VAL = '''
model = "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT"
max_steps = 500
batch_size = 128
rollouts_per_example = 8

[sampling]
max_tokens = 2048

[[env]]
id = "your-username/your-env"

[val]
num_examples = 64
rollouts_per_example = 1
interval = 5  # Run validation every 5 steps
'''
BUFFER = '''
model = "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT"
max_steps = 500
batch_size = 128
rollouts_per_example = 8

[sampling]
max_tokens = 2048

[[env]]
id = "your-username/your-env"

[buffer]
online_difficulty_filtering = true
easy_threshold = 0.8
hard_threshold = 0.2
easy_fraction = 0.0
hard_fraction = 0.0
env_ratios = [0.5, 0.5]  # For multi-env training
skip_verification = false
seed = 42
'''
WANDB = '''
model = "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT"
max_steps = 100
batch_size = 8
rollouts_per_example = 2

[sampling]
max_tokens = 128
temperature = 0.8

[[env]]
id = "your-username/your-env"

[wandb]
project = "my-rl-project"
entity = "my-team"
name = "experiment-1"
'''
ENV_FILES = '''
model = "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT"
max_steps = 100
batch_size = 128
rollouts_per_example = 8

env_file = ["secrets.env", "api-keys.env"]  # Loaded relative to config file

[sampling]
max_tokens = 2048

[[env]]
id = "your-username/your-env"
'''
FULL = '''
name = "my-training-run"
model = "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT"
max_steps = 500
batch_size = 128
rollouts_per_example = 8

# Advanced training options
trajectory_strategy = "interleaved"  # or "branching"
learning_rate = 1e-6
lora_alpha = 16
oversampling_factor = 2.0
max_async_level = 4

env_file = ["secrets.env"]

[sampling]
max_tokens = 2048
temperature = 0.7

[[env]]
id = "your-username/env-1"
args = { split = "train", max_examples = 1000 }

[[env]]
id = "your-username/env-2"

[wandb]
project = "my-project"
entity = "my-team"
name = "my-run-name"

[eval]
interval = 100
num_examples = -1
rollouts_per_example = 1
eval_base_model = true

[[eval.env]]
id = "your-username/eval-env"
args = { split = "test" }
num_examples = 30
rollouts_per_example = 4

[val]
num_examples = 64
rollouts_per_example = 1
interval = 5

[buffer]
online_difficulty_filtering = true
easy_threshold = 0.8
hard_threshold = 0.2
easy_fraction = 0.0
hard_fraction = 0.0
'''

M = "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT"


def shape(max_steps, bs, rpe, mbs, max_tokens=None, temperature=1.0, **extra):
    args = {"max_steps": max_steps, "batch_size": bs, "rollouts_per_example": rpe, "micro_batch_size": mbs,
            "temperature": temperature, **extra}
    if max_tokens is not None:
        args.update(max_tokens=max_tokens, max_seq_len=512 + max_tokens, max_prompt_len=512)
    return args


HOSTED_EXPECTED = {
    "old-basic": (OLD_BASIC, {"model": M,
                              "env": {"id": "your-username/your-env", "args": {}, "name": "my-training-run"},
                              "trainer": {"args": shape(100, 8, 2, 8, 128, 0.8)}}),
    "old-env-args": (OLD_ENV_ARGS, {"model": M, "env": {
        "id": "your-username/your-env", "name": "custom-args-run",
        "args": {"dataset_split": "train", "system_prompt": "You are a helpful assistant."}},
        "trainer": {"args": shape(200, 16, 4, 8, 256, 0.9)}}),
    "old-eval": (OLD_EVAL, {"model": M,
                            "env": {"id": "your-username/your-env", "args": {}, "name": "training-with-eval"},
                            "trainer": {"args": shape(500, 8, 2, 8, 128, 0.8)},
                            "eval": {"interval": 50, "num_examples": -1, "rollouts_per_example": 1, "before": False,
                                     "after": False, "env": [{"id": "your-username/your-env", "args": {},
                                                              "num_examples": 10, "rollouts_per_example": 2}]}}),
    "old-wandb": (OLD_WANDB, {"model": M, "env": {"id": "your-username/your-env", "args": {}, "name": "wandb-run"},
                              "trainer": {"args": shape(100, 8, 2, 8, 128, 0.8, wandb={
                                  "project": "my-rl-project", "entity": "my-team", "name": "experiment-1"})}}),
    "basic": (BASIC, {"model": M, "env": {"id": "your-username/your-env", "args": {}},
                      "trainer": {"args": shape(100, 128, 8, 8, 2048)}}),
    "env-args": (ENV_ARGS, {"model": M, "env_file": ["<dir>/secrets.env", "<dir>/api-keys.env"],
                            "env": {"id": "your-username/your-env", "name": "custom-args-run", "args": {
                                "dataset_split": "train", "system_prompt": "You are a helpful assistant.",
                                "api_key_var": "CUSTOM_API_KEY"}},
                            "trainer": {"args": shape(200, 512, 16, 8, 256)}}),
    "eval": (EVAL, {"model": M, "env": {"id": "your-username/your-env", "args": {}},
                    "trainer": {"args": shape(500, 8, 2, 8, 128, 0.8)},
                    "eval": {"interval": 100, "num_examples": -1, "rollouts_per_example": 1, "before": True,
                             "after": False, "env": [{"id": "your-username/eval-env", "args": {"split": "test"},
                                                      "num_examples": 30, "rollouts_per_example": 4}]}}),
    "val": (VAL, {"model": M, "env": {"id": "your-username/your-env", "args": {}},
                  "trainer": {"args": shape(500, 128, 8, 8, 2048, eval_steps=5, eval_num_examples=64,
                                            eval_rollouts_per_example=1)}}),
    "wandb": (WANDB, {"model": M, "env": {"id": "your-username/your-env", "args": {}},
                      "trainer": {"args": shape(100, 8, 2, 8, 128, 0.8, wandb={
                          "project": "my-rl-project", "entity": "my-team", "name": "experiment-1"})}}),
    "env-files": (ENV_FILES, {"model": M, "env_file": ["<dir>/secrets.env", "<dir>/api-keys.env"],
                              "env": {"id": "your-username/your-env", "args": {}},
                              "trainer": {"args": shape(100, 128, 8, 8, 2048)}}),
}
HOSTED_EXPECTED["multi-env"] = (MULTI_ENV, {
    "model": M, "env": [{"id": "primeintellect/alphabet-sort", "args": {}},
                        {"id": "primeintellect/reverse-text", "args": {}}],
    "trainer": {"args": shape(100, 128, 8, 8, 2048)}})
# verifiers' own configs/rl/qwen.toml and gpt-oss.toml (retired format): the chat template's switches in [sampling]
for _name, _key, _value in (("thinking-off", "enable_thinking", "false"), ("effort", "reasoning_effort", '"low"')):
    HOSTED_EXPECTED[_name] = (f'model = "{M}"\nmax_steps = 100\nbatch_size = 128\nrollouts_per_example = 8\n'
                              f'[sampling]\nmax_tokens = 1024\n{_key} = {_value}\n'
                              '[[env]]\nid = "primeintellect/reverse-text"\n', {
        "model": M, "env": {"id": "primeintellect/reverse-text", "args": {}},
        "trainer": {"args": shape(100, 128, 8, 8, 1024, chat_template_kwargs={
            _key: False if _value == "false" else "low"})}})
HOSTED_ERRORS = {
    # the doc's [buffer] example gives two ratios for its single env
    "buffer": (BUFFER, "buffer.env_ratios: [0.5, 0.5] for 1 [[env]]: give one positive ratio per [[env]]"),
}


def load_hosted(tmp_path: Path, text: str) -> dict:
    (tmp_path / "secrets.env").write_text("WANDB_API_KEY=s3cr3t-wandb-value\n")
    (tmp_path / "api-keys.env").write_text('CUSTOM_API_KEY="s3cr3t-custom-value"\n')
    path = write(tmp_path, "hosted.toml", text)
    return parse_args(["@", str(path)])[1]


@pytest.mark.parametrize("name", sorted(HOSTED_EXPECTED))
def test_hosted_examples_translate(name, tmp_path):
    text, expected = HOSTED_EXPECTED[name]
    raw = load_hosted(tmp_path, text)
    assert config_format(raw) == "prime-rl"
    native, origin = hosted.translate(raw)
    if "env_file" in expected:
        expected = {**expected, "env_file": [p.replace("<dir>", str(tmp_path.resolve())) for p in expected["env_file"]]}
    assert native == expected
    assert origin["trainer.args.temperature"] == "sampling.temperature"
    # ... and it is a valid run (env ids aside: the docs' ids are placeholders)
    run = resolve_run(raw, {"output_dir": str(tmp_path / "out")}, check_environments=False)
    assert run.hosted and run.args.max_steps == expected["trainer"]["args"]["max_steps"]


@pytest.mark.parametrize("name", sorted(HOSTED_ERRORS))
def test_hosted_examples_the_local_trainer_cannot_honor_yet(name, tmp_path):
    text, expected = HOSTED_ERRORS[name]
    raw = load_hosted(tmp_path, text)
    assert err(resolve_run, raw, {}).startswith(expected)


def test_hosted_env_ratios_become_env_ratios(tmp_path):
    text = MULTI_ENV + "\n[buffer]\nenv_ratios = [3.0, 1.0]\n"
    native, _ = hosted.translate(load_hosted(tmp_path, text))
    assert [e["ratio"] for e in native["env"]] == [3.0, 1.0]


def test_hosted_full_example_translates_with_both_envs(tmp_path):
    native, _ = hosted.translate(load_hosted(tmp_path, FULL))
    assert native["env"] == [{"id": "your-username/env-1", "args": {"split": "train", "max_examples": 1000}},
                             {"id": "your-username/env-2", "args": {}}]
    run = resolve_run(load_hosted(tmp_path, FULL), {"output_dir": str(tmp_path / "out")}, check_environments=False)
    assert run.args.online_difficulty_filtering and run.args.eval_steps == 5


def test_hosted_full_example_with_one_env_translates_every_field(tmp_path):
    text = FULL.replace('[[env]]\nid = "your-username/env-2"\n', "")
    native, _ = hosted.translate(load_hosted(tmp_path, text))
    args = native["trainer"]["args"]
    assert args == {**shape(500, 128, 8, 8, 2048, 0.7), "run_name": "my-training-run", "learning_rate": 1e-6,
                    "lora_alpha": 16, "oversampling_factor": 2.0, "max_async_level": 4, "eval_steps": 5,
                    "eval_num_examples": 64, "eval_rollouts_per_example": 1, "online_difficulty_filtering": True,
                    "easy_threshold": 0.8, "hard_threshold": 0.2, "easy_fraction": 0.0, "hard_fraction": 0.0,
                    "wandb": {"project": "my-project", "entity": "my-team", "name": "my-run-name"}}
    assert native["env"] == {"id": "your-username/env-1", "args": {"split": "train", "max_examples": 1000}}
    assert native["eval"]["before"] is True and native["eval"]["env"][0]["num_examples"] == 30
    assert native["env_file"] == [str((tmp_path / "secrets.env").resolve())]


def test_hosted_buffer_example_without_env_ratios_maps_to_trainer_args(tmp_path):
    text = BUFFER.replace("env_ratios = [0.5, 0.5]  # For multi-env training\n", "")
    native, _ = hosted.translate(load_hosted(tmp_path, text))
    args = native["trainer"]["args"]
    assert (args["online_difficulty_filtering"], args["easy_threshold"], args["hard_threshold"], args["seed"]) == (
        True, 0.8, 0.2, 42)


@pytest.mark.parametrize("override, expected", [
    (["--sampling.temperature", "-1"], "sampling.temperature: temperature=-1.0 must be >= 0"),
    (["--sampling.max-tokenz", "5"], "sampling.max_tokenz: unknown key (did you mean sampling.max_tokens?)"),
    (["--sampling.max-tokens", '"x"'], "sampling.max_tokens: expected int or \"None\", got 'x'"),
    (["--batch-size", "100"], "batch_size: batch_size=100 must be a multiple of rollouts_per_example=8"),
    (["--trajectory-strategy", "branching"], "trajectory_strategy: 'branching' is not supported yet"),
    (["--buffer.skip-verification"], "buffer.skip_verification: true is not supported yet"),
    (["--max-step", "5"], "max_step: unknown key (did you mean max_steps?)"),
    (["--trainer.args.max-steps", "5"], "max_steps: a hosted-format key in a vf-rl config (it has [trainer])"),
    (["--env.0.id", "nope"], "env.0.id: environment 'nope' not found"),
    (["--env.0.args", '{"num_eval_exmples": 3}'], "env.0.args.num_eval_exmples: unknown argument"),
])
def test_hosted_errors_name_the_hosted_key(override, expected, tmp_path):
    path = write(tmp_path, "h.toml", BASIC.replace("your-username/your-env", "primeintellect/reverse-text"))
    _, raw, opts = parse_args(["@", str(path), *override])
    assert err(resolve_run, raw, opts).startswith(expected)


def test_hosted_dry_run_keeps_secrets_out(tmp_path, capsys):
    text = FULL.replace('[[env]]\nid = "your-username/env-2"\n', "").replace("your-username/env-1", "reverse-text") \
        .replace("your-username/eval-env", "reverse-text").replace('{ split = "train", max_examples = 1000 }', "{}") \
        .replace('{ split = "test" }', "{}")
    load_hosted(tmp_path, text)
    out = tmp_path / "out"
    assert rl_cli.main(["@", str(tmp_path / "hosted.toml"), "--dry-run", "--output-dir", str(out)]) == 0
    assert "hosted format, translated" in capsys.readouterr().out
    written = (out / "configs" / "rl.toml").read_text()
    assert "s3cr3t" not in written and str((tmp_path / "secrets.env").resolve()) in written
    resolved = tomllib.loads(written)
    assert resolved["trainer"]["args"]["eval_steps"] == 5 and resolved["eval"]["interval"] == 100
    # the translated config runs back through vf-rl as a vf-rl config
    assert rl_cli.main(["@", str(out / "configs" / "rl.toml"), "--dry-run", "--output-dir", str(tmp_path / "o2")]) == 0
    assert not any("s3cr3t" in p.read_text() for p in tmp_path.rglob("*.toml"))


def test_a_dry_run_into_an_earlier_runs_dir_keeps_that_runs_record(tmp_path, capsys):
    """configs/rl.toml records what a run ran; a dry run pointed at its dir (finished, or running) writes beside it."""
    out = tmp_path / "run"
    (out / "configs").mkdir(parents=True)
    (out / "configs" / "rl.toml").write_text("# what the earlier run ran\n")
    (out / "metrics.jsonl").write_text('{"step": 1}\n')
    config = REPO / "configs" / "vf-rl" / "quickstart.toml"
    assert rl_cli.main(["@", str(config), "--dry-run", "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert (out / "configs" / "rl.toml").read_text() == "# what the earlier run ran\n"
    beside = out / "configs" / "rl.dry-run.toml"
    assert f"resolved config written to {beside}" in printed and "an earlier run (metrics.jsonl)" in printed
    assert tomllib.loads(beside.read_text())["trainer"]["args"]["output_dir"] == str(out)
    fresh = tmp_path / "fresh"  # a dir with no run in it: rl.toml, as before
    assert rl_cli.main(["@", str(config), "--dry-run", "--output-dir", str(fresh)]) == 0
    assert (fresh / "configs" / "rl.toml").exists() and not (fresh / "configs" / "rl.dry-run.toml").exists()


# --- --dry-run of every shipped config and its round trip ------------------------------------------------------------


def _without_output_dir(d: dict) -> dict:
    import copy

    d = copy.deepcopy(d)
    d["trainer"]["args"].pop("output_dir")
    return d


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_dry_run_every_config_and_round_trip(path, tmp_path, capsys):
    first = tmp_path / "first"
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # a shipped config uses no deprecated spelling
        assert rl_cli.main(["@", str(path), "--dry-run", "--output-dir", str(first)]) == 0
    written = first / "configs" / "rl.toml"
    out, err = capsys.readouterr()
    assert out.strip().splitlines()[0] == f"resolved config written to {written}"
    assert "deprecated" not in err, err
    resolved = tomllib.loads(written.read_text())
    args = resolved["trainer"]["args"]
    # every RLConfig field is there, resolved
    from verifiers_rl.config.schema import rl_field_info

    info = rl_field_info()
    from verifiers_rl.config.resolution import RENAMED

    deprecated = {old.rsplit(".", 1)[1] for old in RENAMED}  # unset: not written
    missing = [n for n in info.own if n not in args and n not in ("per_device_train_batch_size", *deprecated)]
    assert missing == []
    # the loss and the estimator are written as built, every key filled in
    assert args["loss"]["type"] and "kl_tau" in args["loss"] or args["loss"]["type"] != "default"
    assert args["advantage"]["type"]
    assert args["output_dir"] == str(first) and args["run_name"]
    source = tomllib.loads(path.read_text())
    for k, v in source.get("trainer", {}).get("args", {}).items():
        if k in ("loss", "advantage"):  # the table as given, within the table as built
            assert v.items() <= args[k].items(), k
        elif k != "output_dir":
            assert args[k] == v, k
    # round trip: the resolved file is accepted back and resolves to the same thing
    second = tmp_path / "second"
    assert rl_cli.main(["@", str(written), "--dry-run", "--output-dir", str(second)]) == 0
    again = tomllib.loads((second / "configs" / "rl.toml").read_text())
    assert _without_output_dir(again) == _without_output_dir(resolved)
    # and runs where its source runs: it asks for the GPUs its source asks for, and no others
    from verifiers_rl.config.loading import none_strings
    from verifiers_rl.plan.launch import gpus_asked

    asked = [gpus_asked(validate_run_config(none_strings(c))) for c in (resolved, source)]
    assert asked[0] == asked[1], asked


def test_dry_run_writes_to_default_output_dir(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    cfg = write(tmp_path, "c.toml", 'model = "m"\n[env]\nid = "reverse-text"\n[trainer.args]\nrun_name = "abc"\n')
    assert rl_cli.main(["@", str(cfg), "--dry-run"]) == 0
    assert (tmp_path / "outputs" / "abc" / "configs" / "rl.toml").exists()


# --- init and vf-setup -----------------------------------------------------------------------------------------------


def test_init_template_is_a_valid_config(tmp_path, capsys):
    assert rl_cli.main(["init", "-"]) == 0
    assert capsys.readouterr().out == rl_cli.TEMPLATE
    path = tmp_path / "rl.toml"
    assert rl_cli.main(["init", str(path)]) == 0
    with pytest.raises(SystemExit):
        rl_cli.main(["init", str(path)])
    assert "exists; pass --force" in capsys.readouterr().err
    assert rl_cli.main(["init", str(path), "--force"]) == 0
    assert rl_cli.main(["@", str(path), "--dry-run", "--output-dir", str(tmp_path / "o")]) == 0


def test_vf_setup_is_idempotent_and_keeps_edits(tmp_path, monkeypatch, capsys):
    from verifiers_rl.cli import setup

    monkeypatch.chdir(tmp_path)
    assert setup.main(["--vf-rl"]) == 0
    names = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert names == sorted(["pyproject.toml", "AGENTS.md", "environments/AGENTS.md", "configs/endpoints.py",
                            *[f"configs/vf-rl/{p.name}" for p in CONFIGS]])
    for p in CONFIGS:
        assert (tmp_path / "configs" / "vf-rl" / p.name).read_text() == p.read_text()
    assert 'dependencies = ["verifiers-rl"]' in (tmp_path / "pyproject.toml").read_text()
    report = dict(setup.setup_workspace(tmp_path, vf_rl=True))
    assert set(report.values()) == {"kept (exists)", "up to date"}
    (tmp_path / "AGENTS.md").write_text("mine\n")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'mine'\n")
    assert dict(setup.setup_workspace(tmp_path, vf_rl=True))["AGENTS.md"].startswith("kept (differs")
    assert (tmp_path / "AGENTS.md").read_text() == "mine\n"
    assert dict(setup.setup_workspace(tmp_path, vf_rl=True, force=True))["AGENTS.md"] == "overwritten"
    assert (tmp_path / "AGENTS.md").read_text() != "mine\n"
    assert (tmp_path / "pyproject.toml").read_text() == "[project]\nname = 'mine'\n"  # never overwritten
    base = tmp_path / "base"
    base.mkdir()
    assert "configs/vf-rl/quickstart.toml" not in dict(setup.setup_workspace(base))
    # the endpoints file is loadable by vf-eval
    from verifiers_rl.inference.clients import load_endpoints

    assert "local-vllm" in load_endpoints(tmp_path / "configs" / "endpoints.py")


def test_docs_generator_covers_every_key():
    from verifiers_rl.config.docs import configuration_md, hosted_md
    from verifiers_rl.config.schema import rl_field_info

    doc = configuration_md()
    for name in rl_field_info().names:
        assert f"| `{name}` |" in doc
    for key in ("inference.urls", "eval.env.N.num_examples", "warmup.completion_format", "tiny_model.layers"):
        assert f"| `{key}` |" in doc
    # every registered loss and estimator, with each key of its config (the one spelling: the table's)
    from verifiers_rl.trainer.advantage_types import ADVANTAGES
    from verifiers_rl.trainer.losses import LOSSES
    from verifiers_rl.trainer.typed_table import get_advantage, get_loss

    for section, names, spec_of in (("loss", LOSSES, get_loss), ("advantage", ADVANTAGES, get_advantage)):
        for name in names:
            keys = [f.name for f in dataclasses.fields(spec_of(name).config)]
            rows = [line for line in doc.splitlines() if line.startswith(f"| `{name}`") and f"`{section}." in line
                    or line.startswith(f"| `{name}`") and "| none |" in line]
            assert rows, (section, name)
            assert {k for k in keys if k != "beta" or spec_of(name).mode == "rl"} <= {
                line.split("`")[3].split(".", 1)[1] for line in rows if f"`{section}." in line}, (section, name)
    hdoc = hosted_md()
    for h, *_ in hosted.MAPPING:
        assert f"| `{h}` |" in hdoc
    assert re.search(r"max_seq_len = 512 \+ sampling.max_tokens", hdoc)


def test_committed_docs_are_current():
    """docs/configuration.md and docs/hosted.md are generated from the schemas; regenerate after a change with
    `python -m verifiers_rl.config.docs > docs/configuration.md` (and `... docs hosted > docs/hosted.md`)."""
    from pathlib import Path

    from verifiers_rl.config.docs import configuration_md, hosted_md

    docs = Path(__file__).resolve().parents[1] / "docs"
    assert (docs / "configuration.md").read_text().strip() == configuration_md().strip()
    assert (docs / "hosted.md").read_text().strip() == hosted_md().strip()


def test_launch_files_keep_secrets_out(tmp_path, monkeypatch):
    """prepare_launch writes configs/rl.toml, configs/plan.json, configs/launch.json and run.json: env_file values
    go to the environment of the processes only."""
    import os

    from verifiers_rl.launch import build_processes, prepare_launch
    from verifiers_rl.runs import read_run

    monkeypatch.setattr(os, "environ", dict(os.environ))
    text = ENV_FILES.replace("your-username/your-env", "reverse-text")
    raw = load_hosted(tmp_path, text)
    run = resolve_run(raw, {"output_dir": str(tmp_path / "out"), "config_files": [tmp_path / "hosted.toml"]})
    p = plan(BASE, 0)
    config_path = prepare_launch(run, p, {"argv": ["@", "hosted.toml"]}, detached=False)
    assert os.environ["WANDB_API_KEY"] == "s3cr3t-wandb-value" and os.environ["CUSTOM_API_KEY"] == "s3cr3t-custom-value"
    written = [f for f in (tmp_path / "out").rglob("*") if f.is_file()]
    assert {f.name for f in written} == {"rl.toml", "plan.json", "launch.json", "run.json"}
    assert not any("s3cr3t" in f.read_text() for f in written)
    rec = read_run(tmp_path / "out")
    assert rec["status"] == "starting" and rec["hosted_format"] and rec["plan"]["inference"]["backend"] == "local"
    assert tomllib.loads(config_path.read_text())["env_file"] == [str((tmp_path / "secrets.env").resolve()),
                                                                   str((tmp_path / "api-keys.env").resolve())]
    assert build_processes(p, config_path)[0].cmd[-1] == str(config_path)


def test_plan_follows_trainer_args_when_inference_is_auto():
    p = plan({**BASE, "trainer": {"args": {"vllm_server_urls": ["http://h:9/v1"]}}}, 0)
    assert p.backend == "vllm" and p.urls == ["http://h:9/v1"] and not p.start_server
    p = plan({**BASE, "trainer": {"args": {"inference_backend": "vllm"}}}, 0)
    assert p.backend == "vllm" and p.start_server
