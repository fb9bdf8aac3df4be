"""vf-sft's data (sft/data.py, sft/config.py): tools / tool_defs / chat_template_kwargs columns, per-role loss masks,
the prefix check that finds a position-dependent chat template (Qwen3-style thinking) instead of corrupting the
mask, validation and packing in a real vf-sft run of the tiny model."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from transformers import AutoTokenizer

from verifiers_rl.models.tiny import CHAT_TEMPLATE
from verifiers_rl.sft.data import SFTDataError, TemplateMismatchError, tokenize_dataset, tokenize_row, tokenize_samples

_PLAIN_ASSISTANT = "{{- '<|im_start|>assistant\\n' + (message.content or '') }}"
# Qwen3's rule, on the tiny template: an assistant turn before the last user message loses its <think> part.
QWEN3_STYLE = (
    "{%- set ns = namespace(last=-1) %}{%- for m in messages %}{%- if m.role == 'user' %}"
    "{%- set ns.last = loop.index0 %}{%- endif %}{%- endfor %}"
    + CHAT_TEMPLATE.replace(_PLAIN_ASSISTANT, "{%- set c = message.content or '' %}"
                            "{%- if loop.index0 < ns.last and '</think>' in c %}"
                            "{%- set c = c.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
                            "{{- '<|im_start|>assistant\\n' + c }}"))
TWO_TURNS = [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "<think>r1</think>a1"},
             {"role": "user", "content": "q2"}, {"role": "assistant", "content": "<think>r2</think>a2"}]


@pytest.fixture
def tok(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert _PLAIN_ASSISTANT in CHAT_TEMPLATE  # the template QWEN3_STYLE is derived from
    return tokenizer


def _trained(tok, sample) -> str:
    return tok.decode([i for i, m in zip(sample["input_ids"], sample["assistant_masks"]) if m])


def test_a_position_dependent_template_is_split_per_turn_or_refused_never_mismasked(tok):
    tok.chat_template = CHAT_TEMPLATE
    samples, split = tokenize_samples({"messages": TWO_TURNS}, tok, 512)
    assert not split and [_trained(tok, s) for s in samples] == \
        ["<think>r1</think>a1<|im_end|>\n<think>r2</think>a2<|im_end|>\n"]
    tok.chat_template = QWEN3_STYLE
    # the growing-prefix mask alone would be off here: the first turn renders shorter inside the conversation
    whole = tok.apply_chat_template(TWO_TURNS, tokenize=False)
    assert "r1" not in whole and "r2" in whole
    samples, split = tokenize_samples({"messages": TWO_TURNS}, tok, 512)
    assert split and [_trained(tok, s) for s in samples] == ["<think>r1</think>a1<|im_end|>\n",
                                                              "<think>r2</think>a2<|im_end|>\n"]
    assert tok.decode(samples[1]["input_ids"]) == whole  # the last turn's sample is the conversation as rendered
    with pytest.raises(TemplateMismatchError) as e:
        tokenize_row({"messages": TWO_TURNS}, tok, 512)
    msg = str(e.value)
    assert msg.startswith("row: the chat template renders message 1 (assistant) differently once later messages "
                          "follow") and "on_template_mismatch" in msg and "\n" not in msg
    rows = [{"messages": TWO_TURNS[:2]}, {"messages": TWO_TURNS}, {"prompt": TWO_TURNS[:3], "completion": "a2"}]
    samples, n_split = tokenize_dataset(rows, tok, 512)
    assert n_split == 1 and len(samples) == 4  # only the row with two trained turns is split


def test_loss_mask_roles_and_the_prompt_never_trained(tok):
    row = {"messages": [{"role": "system", "content": "S"}, *TWO_TURNS[:3]]}
    assert _trained(tok, tokenize_row(row, tok, 512, loss_roles=("user",))) == \
        "<|im_start|>user\nq1<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n"
    assert _trained(tok, tokenize_row(row, tok, 512, loss_roles=("system", "assistant"))) == \
        "<|im_start|>system\nS<|im_end|>\n<think>r1</think>a1<|im_end|>\n"
    pc = {"prompt": TWO_TURNS[:3], "completion": [{"role": "assistant", "content": "done"}]}
    assert _trained(tok, tokenize_row(pc, tok, 512, loss_roles=("user", "assistant"))) == "done<|im_end|>\n"


def test_tools_and_chat_template_kwargs_columns_reach_the_template(tok):
    tok.chat_template = "{%- if greeting is defined %}{{- greeting }}{%- endif %}" + CHAT_TEMPLATE
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    base = {"prompt": [{"role": "user", "content": "2+2"}], "completion": "4"}
    for extra in ({"tools": tools, "chat_template_kwargs": {"greeting": "HELLO"}},
                  {"tool_defs": json.dumps(tools), "chat_template_kwargs": json.dumps({"greeting": "HELLO"})}):
        out = tokenize_row({**base, **extra}, tok, 512)
        text = tok.decode(out["input_ids"])
        assert text.startswith("HELLO<|im_start|>system\n# Tools") and '"name": "add"' in text
        assert _trained(tok, out) == "4<|im_end|>\n"
    with pytest.raises(SFTDataError) as e:
        tokenize_dataset([base, {**base, "tools": "[not json"}], tok, 512)
    assert str(e.value).startswith("data row 1: column 'tools': not valid JSON")


def test_a_dataset_tokenizes_in_batches_exactly_as_row_by_row(tok, monkeypatch):
    """tokenize_dataset renders and tokenizes the rows' conversations in batches: the same samples as each row on
    its own, for every kind of row (options of its own, a split row, a first message trained, one the template
    cannot render), in far fewer apply_chat_template calls."""
    tok.chat_template = ("{%- if greeting is defined %}{{- greeting }}{%- endif %}{%- if messages[0].role == 'boom' %}"
                         "{{- raise_exception('no boom') }}{%- endif %}" + QWEN3_STYLE)
    rows = [{"prompt": [{"role": "user", "content": f"say {i}"}], "completion": f"{i}" * (i % 5 + 1)}
            for i in range(40)]
    rows += [{"messages": TWO_TURNS}, {"messages": TWO_TURNS[:2]}, {"prompt": "q", "completion": "a",
             "chat_template_kwargs": {"greeting": "HI"}}, {"messages": [{"role": "assistant", "content": "first"}]}]
    alone = [tokenize_samples(r, tok, 512, where=f"data row {k}") for k, r in enumerate(rows)]
    calls = []
    real = type(tok).apply_chat_template
    monkeypatch.setattr(type(tok), "apply_chat_template",
                        lambda self, *a, **kw: calls.append(1) or real(self, *a, **kw))
    samples, n_split = tokenize_dataset(rows, tok, 512)
    assert samples == [s for out, _ in alone for s in out] and n_split == sum(split for _, split in alone) == 1
    assert len(calls) < 15 < len(rows)  # two batches, then the split row and the row with options of their own
    assert tokenize_dataset(rows, tok, 8)[0] == [s for r in rows for s in tokenize_samples(r, tok, 8)[0]]
    boom = {"messages": [{"role": "boom", "content": "x"}, *TWO_TURNS[1:2]]}
    with pytest.raises(Exception) as alone_error:
        tokenize_samples(boom, tok, 512)
    with pytest.raises(Exception) as e:  # a batch the template refuses: each of its rows alone, as before
        tokenize_dataset([*rows[:3], boom], tok, 512)
    assert type(e.value) is SFTDataError and str(e.value) == f"data row 3: {alone_error.value}"
    assert "no boom" in str(e.value)


BAD_ROWS = [  # (row, the start of its line): what TRL fails on with a traceback, or drops without a word
    ({"messages": [{"role": "user", "content": 3}, TWO_TURNS[1]]},
     "data row 1: the model's chat template cannot render it (TypeError: can only concatenate str"),
    ({"messages": [{"role": "boom", "content": "x"}, TWO_TURNS[1]]},
     "data row 1: the model's chat template cannot render it (TemplateError: roles must alternate)"),
    ({"prompt": None, "completion": "a"},
     "data row 1: column 'prompt': expected a string or a list of {\"role\", \"content\"} messages, got NoneType"),
    ({"messages": {"role": "user", "content": "q"}}, "data row 1: column 'messages': expected a string or a list"),
    ({"messages": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]},
     "data row 1: column 'messages': message 0 has no 'role' (its keys: from, value)"),
    ({"messages": [{"role": "human", "content": "q"}, {"role": "gpt", "content": "a"}]},
     "data row 1: no message carries loss: the roles are human, gpt, and the loss is on assistant messages"),
    ({"prompt": "q", "completion": [{"role": "user", "content": "a"}]},
     "data row 1: no message carries loss: the roles after the prompt are user"),
]


@pytest.mark.parametrize("row,start", BAD_ROWS)
def test_a_bad_row_is_one_line_naming_it(tok, row, start):
    tok.chat_template = ("{%- for m in messages %}{%- if m.role == 'boom' %}{{- raise_exception('roles must\n"
                         "alternate') }}{%- endif %}{%- endfor %}" + CHAT_TEMPLATE)
    with pytest.raises(SFTDataError) as e:
        tokenize_dataset([{"messages": TWO_TURNS}, row], tok, 512)
    assert str(e.value).startswith(start) and "\n" not in str(e.value), str(e.value)


@pytest.mark.integration  # trains in-process (~6 s)
def test_rows_cut_by_max_length_before_their_loss_are_left_out_and_said(tiny_model_dir, tmp_path):
    """A real SFT step (TRL's SFTTrainer, the tiny model): a row whose prompt fills max_length trains nothing; it is
    left out with a line (packed too), and a dataset of only such rows is one line, not TRL's empty sampler."""
    from rich.console import Console

    from verifiers_rl.sft.trainer import SFTSettings, run_sft

    short = [{"prompt": f"say {w}", "completion": w} for w in ("apple", "river", "stone", "cloud")]
    long = [{"prompt": "word " * 80, "completion": "x"}] * 2
    settings = SFTSettings(output_dir=str(tmp_path / "sft"), max_steps=1, batch_size=2, max_length=32,
                           save_steps=10, logging_steps=1, packing=True)
    console = Console(record=True, width=400)
    out, loss = run_sft(tiny_model_dir, short + long, settings, console=console)
    assert "2 of 6 samples keep no loss token within max_length = 32" in console.export_text()
    assert loss > 0 and (out / "model.safetensors").exists()
    with pytest.raises(SFTDataError) as e:
        run_sft(tiny_model_dir, long, settings, console=console)
    assert str(e.value).startswith("data: no row keeps a loss token within max_length = 32 tokens")


def _weights(path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


@pytest.mark.integration  # trains in-process (~15 s)
def test_vf_sft_micro_batches_and_resumes_to_the_same_model(tiny_model_dir, tmp_path):
    """micro_batch_size splits a step's rows into forwards whose gradients add up to the whole batch's (transformers
    counts the step's loss tokens across them); resume_from_checkpoint = true continues from output_dir's latest
    checkpoint-N: both end at the model one uninterrupted whole-batch run writes."""
    from rich.console import Console

    from verifiers_rl.sft.trainer import SFTSettings, run_sft

    rows = [{"prompt": f"say {w}", "completion": w * (1 + i % 3)}
            for i, w in enumerate(("apple", "river", "stone", "cloud", "lamp", "tree", "bird", "sand"))]
    base = dict(max_steps=4, batch_size=4, optim="sgd", learning_rate=0.5, lr_scheduler_type="constant", max_length=32,
                save_steps=2, logging_steps=1)

    def train(name: str, **kw):
        settings = SFTSettings(output_dir=str(tmp_path / name), **{**base, **kw})
        return run_sft(tiny_model_dir, rows, settings, console=Console(quiet=True))

    whole, whole_loss = train("whole")
    micro, micro_loss = train("micro", micro_batch_size=1)
    assert micro_loss == pytest.approx(whole_loss, rel=1e-4)
    ref = _weights(whole)
    for name, w in _weights(micro).items():
        assert torch.allclose(w, ref[name], atol=1e-5), name
    train("resumed", max_steps=2)  # stops at checkpoint-2 (a constant lr: the same schedule as 4 steps)
    resumed, _ = train("resumed", resume_from_checkpoint=True)
    for name, w in _weights(resumed).items():
        assert torch.allclose(w, ref[name], atol=1e-6), name
    assert (resumed / "checkpoint-4").is_dir()


@pytest.mark.integration  # trains in-process (~4 s)
def test_vf_sft_trains_for_num_train_epochs(tiny_model_dir, tmp_path):
    from rich.console import Console

    from verifiers_rl.sft.trainer import SFTSettings, run_sft

    rows = [{"prompt": f"say {w}", "completion": w} for w in ("apple", "river", "stone", "cloud", "lamp", "tree")]
    settings = SFTSettings(output_dir=str(tmp_path / "o"), num_train_epochs=2, batch_size=4, max_length=32,
                           save_steps=1, logging_steps=1)
    console = Console(record=True, width=200)
    out, _ = run_sft(tiny_model_dir, rows, settings, console=console)
    assert "SFT: 2 epochs on 6 rows" in console.export_text()
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert (state["global_step"], state["max_steps"], state["epoch"]) == (4, 4, 2.0)  # 2 batches a pass
    assert not (out / "checkpoint-5").exists()


def test_run_length_and_warmup_settings_are_checked_in_one_line():
    from verifiers_rl.config.loading import ConfigError
    from verifiers_rl.sft.config import validate_sft_config

    raw = {"model": "m", "data": {"env_id": "reverse-text"}, "trainer": {"max_steps": 10, "num_train_epochs": 2}}
    with pytest.raises(ConfigError, match=r"^trainer: max_steps and num_train_epochs both size the run; give one"):
        validate_sft_config(raw)
    raw["trainer"].pop("max_steps")
    assert validate_sft_config(raw).trainer.settings().num_train_epochs == 2
    raw["trainer"]["warmup_steps"] = 0.1  # a share of the run's steps, as transformers takes it
    assert validate_sft_config(raw).trainer.settings().warmup_steps == 0.1
    raw["trainer"]["micro_batch_size"] = 3  # batch_size 8 (vf-sft's default)
    with pytest.raises(ConfigError, match=r"^trainer: micro_batch_size = 3 does not divide batch_size = 8"):
        validate_sft_config(raw)
    raw["trainer"]["micro_batch_size"] = 4
    raw["trainer"]["warmup_steps"] = 2.5
    with pytest.raises(ConfigError, match=r"^trainer: warmup_steps = 2.5: give whole steps, or a share of the run"):
        validate_sft_config(raw)


@pytest.mark.integration  # trains in-process (~4 s)
def test_vf_sft_lora_dropout_and_save_total_limit(tiny_model_dir, tmp_path):
    from rich.console import Console

    from verifiers_rl.sft.trainer import SFTSettings, run_sft

    rows = [{"prompt": f"say {w}", "completion": w} for w in ("apple", "river", "stone", "cloud")]
    settings = SFTSettings(output_dir=str(tmp_path / "o"), max_steps=3, batch_size=2, max_length=32, use_lora=True,
                           lora_dropout=0.1, save_steps=1, save_total_limit=2, logging_steps=1)
    out, _ = run_sft(tiny_model_dir, rows, settings, console=Console(quiet=True))
    assert json.loads((out / "adapter_config.json").read_text())["lora_dropout"] == 0.1
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]


@pytest.mark.parametrize("key, hint", [
    ("per_device_train_batch_size", "micro_batch_size: rows per forward on each process"),
    ("gradient_accumulation_steps", "batch_size and micro_batch_size"), ("max_seq_length", "max_length"),
    ("warmup_ratio", "warmup_steps, a share of the run in [0, 1)"), ("assistant_only_loss", "[data.loss_mask]"),
])
def test_trls_sft_config_names_say_what_sets_them_in_vf_sft(key, hint):
    from verifiers_rl.config.loading import ConfigError
    from verifiers_rl.sft.config import validate_sft_config

    with pytest.raises(ConfigError) as e:
        validate_sft_config({"model": "m", "data": {"env_id": "reverse-text"}, "trainer": {key: 1}})
    assert str(e.value).startswith(f"trainer.{key}: unknown key (TRL's SFTConfig name: set {hint}")


@pytest.mark.integration  # trains in-process (~6 s)
def test_vf_rl_warmup_takes_micro_batches_and_reuses_across_them(tiny_model_dir, tmp_path):
    """[warmup] micro_batch_size sizes the forwards only: a finished warm-up is reused whatever it was."""
    from rich.console import Console

    from verifiers_rl.envs.loading import load_environment
    from verifiers_rl.sft.warmup import MARKER, run_warmup

    env = load_environment("reverse-text", dataset_source="offline", num_eval_examples=4)
    kw = dict(completion_format="{answer}", max_steps=2, learning_rate=1e-3, batch_size=4, num_examples=8,
              max_length=64)
    console = Console(record=True, width=200)
    out = run_warmup(tiny_model_dir, env, tmp_path / "w", micro_batch_size=2, console=console, **kw)
    assert (out / "model.safetensors").exists() and "micro_batch_size" not in (out / MARKER).read_text()
    run_warmup(tiny_model_dir, env, tmp_path / "w", console=console, **kw)
    assert "warm-up: reusing the finished SFT model" in console.export_text()


def test_vf_sft_resume_without_a_checkpoint_is_one_line(tmp_path):
    from verifiers_rl.config.loading import ConfigError
    from verifiers_rl.sft.config import validate_sft_config

    raw = {"model": "m", "data": {"env_id": "reverse-text"}, "trainer": {"output_dir": str(tmp_path / "o"),
                                                                          "resume_from_checkpoint": True}}
    # vf-rl's rule (trainer/checkpoints.resolve_resume): a checkpoint is complete when it holds trainer_state.json
    with pytest.raises(ConfigError, match=r"^trainer.resume_from_checkpoint=True: no complete checkpoint in .*/o; "):
        validate_sft_config(raw)
    raw["trainer"]["resume_from_checkpoint"] = str(tmp_path / "checkpoint-7")
    with pytest.raises(ConfigError, match=r"^trainer.resume_from_checkpoint='.*-7': no such checkpoint directory$"):
        validate_sft_config(raw)
    raw["trainer"]["resume_from_checkpoint"] = 3  # output_dir's checkpoint-3, as vf-rl takes a step number
    with pytest.raises(ConfigError, match=r"^trainer.resume_from_checkpoint=3: no complete checkpoint-3 in .*/o "):
        validate_sft_config(raw)
    (tmp_path / "o" / "checkpoint-3").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"^trainer.resume_from_checkpoint=3: no complete checkpoint-3"):
        validate_sft_config(raw)  # half-written: skipped, as vf-rl skips it
    for name in ("trainer_state.json", "scheduler.pt"):  # complete, and more than the weights: resumable
        (tmp_path / "o" / "checkpoint-3" / name).write_text("{}")
    assert validate_sft_config(raw).trainer.resume_from_checkpoint == 3
    raw["trainer"]["resume_from_checkpoint"] = True
    assert validate_sft_config(raw).trainer.resume_from_checkpoint is True


