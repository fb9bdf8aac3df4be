"""Offline tiny model: a byte-level tokenizer with a Qwen-style chat template and a random-init Qwen3, written as a
normal HF model directory (AutoModelForCausalLM, vLLM) without hub access.
"""


from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|pad|>")
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|pad|>"

# Qwen/Hermes-style template. Kept prefix-consistent: a turn's rendering never depends on later messages,
# so prompt(messages[:k]) + completion is a prefix of the rendering of the longer conversation.
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages and messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n'"
    " 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments'"
    " ' within <tool_call></tool_call> XML tags:\\n<tool_call>\\n'"
    " '{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif messages and messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' and loop.first %}"
    # already rendered above
    "{%- elif message.role == 'user' or message.role == 'system' %}"
    "{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + (message.content or '') }}"
    "{%- if message.tool_calls %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    "{%- if loop.first and not message.content %}{{- '<tool_call>\\n' }}"
    "{%- else %}{{- '\\n<tool_call>\\n' }}{%- endif %}"
    "{{- '{\"name\": ' + (tool_call.name | tojson) + ', \"arguments\": ' }}"
    "{%- if tool_call.arguments is string %}{{- tool_call.arguments }}"
    "{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + (message.content or '') + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte → printable-character map (the alphabet of the ByteLevel pre-tokenizer)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    mapping = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def build_tokenizer(max_length: int = 4096):
    """A byte-level BPE tokenizer with no merges: token id == byte value, then the special tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: b for b, ch in bytes_to_unicode().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        model_max_length=max_length,
        chat_template=CHAT_TEMPLATE,
    )


def shape_problem(layers: int, hidden: int, heads: int, kv_heads: int, intermediate: int = 1,
                  max_positions: int = 1) -> tuple[str, str] | None:
    """What is wrong with a tiny model's shape, as (the setting's name, the line saying it), or None. vf-tiny-model
    (--NAME), vf-rl's [tiny_model] (tiny_model.NAME) and build_tiny_model check it with this one rule."""
    sizes = {"layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv_heads, "intermediate": intermediate,
             "max_positions": max_positions}
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return name, f"{name}={value!r} must be a positive integer"
    if hidden % heads:
        fits = [h for h in range(min(heads, hidden), 0, -1) if hidden % h == 0 and h % kv_heads == 0]
        hint = f"; e.g. heads={fits[0]}" if fits else ""
        return "heads", f"hidden={hidden} must be divisible by heads={heads}{hint}"
    if heads % kv_heads:
        return "kv_heads", f"heads={heads} must be divisible by kv_heads={kv_heads}"
    return None


def build_tiny_model(
    out_dir: str | Path,
    *,
    num_layers: int = 4,
    hidden_size: int = 128,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 384,
    max_position_embeddings: int = 4096,
    tie_word_embeddings: bool = False,
    seed: int = 0,
) -> Path:
    """Write a random-init Qwen3ForCausalLM with the byte-level tokenizer to `out_dir`; return the path."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    problem = shape_problem(num_layers, hidden_size, num_heads, num_kv_heads, intermediate_size,
                            max_position_embeddings)
    if problem:
        raise ValueError(problem[1])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(max_position_embeddings)
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    config = Qwen3Config(
        # Not padded to a multiple of 8: ids past the tokenizer could be sampled by a random model but not decoded.
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=hidden_size // num_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
    )
    # Fork the RNG so building a model doesn't disturb the caller's random state.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id)
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a 3 MB save needs no progress bar
    try:
        model.save_pretrained(out)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    tokenizer.save_pretrained(out)
    # Name the generic fast class so older transformers (and vLLM's pinned one) resolve it too.
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    return out


def build_random_model(out_dir: str | Path, config_class: Any, tokenizer_from: str | Path, *, seed: int = 0,
                       **config: Any) -> Path:
    """Write a random-init model of another architecture (`config_class`: a transformers config class, built with
    `config`) that speaks the tiny model's tokenizer in `tokenizer_from` (its vocabulary size, EOS and pad ids, and
    its tokenizer files copied beside it) to `out_dir`; return the path."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    source = Path(tokenizer_from)
    ids = json.loads((source / "config.json").read_text())
    model_config = config_class(**config, vocab_size=ids["vocab_size"], eos_token_id=ids["eos_token_id"],
                                pad_token_id=ids.get("pad_token_id"))
    out = Path(out_dir)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        AutoModelForCausalLM.from_config(model_config).save_pretrained(out)
    for f in source.iterdir():
        if f.name.startswith(("tokenizer", "chat_template", "special_tokens")):
            shutil.copy(f, out / f.name)
    return out
