"""What a notebook user brings from transformers' Trainer and TRL's GRPOTrainer: `evaluate()`, `on_evaluate`
callbacks, a `peft_config`, an environment id for `env`, unnamed eval environments, and Trainer / TRL arguments
that have no meaning here (one line each, naming what does it)."""

from __future__ import annotations

import pytest
from transformers import TrainerCallback

import verifiers_rl as vf

from test_trainer import make_config, make_env


@pytest.mark.parametrize("key, says", [
    ("train_dataset", "RLTrainer takes an environment (env), or TRL's reward_funcs and train_dataset (reward_weights, "
                      "tools, reward_processing_classes, environment_factory and eval_dataset too) in its place; "
                      "give one or the other"),
    ("eval_dataset", "RLTrainer does not take eval_dataset: eval runs on eval_envs"),
    ("reward_funcs", "RLTrainer takes an environment (env), or TRL's reward_funcs and train_dataset"),
    ("tokenizer", "RLTrainer does not take tokenizer: pass it as processing_class"),
])
def test_a_trainer_argument_with_no_meaning_here_is_one_line(tiny_model_dir, tmp_path, key, says):
    with pytest.raises(TypeError) as err:
        vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path), **{key: [1, 2]})
    assert str(err.value).startswith(says) and "\n" not in str(err.value)


def test_a_peft_config_that_would_be_ignored_or_conflict_is_one_line(tiny_model_dir, tmp_path):
    from peft import LoraConfig

    lora = LoraConfig(r=4, target_modules=["q_proj"], task_type="CAUSAL_LM")
    cases = [(make_config(tmp_path, use_lora=False), lora, ValueError, "peft_config is given but use_lora=False"),
             (make_config(tmp_path, lora_rank=16), lora, ValueError,
              "lora_rank=16 and peft_config both set the adapter"),
             (make_config(tmp_path), {"r": 4}, TypeError, "peft_config must be a peft config such as peft.LoraConfig")]
    for args, peft_config, kind, says in cases:
        with pytest.raises(kind) as err:
            vf.RLTrainer(str(tiny_model_dir), make_env(), args, peft_config=peft_config)
        assert str(err.value).startswith(says), err.value
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path), peft_config=lora)
    assert trainer.model.peft_config["default"].r == 4  # the adapter it was given
    trainer.close()


def test_an_environment_id_is_loaded(tiny_model_dir, tmp_path):
    trainer = vf.RLTrainer(str(tiny_model_dir), "reverse-text", make_config(tmp_path))
    assert trainer.env.env_id == "reverse-text" and len(trainer.env.get_dataset()) > 0
    trainer.close()


@pytest.mark.integration  # trains in-process
def test_unnamed_eval_envs_keep_their_own_series_and_evaluate_reaches_callbacks(tiny_model_dir, tmp_path):
    class Evaluated(TrainerCallback):
        calls: list[dict] = []

        def on_evaluate(self, args, state, control, metrics=None, **kwargs):
            self.calls.append(dict(metrics or {}))

    first, second = make_env(), make_env()
    first.env_id = second.env_id = ""  # built in a notebook without an id
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path, max_steps=1, eval_steps=1),
                           eval_envs=[first, second], callbacks=[Evaluated()])
    assert list(trainer.eval_envs) == ["env_0", "env_1"]
    trainer.train()
    metrics = trainer.evaluate()
    trainer.close()
    assert {"val/env_0/reward/mean", "val/env_1/reward/mean"} <= metrics.keys()
    # the periodic eval at step 1 and evaluate(): transformers' on_evaluate, with the same metrics
    assert len(Evaluated.calls) == 2 and Evaluated.calls[-1] == metrics


@pytest.mark.integration  # trains in-process
def test_training_into_an_earlier_runs_output_dir_says_so(tiny_model_dir, tmp_path, capsys):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')  # what a finished run of this notebook left
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path, max_steps=1))
    trainer.train()
    trainer.close()
    out = " ".join(capsys.readouterr().out.split())
    assert f"warning: output_dir {tmp_path} holds an earlier run (metrics.jsonl): this run appends" in out


