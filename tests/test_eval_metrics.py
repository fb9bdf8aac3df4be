"""Training-time eval scores (avg@k, pass@k), perf/mfu, val/ apart from eval/, per-rank log files and environment
output in logs/env.log."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from math import comb
from pathlib import Path

import pytest
import torch

from verifiers_rl.trainer.eval_metrics import eval_scores, pass_threshold
from verifiers_rl.trainer.mfu import device_peak_flops, flops_per_token_terms, mfu_percent, peak_flops, step_flops

REPO = Path(__file__).resolve().parents[1]


def _states(rewards_by_example: list[list[float]]) -> list[dict]:
    return [{"example_id": i, "reward": r} for i, rs in enumerate(rewards_by_example) for r in rs]


# --- avg@k / pass@k ---------------------------------------------------------------------------------------------------
def test_avg_and_pass_at_k_on_hand_made_rewards():
    # example 0: 1 of 4 passes, example 1: 2 of 4, example 2: none (0.4 is under the 0.5 threshold)
    states = _states([[1.0, 0.0, 0.0, 0.0], [0.0, 0.5, 1.0, 0.0], [0.4, 0.4, 0.0, 0.0]])
    s = eval_scores(states, 4)
    assert s["avg@4"] == pytest.approx((1.0 + 1.5 + 0.8) / 12)
    assert set(s) == {"avg@4", "pass@1", "pass@2", "pass@4"}
    assert s["pass@1"] == pytest.approx((1 / 4 + 2 / 4 + 0) / 3)
    # pass@2 of one example = 1 - C(n-c, 2) / C(n, 2)
    assert s["pass@2"] == pytest.approx(((1 - comb(3, 2) / comb(4, 2)) + (1 - comb(2, 2) / comb(4, 2)) + 0) / 3)
    assert s["pass@4"] == pytest.approx(2 / 3)  # two of three examples have a passing rollout
    strict = eval_scores(states, 4, threshold=0.9)  # 0.5 no longer passes
    assert strict["pass@4"] == pytest.approx(2 / 3) and strict["pass@1"] == pytest.approx((1 / 4 + 1 / 4) / 3)


def test_one_rollout_per_example_and_no_rollouts():
    s = eval_scores(_states([[1.0], [0.2], [0.7], [0.0]]), 1)
    assert s == {"avg@1": pytest.approx(0.475), "pass@1": 0.5}
    assert eval_scores([], 4) == {}
    assert eval_scores(_states([[1.0, 0.0, 1.0]]), 3)["pass@2"] == pytest.approx(1 - 0 / comb(3, 2))


def test_the_pass_threshold_is_the_environments():
    class Env:
        pass_threshold = 0.8

    assert pass_threshold(Env()) == 0.8 and pass_threshold(object()) == 0.5


# --- perf/mfu ---------------------------------------------------------------------------------------------------------
def test_peak_flops_by_device_name():
    assert peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_flops("NVIDIA H100 PCIe") == 756e12 and peak_flops("NVIDIA H100 NVL") == 835e12
    assert peak_flops("NVIDIA H200") == 989e12
    assert peak_flops("NVIDIA A100-SXM4-80GB") == 312e12 and peak_flops("NVIDIA A100 80GB PCIe") == 312e12
    assert peak_flops("NVIDIA L40S") == 362e12 and peak_flops("NVIDIA L40") == 181e12 and peak_flops("NVIDIA L4") == 121e12
    assert peak_flops("NVIDIA GeForce RTX 4090") == 165e12
    for unknown in ("NVIDIA RTX A1000", "NVIDIA A10G", "Tesla T4", "cpu", ""):
        assert peak_flops(unknown) is None, unknown  # never a guessed peak
    assert device_peak_flops(torch.device("cpu")) is None


def _llama(tie: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, tie_word_embeddings=tie)
    return LlamaForCausalLM(cfg)


def test_training_flops_per_token_by_hand():
    # per layer: q 16x16, k and v 16x(2 heads x 4), o 16x16, MLP 3 x 16x24, two norms of 16; final norm 16
    layer = 16 * 16 + 2 * 16 * 8 + 16 * 16 + 3 * 16 * 24 + 2 * 16
    body = 2 * layer + 16
    dense, attention = flops_per_token_terms(_llama(tie=False))
    assert dense == 6 * (body + 32 * 16)  # the LM head counts, the input embedding (a lookup) does not
    assert attention == 12 * 2 * 4 * 4  # 12 L H Q
    assert flops_per_token_terms(_llama(tie=True))[0] == 6 * (body + 32 * 16)  # the shared matrix once
    frozen = _llama(tie=False)
    for name, p in frozen.named_parameters():
        p.requires_grad = name.startswith("lm_head")  # a frozen weight needs no weight gradient: 4 N, not 6 N
    assert flops_per_token_terms(frozen)[0] == 4 * body + 6 * 32 * 16
    assert step_flops(_llama(tie=False), [3, 5]) == dense * 8 + attention * (9 + 25)


def test_mfu_percent_and_perf_metrics_on_a_mocked_gpu(monkeypatch):
    # No GPU here: torch.cuda's device name and memory are mocked; the model and the arithmetic are real.
    assert mfu_percent(989e12, 2.0, 2, 989e12) == pytest.approx(25.0)
    assert mfu_percent(1e12, 1.0, 1, None) is None and mfu_percent(1e12, 0.0, 1, 989e12) is None
    from verifiers_rl.trainer import rollout_metrics

    model = _llama(tie=False)
    states = [{"prompt": [], "completion": [], "reward": 1.0}] * 2
    monkeypatch.setattr(rollout_metrics, "sequence_lengths", lambda s: [10, 30])
    cpu = rollout_metrics.perf_metrics(states, 2.0, 1, torch.device("cpu"), model=model)
    assert "perf/mfu" not in cpu and cpu["perf/throughput"] == 20.0
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 3 * 2**30)
    gpu = rollout_metrics.perf_metrics(states, 2.0, 2, torch.device("cuda", 0), model=model)
    assert gpu["perf/mfu"] == pytest.approx(100 * step_flops(model, [10, 30]) / 2.0 / 2 / 989e12)
    assert gpu["perf/peak_memory"] == 3.0 and gpu["perf/throughput_per_gpu"] == 10.0
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Some Future GPU")
    assert "perf/mfu" not in rollout_metrics.perf_metrics(states, 2.0, 1, torch.device("cuda", 0), model=model)


# --- val/ apart from eval/, from a real short run ---------------------------------------------------------------------
def test_validation_logs_val_keys_and_the_eval_section_eval_keys(tiny_model_dir, tmp_path):
    import verifiers_rl as vf
    from verifiers_rl.launching.pipeline import _periodic_eval_callback

    from test_trainer import ENV_ID, make_config, make_env, read_metrics

    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(),
                           make_config(tmp_path, max_steps=2, eval_steps=2, eval_num_examples=2,
                                       eval_rollouts_per_example=2))
    # [eval] interval = 1 with one [[eval.env]] named "held" (what vf-rl's pipeline adds)
    trainer.add_callback(_periodic_eval_callback(trainer, [("held", make_env(), 2, 1)], 1, None))
    trainer.train()
    records = read_metrics(tmp_path)
    val = [r for r in records if f"val/{ENV_ID}/reward/mean" in r]
    held = [r for r in records if "eval/held/reward/mean" in r]
    assert [r["step"] for r in val] == [2] and [r["step"] for r in held] == [1, 2]
    assert not any(k.startswith(f"eval/{ENV_ID}/") for r in records for k in r)  # the two cadences stay apart
    v = val[0]
    assert v[f"val/{ENV_ID}/num_rollouts"] == 4 and v[f"val/{ENV_ID}/avg@2"] == pytest.approx(
        v[f"val/{ENV_ID}/reward/mean"])
    assert 0 <= v[f"val/{ENV_ID}/pass@1"] <= v[f"val/{ENV_ID}/pass@2"] <= 1 and "time/val" in v
    assert all("eval/held/avg@1" in r and "eval/held/pass@1" in r and "time/eval" in r for r in held)
    assert not any(k.startswith("val/") for r in held for k in r)


def test_the_eval_sections_max_tokens_is_what_its_rollouts_sample(tiny_model_dir, tmp_path):
    """[eval] max_tokens (prime-rl's orchestrator.eval.sampling.max_completion_tokens): the eval's own reply length,
    not the training one."""
    import verifiers_rl as vf
    from verifiers_rl.config.sections import RunConfig
    from verifiers_rl.evaluation import completion_length
    from verifiers_rl.launching.pipeline import _held_out

    from test_trainer import make_config, make_env

    env = make_env()
    trainer = vf.RLTrainer(str(tiny_model_dir), env, make_config(tmp_path, max_tokens=8, temperature=1.0))
    try:
        cfg = RunConfig.model_validate({"model": str(tiny_model_dir), "env": {"id": "x"},
                                        "eval": {"max_tokens": 2, "num_examples": 4}})
        evals, sampling = _held_out(cfg, trainer, trainer.args, [env], None)
        assert sampling["max_tokens"] == 2 and trainer.args.sampling_args()["max_tokens"] == 8
        states = trainer.eval_states(env, 4, 2, sampling)
        assert len(states) == 8 and max(completion_length(s) for s in states) == 2
    finally:
        trainer.close()


# --- per-rank log files (a real torchrun) -----------------------------------------------------------------------------
RANK_SCRIPT = """
import os, sys
rank = int(os.environ["RANK"])
print(f"stdout of rank {rank}", flush=True)
print(f"stderr of rank {rank}", file=sys.stderr, flush=True)
"""


@pytest.mark.integration  # spawns a process
def test_torchrun_puts_ranks_1_on_in_files_of_their_own(tmp_path):
    from verifiers_rl.launching.planning import rank_log_args, rank_stderr_logs
    from verifiers_rl.plan.launch import torchrun_command

    assert rank_log_args(1, tmp_path) == [] and rank_log_args(3, None) == []
    assert rank_log_args(3, tmp_path)[-2:] == ["--redirects", "1:3,2:3"]
    script = tmp_path / "ranks.py"
    script.write_text(RANK_SCRIPT)
    logs = tmp_path / "logs"
    r = subprocess.run([*torchrun_command(2), *rank_log_args(2, logs), str(script)], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    console = r.stdout + r.stderr
    assert "stdout of rank 0" in r.stdout and "stderr of rank 0" in r.stderr  # rank 0 as before, unprefixed
    assert "[default0]" not in console and "rank 1" not in console
    [rank1] = list((logs / "trainer" / "torchrun").glob("*/attempt_0/1"))
    assert (rank1 / "stdout.log").read_text().strip() == "stdout of rank 1"
    assert (rank1 / "stderr.log").read_text().strip() == "stderr of rank 1"
    assert not list((logs / "trainer" / "torchrun").glob("*/attempt_0/0/*.log"))  # rank 0: console + trainer.log
    assert rank_stderr_logs(logs) == [rank1 / "stderr.log"]


def test_build_processes_adds_the_rank_logs_under_torchrun(tmp_path):
    from verifiers_rl.launching.planning import build_processes
    from verifiers_rl.plan.launch import RunPlan, torchrun_command

    plan = RunPlan([], None)
    plan.world_size, plan.launcher = 2, torchrun_command(2)
    [p] = build_processes(plan, tmp_path / "rl.toml", tmp_path / "logs")
    i = p.cmd.index("--log-dir")
    assert p.cmd[i + 1] == str(tmp_path / "logs" / "trainer" / "torchrun") and p.cmd.index("-m", i) > i
    plan.world_size, plan.launcher = 1, [sys.executable]
    assert "--log-dir" not in build_processes(plan, tmp_path / "rl.toml", tmp_path / "logs")[0].cmd


# --- environment output in logs/env.log -------------------------------------------------------------------------------
ENV_SCRIPT = textwrap.dedent("""
    import asyncio, logging, sys
    sys.path.insert(0, {tests!r})
    import verifiers_rl as vf
    from verifiers_rl.env_output import route_env_output
    from verifiers_rl.envs.rollouts import generate_states
    from scripted_client import ScriptedClient, completion

    def loud_reward(completion, answer, **kw):
        print("reward function says hello")
        print("reward function warns", file=sys.stderr)
        logging.getLogger("verifiers.envs.custom").info("env logger info")
        return 1.0

    env = vf.SingleTurnEnv(dataset=[{{"question": "q", "answer": "a"}}], rubric=vf.Rubric(funcs=[loud_reward]))
    path = route_env_output({logs!r})
    print("trainer line before")
    states = asyncio.run(generate_states(env, env.get_dataset(n=1), ScriptedClient(lambda m, **k: completion("a")),
                                         "scripted", rollouts_per_example=2))
    print("trainer line after", len(states), [s["reward"] for s in states])
""")


@pytest.mark.integration  # spawns a process
def test_environment_output_goes_to_env_log(tmp_path):
    logs = tmp_path / "logs"
    script = tmp_path / "env_script.py"
    script.write_text(ENV_SCRIPT.format(tests=str(REPO / "tests"), logs=str(logs)))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "trainer line before" in r.stdout and "trainer line after 2 [1.0, 1.0]" in r.stdout
    assert "reward function" not in r.stdout + r.stderr and "env logger info" not in r.stdout + r.stderr
    text = (logs / "env.log").read_text()
    assert text.count("reward function says hello") == 2 and text.count("reward function warns") == 2
    assert text.count("env logger info") == 2 and "trainer line" not in text