def test_vf_sft_reporting_to_an_unreachable_wandb_is_one_line_before_loading(tiny_model_dir, tmp_path, capsys,
                                                                               monkeypatch):
    import socket

    from verifiers_rl.cli.sft import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"  # closed once the block ends
    monkeypatch.setenv("WANDB_BASE_URL", url)
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "NETRC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no `wandb login` netrc
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"messages": TWO_TURNS}) + "\n")
    (tmp_path / "sft.toml").write_text(f'model = "{tiny_model_dir}"\n[data]\npath = "{rows}"\n[trainer]\n'
                                       f'output_dir = "{tmp_path / "o"}"\nreport_to = "wandb"\n')
    with pytest.raises(SystemExit) as e:  # a command: wandb would ask for a key it cannot be given
        main(["@", str(tmp_path / "sft.toml")])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert e.value.code == 1 and err == ["error: trainer.report_to includes 'wandb', but no W&B API key is set here "
                                         "(WANDB_API_KEY, `wandb login`); set one, set WANDB_MODE=offline to log "
                                         "offline (`wandb sync` later), or leave 'wandb' out"]
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    with pytest.raises(SystemExit) as e:
        main(["@", str(tmp_path / "sft.toml")])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert e.value.code == 1 and err == [f"error: trainer.report_to includes 'wandb', but W&B's server {url} cannot "
                                         "be reached (connection refused); set WANDB_MODE=offline to log offline "
                                         "(`wandb sync` later), or leave 'wandb' out"]
    assert not (tmp_path / "o").exists()