def test_full_fine_tuning_of_a_half_precision_model_object_is_said(tiny_model_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    with pytest.warns(UserWarning, match="the model's weights are bfloat16: full fine-tuning updates them"):
        trainer = vf.RLTrainer(model, make_env(), make_config(tmp_path, use_lora=False),
                               processing_class=AutoTokenizer.from_pretrained(tiny_model_dir))
    trainer.close()


@pytest.mark.integration  # trains in-process
def test_data_seed_orders_the_data_as_transformers_data_sampler_seed(tiny_model_dir, tmp_path):
    import json

    def first_step(name: str, **overrides) -> tuple[set[str], int]:
        trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path / name, max_steps=1, **overrides))
        trainer.train()
        trainer.close()
        recorded = json.loads((tmp_path / name / "checkpoint-1" / "rl_state.json").read_text())["seed"]
        return {s["prompt"][-1]["content"] for s in trainer.last_states}, recorded

    plain, plain_seed = first_step("plain", seed=0)
    by_data_seed, data_seed = first_step("data_seed", seed=0, data_seed=5)
    by_seed, _ = first_step("seed", seed=5)
    # data_seed (transformers: the data sampler's seed) picks the data order, as seed alone would; seed stays 0
    assert by_data_seed == by_seed != plain
    assert (plain_seed, data_seed) == (0, 5)


@pytest.mark.integration  # trains in-process
def test_a_peft_model_or_adapter_dir_trains_in_full_without_lora(tiny_model_dir, tmp_path):
    """use_lora=False on a PEFT model (an object, or an adapter directory): the adapter is merged and every weight
    trains, as model_loading says; the merged base had stayed frozen, so the first backward had nothing to train."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from verifiers_rl.trainer.model_loading import peft_wrapping_quietly

    def peft_model():
        base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        with peft_wrapping_quietly():
            return get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))

    peft_model().save_pretrained(tmp_path / "adapter")
    for name, model in (("object", peft_model()), ("dir", str(tmp_path / "adapter"))):
        trainer = vf.RLTrainer(model, make_env(), make_config(tmp_path / name, max_steps=1, use_lora=False))
        assert not hasattr(trainer.model, "peft_config")
        start = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
        assert start and all(p.requires_grad for p in trainer.model.parameters())
        trainer.train()
        trainer.close()
        assert not torch.equal(start["model.embed_tokens.weight"], trainer.model.model.embed_tokens.weight)


def test_a_peft_config_beside_a_peft_model_is_one_line(tiny_model_dir, tmp_path):
    """As TRL: the model's own adapter is the one trained, so a peft_config would be ignored (RLConfig's lora_*
    fields beside an adapter are, by design: tests/test_trainer.py::test_starting_from_adapter_dir_continues_...)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from verifiers_rl.trainer.model_loading import peft_wrapping_quietly

    with peft_wrapping_quietly():
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                               LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    with pytest.raises(ValueError) as err:
        vf.RLTrainer(model, make_env(), make_config(tmp_path),
                     peft_config=LoraConfig(r=4, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    assert str(err.value).startswith("peft_config is given but the model already carries a PEFT adapter"), err.value


@pytest.mark.integration  # trains in-process
def test_rlconfigs_resume_from_checkpoint_resumes_train(tiny_model_dir, tmp_path, capsys):
    """RLConfig(resume_from_checkpoint=True) means what its help and vf-rl say, in a notebook's train() too (it
    started over, with a warning that told the user to set the very field they had set); train()'s own argument,
    when given, still wins."""
    from test_trainer import read_metrics, record_batches

    first = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path, max_steps=2))
    first.train()
    first.close()
    second = vf.RLTrainer(str(tiny_model_dir), make_env(),
                          make_config(tmp_path, max_steps=3, resume_from_checkpoint=True))
    steps = record_batches(second)
    second.train()
    second.close()
    assert steps == [2] and second.state.global_step == 3
    assert [r["step"] for r in read_metrics(tmp_path) if "loss/mean" in r] == [1, 2, 3]
    assert "holds an earlier run" not in capsys.readouterr().out


def test_save_strategy_best_is_one_line(tmp_path):
    """transformers' 'best' saves when its own evaluation finds a new best metric; RLTrainer's eval is its own, so
    'best' saved nothing but the last step (and load_best_model_at_end then loaded nothing), in silence."""
    with pytest.raises(ValueError) as err:
        make_config(tmp_path, save_strategy="best", metric_for_best_model="val/env/reward/mean", eval_steps=1,
                    load_best_model_at_end=True)
    assert str(err.value).startswith("save_strategy='best' saves when transformers' own evaluation"), err.value
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("key, extra", [("load_best_model_at_end", {"metric_for_best_model": "reward"}),
                                        ("metric_for_best_model", {})])
