"""The offline tiny model: loads with Auto* classes, untied head, prefix-consistent chat template, CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# A multi-turn conversation with a system prompt, tool calls (one and two per turn), grouped tool responses.
CONVERSATION = [
    {"role": "system", "content": "You add numbers."},
    {"role": "user", "content": "What is 2+3, then 4+5?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}},
            {"id": "c2", "type": "function", "function": {"name": "add", "arguments": {"a": 4, "b": 5}}},
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "5"},
    {"role": "tool", "tool_call_id": "c2", "content": "9"},
    {
        "role": "assistant",
        "content": "Let me check one.",
        "tool_calls": [{"id": "c3", "type": "function", "function": {"name": "add", "arguments": {"a": 5, "b": 9}}}],
    },
    {"role": "tool", "tool_call_id": "c3", "content": "14"},
    {"role": "assistant", "content": "5 and 9 (sum 14)."},
    {"role": "user", "content": "Thanks! ünïcödé ✓"},
    {"role": "assistant", "content": "You're welcome."},
]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_loads_with_auto_classes(tiny_model_dir, tokenizer):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert model.dtype == torch.float32
    n_params = sum(p.numel() for p in model.parameters())
    assert 0.6e6 < n_params < 1.0e6
    # untied output head by default
    assert not model.config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()
    assert model.config.vocab_size >= len(tokenizer)

    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad = tokenizer.convert_tokens_to_ids("<|pad|>")
    assert tokenizer.eos_token_id == eos and tokenizer.pad_token_id == pad and eos != pad
    assert model.generation_config.eos_token_id == eos
    assert model.generation_config.pad_token_id == pad
    gen_cfg = json.loads((tiny_model_dir / "generation_config.json").read_text())
    assert gen_cfg["eos_token_id"] == eos and gen_cfg["pad_token_id"] == pad

    # byte-level: every byte is one token, text round-trips, specials are single tokens
    text = "héllo ✓ <|im_end|>"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids[:-1] == list(text.replace("<|im_end|>", "").encode()) and ids[-1] == eos
    assert tokenizer.decode(ids) == text
    assert tokenizer.decode(ids, skip_special_tokens=True) == "héllo ✓ "

    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), model.config.vocab_size)


@pytest.fixture
def render(tokenizer, add_tools):
    """messages -> the chat template's text, with the `add` tool declared."""
    return lambda messages, **kw: tokenizer.apply_chat_template(messages, tools=add_tools, tokenize=False, **kw)


@pytest.fixture
def render_ids(tokenizer, add_tools):
    """messages -> the chat template's token ids, with the `add` tool declared."""
    def ids(messages, **kw) -> list[int]:
        out = tokenizer.apply_chat_template(messages, tools=add_tools, tokenize=True, **kw)
        return list(out["input_ids"] if hasattr(out, "keys") else out)

    return ids


def test_chat_template_renders_tools_and_tool_calls(tokenizer, render, add_tools):
    text = render(CONVERSATION[:5], add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou add numbers.\n\n# Tools")
    assert "<tools>\n" + json.dumps(add_tools[0]) + "\n</tools>" in text
    assert '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>' in text
    # consecutive tool messages are grouped into one user turn
    assert (
        "<|im_start|>user\n<tool_response>\n5\n</tool_response>\n<tool_response>\n9\n</tool_response><|im_end|>\n"
        in text
    )
    assert text.endswith("<|im_start|>assistant\n")
    assert "<think>" not in text
    # OpenAI-style string arguments render the same as a mapping
    as_string = [dict(m) for m in CONVERSATION[:3]]
    as_string[2] = {
        **as_string[2],
        "tool_calls": [
            {"id": tc["id"], "type": "function",
             "function": {"name": "add", "arguments": json.dumps(tc["function"]["arguments"])}}
            for tc in CONVERSATION[2]["tool_calls"]
        ],
    }
    assert render(as_string) == render(CONVERSATION[:3])
    # no tools, no system prompt: no system turn at all
    plain = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                          add_generation_prompt=True)
    assert plain == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_chat_template_is_prefix_consistent(tokenizer, render, render_ids):
    """prompt(messages[:k]) + the model's reply is a prefix of the longer conversation, as text and as ids."""
    full_text = render(CONVERSATION)
    full_ids = render_ids(CONVERSATION)
    eos = "<|im_end|>"
    assistant_turns = [k for k, m in enumerate(CONVERSATION) if m["role"] == "assistant"]
    assert len(assistant_turns) == 4
    for k in assistant_turns:
        prompt = render(CONVERSATION[:k], add_generation_prompt=True)
        with_reply = render(CONVERSATION[: k + 1])
        assert with_reply.startswith(prompt)
        # what the model generates: the reply text up to and including <|im_end|>
        reply = with_reply[len(prompt) :]
        completion = reply[: reply.index(eos) + len(eos)]
        assert full_text.startswith(prompt + completion)
        # token level: prompt ids + completion ids concatenate to a prefix of the full conversation's ids
        prompt_ids = render_ids(CONVERSATION[:k], add_generation_prompt=True)
        completion_ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
        assert full_ids[: len(prompt_ids) + len(completion_ids)] == prompt_ids + completion_ids
        # every later prompt (the next user/tool turn appended) extends the same sequence
        for j in range(k + 1, len(CONVERSATION) + 1):
            assert render(CONVERSATION[:j], add_generation_prompt=True).startswith(prompt + completion)


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "verifiers_rl.cli.tiny_model", *map(str, args)],
        capture_output=True, text=True, timeout=120,
    )


@pytest.mark.integration  # spawns a process
def test_cli_refuses_non_empty_dir(tmp_path):
    (tmp_path / "keep.txt").write_text("precious")
    r = _cli(tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "--force" in r.stderr
    assert "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_cli_builds_model(tmp_path, capsys):
    # In-process (the refusal test above runs the real subprocess); --force writes into a non-empty dir.
    from verifiers_rl.cli.tiny_model import main

    out = tmp_path / "m"
    out.mkdir()
    (out / "old.txt").write_text("x")
    rc = main([str(out), "--layers", "1", "--hidden", "64", "--heads", "2", "--kv-heads", "1",
               "--intermediate", "96", "--tie-embeddings", "--seed", "3", "--force"])
    stdout = capsys.readouterr().out
    assert rc == 0
    assert "parameters" in stdout and str(out.resolve()) in stdout
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 1 and cfg["hidden_size"] == 64 and cfg["tie_word_embeddings"] is True
    n_reported = int(stdout.split("(")[1].split(" ")[0].replace(",", ""))
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(out)
    assert n_reported == sum(p.numel() for p in model.parameters())
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


@pytest.mark.integration  # spawns a process
def test_cli_rejects_bad_shape(tmp_path):
    r = _cli(tmp_path / "m", "--hidden", "100", "--heads", "3")
    assert r.returncode == 2 and "divisible" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "m").exists()


@pytest.mark.integration  # spawns a process
def test_cli_help_is_fast():
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "verifiers_rl.cli.tiny_model", "--help"],
        capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 0 and "--tie-embeddings" in r.stdout
    assert "torch" not in r.stderr and "transformers" not in r.stderr