def test_vf_sft_names_the_line_of_a_data_file_it_cannot_parse(tiny_model_dir, tmp_path, capsys):
    from verifiers_rl.cli.sft import main

    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"messages": TWO_TURNS}) + "\n" + '{"messages": [oops\n')
    (tmp_path / "sft.toml").write_text(f'model = "{tiny_model_dir}"\n[data]\npath = "{rows}"\n')
    with pytest.raises(SystemExit) as e:
        main(["@", str(tmp_path / "sft.toml")])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert e.value.code == 2 and err == [f"error: data.path: '{rows}' cannot be read as json rows (ArrowInvalid: "
                                         "JSON parse error: Invalid value. in row 1)"]
    rows.write_text("")
    with pytest.raises(SystemExit) as e:
        main(["@", str(tmp_path / "sft.toml")])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert e.value.code == 2 and err == [f"error: data.path: '{rows}' is empty; give it rows with prompt + "
                                         "completion or messages"]


def _vf_sft(tmp_path, config: str):
    path = tmp_path / "sft.toml"
    path.write_text(config)
    return subprocess.run([sys.executable, "-m", "verifiers_rl.cli.sft", "@", str(path)], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path)


@pytest.mark.integration  # spawns a process
def test_vf_sft_validates_at_its_interval_with_packed_rows(tiny_model_dir, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(json.dumps({"messages": [{"role": "user", "content": w},
                                                       {"role": "assistant", "content": w[::-1]}]})
                              for w in ["apple", "river", "stone", "cloud", "lamp", "tree", "bird", "sand",
                                        "wind", "rain"]))
    config = (f'model = "{tiny_model_dir}"\n[data]\npath = "{rows}"\n[data.loss_mask]\nuser = true\n'
              f'[val]\nfraction = 0.2\ninterval = 2\n[trainer]\noutput_dir = "{tmp_path / "sft"}"\nmax_steps = 4\n'
              'batch_size = 2\nlogging_steps = 1\npacking = true\nmax_length = 64\n')
    r = _vf_sft(tmp_path, config)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    val_lines = [line for line in r.stdout.splitlines() if ": val loss " in line]
    assert [line.split(":")[0].split()[-1] for line in val_lines] == ["2/4", "4/4"], out[-3000:]
    assert "SFT: 4 steps on 8 rows" in r.stdout and (tmp_path / "sft" / "model.safetensors").exists()
    # bad settings: one line each, before any model loads
    for bad, start in ((config.replace("fraction = 0.2", 'fraction = 0.2\npath = "x.jsonl"'),
                        "error: val: give exactly one of val.path or val.fraction"),
                       (config.replace("user = true", "assistant = false"),
                        "error: data.loss_mask: every role is false")):
        r = _vf_sft(tmp_path, bad)
        lines = [line for line in (r.stdout + r.stderr).splitlines() if line.strip()]
        assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith(start), r.stdout + r.stderr