def test_picking_the_best_checkpoint_by_hfs_evaluation_is_one_line(key, extra, tmp_path):
    """load_best_model_at_end (and EarlyStoppingCallback, which needs it) and metric_for_best_model read
    transformers' own evaluation, which RLTrainer's eval is not: before, transformers refused the first in several
    lines about an eval strategy nobody set, and the second did nothing."""
    value = True if key == "load_best_model_at_end" else "reward"
    with pytest.raises(ValueError) as err:
        make_config(tmp_path, save_steps=1, eval_steps=1, **{key: value, **extra})
    assert str(err.value).startswith(f"{key} is not supported yet: transformers picks the best checkpoint"), err.value
    assert "\n" not in str(err.value)


def test_a_tokenizer_without_a_chat_template_is_one_line_before_training(tiny_model_dir, tmp_path):
    """As transformers refuses apply_chat_template at once; before, every rollout errored and training stopped after
    three steps with advice to fix the environment."""
    from transformers import AutoTokenizer

    from verifiers_rl.errors import ConfigError

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    tokenizer.chat_template = None
    with pytest.raises(ConfigError) as err:
        vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path), processing_class=tokenizer)
    assert "tokenizer has no chat template" in str(err.value) and "\n" not in str(err.value)


def test_report_to_wandb_with_its_server_unreachable_is_one_line_before_wandb_init(tiny_model_dir, tmp_path,
                                                                                     monkeypatch):
    """In a notebook: not wandb.init's 100 s of retries and its CommError once the run has started."""
    import socket

    from verifiers_rl.errors import NetworkError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"  # closed once the block ends
    monkeypatch.setenv("WANDB_BASE_URL", url)
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    for name in ("WANDB_PROJECT", "WANDB_ENTITY"):
        monkeypatch.delenv(name, raising=False)  # train() exports the config's W&B table
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path, report_to="wandb"))
    with pytest.raises(NetworkError) as e:
        trainer.train()
    assert str(e.value) == (f"report_to includes 'wandb', but W&B's server {url} cannot be reached (connection "
                            "refused); set WANDB_MODE=offline to log offline (`wandb sync` later), or leave 'wandb' "
                            "out")
    assert trainer.state.global_step == 0 and not (tmp_path / "metrics.jsonl").exists()
    import wandb

    assert wandb.run is None  # never started


def test_push_to_hub_without_the_hub_is_one_line_before_the_model_loads(tiny_model_dir, tmp_path, monkeypatch):
    """transformers' Trainer creates the hub repo in its __init__: a bare httpx ConnectError, or with HF_HUB_OFFLINE
    its own error, after the policy has loaded."""
    import socket

    from verifiers_rl.errors import NetworkError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        hub = f"http://127.0.0.1:{s.getsockname()[1]}"  # closed once the block ends
    monkeypatch.setenv("HF_ENDPOINT", hub)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("VF_HUB_UNREACHABLE", raising=False)
    cfg = make_config(tmp_path, push_to_hub=True, hub_model_id="me/policy")
    with pytest.raises(NetworkError) as e:
        vf.RLTrainer(str(tmp_path / "not-loaded"), make_env(), cfg)  # the check comes first: no model is read
    assert str(e.value) == (f"push_to_hub=True, but the model hub {hub} cannot be reached (connection refused); set "
                            "push_to_hub=False and upload the output dir later (`hf upload`), or train where the hub "
                            "can be reached")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(NetworkError, match=r"^push_to_hub=True, but HF_HUB_OFFLINE=1 is set; set push_to_hub=False"):
        vf.RLTrainer(str(tiny_model_dir), make_env(), cfg)