def test_packed_rows_attend_only_to_themselves(tiny_model_dir):
    """What `packing = true` relies on: TRL's padding-free rows carry restarting position ids and no attention
    mask, and its training forward passes use_cache=False (SFTTrainer.compute_loss); the model then attends within
    each packed row only (the same logits as each row alone). With a cache it would not: the check matters."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    a, b = torch.tensor([[5, 6, 7, 8]]), torch.tensor([[9, 10, 11]])
    with torch.no_grad():
        packed = model(input_ids=torch.cat([a, b], 1), position_ids=torch.tensor([[0, 1, 2, 3, 0, 1, 2]]),
                       use_cache=False).logits
        alone = torch.cat([model(input_ids=a).logits, model(input_ids=b).logits], 1)
    assert torch.allclose(packed, alone, atol=1e-5)


@pytest.mark.parametrize("setting, line", [
    ('lr_scheduler_type = "cosin"', "error: trainer.lr_scheduler_type: 'cosin' is not a transformers scheduler (did "
                                    "you mean 'cosine'?); one of 'linear', 'cosine'"),
    ("batch_size = 0", "error: trainer.batch_size: 0 must be >= 1"),
    ("learning_rate = -1.0", "error: trainer.learning_rate: -1.0 must be >= 0.0"),
    ("logging_steps = 0", "error: trainer.logging_steps: 0 must be >= 1"),
    ("use_lora = true\nlora_rank = 0", "error: trainer.lora_rank: 0 must be >= 1"),
    ('use_lora = true\nlora_target_modules = ["nope"]', "error: lora_target_modules=['nope']: none is a layer of "
                                                        "this model"),
])
def test_vf_sft_refuses_a_setting_transformers_or_peft_would_raise_on_in_one_line(tiny_model_dir, tmp_path, capsys,
                                                                                   setting, line):
    """Each of these was a traceback from transformers, torch or peft once the model had loaded."""
    from verifiers_rl.cli.sft import main

    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"messages": TWO_TURNS}) + "\n")
    (tmp_path / "sft.toml").write_text(f'model = "{tiny_model_dir}"\n[data]\npath = "{rows}"\n[trainer]\n'
                                       f'output_dir = "{tmp_path / "out"}"\n{setting}\n')
    with pytest.raises(SystemExit) as e:
        main(["@", str(tmp_path / "sft.toml")])
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip() and "Generating" not in x]
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith(line), err


def test_vf_rl_warmup_refuses_an_unknown_scheduler_in_one_line():
    from verifiers_rl.config.loading import ConfigError
    from verifiers_rl.config.resolution import validate_run_config

    raw = {"model": "m", "env": {"id": "verifiers-rl/reverse-text"},
           "warmup": {"completion_format": "{answer}", "lr_scheduler_type": "cosine_decay"}}
    with pytest.raises(ConfigError, match=r"^warmup\.lr_scheduler_type: 'cosine_decay' is not a transformers "
                                          r"scheduler"):
        validate_run_config(raw)


@pytest.mark.parametrize("fmt, line", [
    ('{"reversed": "{answer}"}', "'{\"reversed\": \"{answer}\"}' has a field other than {answer} (KeyError: "
                                 "'\"reversed\"'); write a literal brace twice: {{ or }}"),
    ("<a>{0}</a>", "'<a>{0}</a>' has a field other than {answer} (IndexError"),
    ("<a></a>", "'<a></a>' must contain {answer}"),
])
def test_a_completion_format_str_format_cannot_fill_is_one_line_in_vf_sft_and_the_warmup(fmt, line):
    """It was a KeyError traceback from each SFT row's str.format (vf-sft's env data, vf-rl's [warmup]), or, with no
    {answer}, the same reply for every row."""
    from verifiers_rl.config.loading import ConfigError
    from verifiers_rl.config.resolution import validate_run_config
    from verifiers_rl.sft.config import validate_sft_config

    with pytest.raises(ConfigError) as e:
        validate_sft_config({"model": "m", "data": {"env_id": "verifiers-rl/reverse-text", "completion_format": fmt}})
    assert str(e.value).startswith(f"data.completion_format: {line}"), str(e.value)
    with pytest.raises(ConfigError) as e:
        validate_run_config({"model": "m", "env": {"id": "verifiers-rl/reverse-text"},
                             "warmup": {"completion_format": fmt}})
    assert str(e.value).startswith(f"warmup.completion_format: {line}"), str(e.value)
    escaped = '{{"reversed": "{answer}"}}'
    assert validate_sft_config({"model": "m", "data": {"env_id": "x", "completion_format": escaped}})


def test_vf_rl_warmup_refuses_a_max_length_sft_cannot_train_in_one_line():
    """[warmup] max_length = 0 passed vf-rl's checks and failed in the warm-up, after the env and model loaded."""
    from verifiers_rl.config.loading import ConfigError
    from verifiers_rl.config.resolution import validate_run_config

    raw = {"model": "m", "env": {"id": "verifiers-rl/reverse-text"},
           "warmup": {"completion_format": "{answer}", "max_length": 0}}
    with pytest.raises(ConfigError, match=r"^warmup\.max_length: 0 must be >= 1"):
        validate_run_config(raw)