def test_trls_reward_funcs_and_train_dataset_train_as_grpotrainer_takes_them(tiny_model_dir, tmp_path, capsys):
    """GRPOTrainer(model, reward_funcs=..., args=..., train_dataset=...) as RLTrainer(...): each function is called
    as TRL calls it (prompts, completions, completion_ids and every other column as lists, by keyword); a sync and
    an async one, summed; a None reward counts 0."""
    import asyncio

    from datasets import Dataset

    calls = []

    def length_reward(prompts, completions, completion_ids, solution, trainer_state, **kwargs):
        calls.append((prompts, completions, completion_ids, solution, sorted(kwargs), trainer_state.global_step))
        return [min(len(c[0]["content"]), 10) / 10 for c in completions]

    async def says_solution(completions, solution, **kwargs):
        await asyncio.sleep(0)
        return [None if s == "skip" else float(s in c[0]["content"]) for c, s in zip(completions, solution)]

    words = ["apple", "river", "stone", "cloud", "skip", "tree", "bird", "sand"]
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": f"Say {w}."}], "solution": w, "level": i}
                              for i, w in enumerate(words)])
    args = make_config(tmp_path, max_steps=2)
    trainer = vf.RLTrainer(str(tiny_model_dir), reward_funcs=[length_reward, says_solution], args=args,
                           train_dataset=data)
    trainer.train()
    assert trainer.state.global_step == 2 and len(calls) == 2 * args.batch_size // args.rollouts_per_example
    assert [c[-1] for c in calls] == [0] * (len(calls) // 2) + [1] * (len(calls) // 2)  # the live TrainerState
    for prompts, completions, ids, solution, rest, _ in calls:
        assert len(prompts) == len(completions) == len(ids) == len(solution) == args.rollouts_per_example
        assert {p[0]["content"] for p in prompts} == {f"Say {solution[0]}."}  # a group: one prompt, its columns
        assert all(c[0]["role"] == "assistant" for c in completions) and all(isinstance(t, int) for i in ids for t in i)
        assert rest == ["level", "log_extra", "log_metric"]  # as TRL 1.x passes them
    for state in trainer.last_states:
        # a rollout the tiny model ended at once (an empty-reply error) has no message: TRL's text is then ""
        text, word = (state["completion"] or [{}])[-1].get("content") or "", state["input"]["solution"]
        said = 0.0 if word == "skip" else float(word in text)
        assert state["reward"] == pytest.approx(min(len(text), 10) / 10 + said)
        assert {"length_reward", "says_solution"} <= set(state["metrics"])

    strings = Dataset.from_list([{"prompt": f"Say {w}.", "solution": w} for w in words])  # TRL's standard format
    seen = []
    trainer = vf.RLTrainer(str(tiny_model_dir), reward_funcs=lambda prompts, completions, **kw: seen.extend(prompts)
                           or [float(len(c)) for c in completions], args=make_config(tmp_path / "s", max_steps=1),
                           train_dataset=strings, reward_weights=[0.5])  # GRPOConfig's reward_weights
    assert "note: train_dataset's prompts are strings: each is sent as one user message" in capsys.readouterr().out
    trainer.train()
    assert seen and all(isinstance(p, str) and p.startswith("Say ") for p in seen)  # as the dataset gave them
    assert all(s["prompt"][-1] == {"role": "user", "content": s["input"]["trl_prompt"]} for s in trainer.last_states)
    replies = [(s["completion"] or [{}])[-1].get("content") or "" for s in trainer.last_states]
    assert [s["reward"] for s in trainer.last_states] == [0.5 * len(r) for r in replies]


@pytest.mark.parametrize("kwargs, line", [
    (dict(reward_funcs="some/reward-model"), "reward_funcs: 'some/reward-model' could not be loaded as a reward model "
                                             "("),
    (dict(reward_funcs=[len, 3]), "reward_funcs: 3 is not a function, a reward model or its id"),
    (dict(reward_funcs=[len, len], reward_processing_classes=[None]), "reward_processing_classes: 1 for 2 reward "
                                                                      "functions"),
    (dict(reward_funcs=len, train_dataset=[{"question": "q"}]), "train_dataset needs a 'prompt' column, as TRL's; "
                                                                "it has ['question']"),
    (dict(reward_funcs=[len, len], reward_weights=[1.0]), "reward_weights: 1 weights for 2 reward functions"),
])
def test_what_the_trl_way_in_cannot_take_is_one_line(tiny_model_dir, tmp_path, kwargs, line):
    kwargs = {"train_dataset": [{"prompt": "p"}], **kwargs}
    with pytest.raises(ValueError) as e:
        vf.RLTrainer(str(tiny_model_dir), args=make_config(tmp_path), **kwargs)
    assert str(e.value).startswith(line) and "\n" not in str(e.value)


def test_trls_tools_make_a_tool_environment_and_its_other_arguments_are_one_line(tiny_model_dir, tmp_path):
    from verifiers_rl.envs.tool_env import ToolEnv

    def add(a: int, b: int) -> int:
        """Add two numbers.

        Args:
            a: the first number
            b: the second number
        """
        return a + b

    seen = []
    args = make_config(tmp_path, max_steps=1, max_seq_len=2048, max_prompt_len=2000)  # the tool schema: in the prompt
    trainer = vf.RLTrainer(str(tiny_model_dir), args=args, tools=[add],
                           reward_funcs=lambda completions, **kw: seen.extend(completions)
                           or [len(str(c[-1].get("content"))) / 100 for c in completions],
                           train_dataset=[{"prompt": [{"role": "user", "content": f"{i} + 2?"}]} for i in range(8)])
    assert isinstance(trainer.env, ToolEnv) and [t["name"] for t in trainer.env.tool_defs] == ["add"]
    trainer.train()
    assert seen and all(isinstance(c, list) for c in seen)  # every message after the prompt (none: an empty reply)
    assert any(c and c[0]["role"] == "assistant" for c in seen)
    for key in ("quantization_config", "rollout_func"):
        with pytest.raises(TypeError, match=f"^RLTrainer does not take {key}: "):
            vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path), **{key: object()})


def test_trls_eval_dataset_is_evaluated_with_its_reward_funcs(tiny_model_dir, tmp_path):
    seen = []

    def score(prompts, completions, **kwargs):
        seen.extend(p[-1]["content"] for p in prompts)
        return [len(c[0]["content"]) / 10 for c in completions]

    train = [{"prompt": [{"role": "user", "content": f"train {i}"}]} for i in range(8)]
    held_out = [{"prompt": [{"role": "user", "content": f"held out {i}"}]} for i in range(4)]
    trainer = vf.RLTrainer(str(tiny_model_dir), reward_funcs=score, train_dataset=train, eval_dataset=held_out,
                           args=make_config(tmp_path, max_steps=1, eval_num_examples=4))
    assert list(trainer.eval_envs) == ["eval"]
    seen.clear()
    metrics = trainer.run_eval()
    trainer.close()
    assert sorted(set(seen)) == [f"held out {i}" for i in range(4)] and "val/eval/reward/mean" in metrics
    with pytest.raises(TypeError, match="^RLTrainer does not take eval_dataset: eval runs on eval_envs"):
        vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path), eval_dataset=held_out)


def test_trls_log_metric_and_log_extra_reach_the_steps_metrics_and_sample_tables(tiny_model_dir, tmp_path, capsys):
    """TRL 1.x passes `log_metric(name, value)` and `log_extra(column, values)` to every reward function: a metric
    is the step's `metrics/<name>/mean` (the mean of the step's calls), a column shows in the sample table."""
    logged = []

    def reward(completions, level, log_metric, log_extra, **kwargs):
        lengths = [len(c[0]["content"]) for c in completions]
        log_metric("mean_level", sum(level) / len(level))  # a group shares its prompt's row: one level
        logged.append(level[0])
        log_extra("chars", lengths)
        return [n / 10 for n in lengths]

    data = [{"prompt": [{"role": "user", "content": f"Say {i}."}], "level": float(i)} for i in range(8)]
    trainer = vf.RLTrainer(str(tiny_model_dir), reward_funcs=reward, train_dataset=data,
                           args=make_config(tmp_path, max_steps=1, sample_log_interval=1))
    trainer.train()
    step = [h for h in trainer.state.log_history if "metrics/mean_level/mean" in h]
    assert len(step) == 1 and step[0]["metrics/mean_level/mean"] == pytest.approx(sum(logged) / len(logged))
    assert step[0]["metrics/reward/mean"] == pytest.approx(step[0]["reward/all/mean"])  # the function's own score
    for s in trainer.last_states:
        text = (s["completion"] or [{}])[-1].get("content") or ""
        assert s["logged_columns"] == {"chars": len(text)} and s["metrics"]["mean_level"] == s["input"]["level"]
    assert "chars" in capsys.readouterr().out  # the console's sample table has the column
