"""Architectures other than the tiny Qwen3 (built here offline from their transformers configs, with the tiny
model's tokenizer): GPT-2 (Conv1D projections, dropout on by default), Phi-3 (fused qkv_proj / gate_up_proj),
GPT-NeoX, Granite (logits divided by `logits_scaling` after the head), Seed-OSS (a functional residual dropout),
DeepSeek-V3 (MLA: cached keys and values of different widths). LoRA's default targets (Llama's projection names) become 'all-linear' where the model lacks them, and the
policy trains without dropout (the sampler has none), so its log-probs match the sampler's."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
import transformers as T  # noqa: E402

import verifiers_rl as vf  # noqa: E402
from verifiers_rl.errors import ConfigError  # noqa: E402
from verifiers_rl.models.tiny import build_random_model  # noqa: E402
from verifiers_rl.trainer.config_fields import DEFAULT_LORA_TARGET_MODULES  # noqa: E402
from verifiers_rl.trainer.model_loading import disable_dropout, lora_targets  # noqa: E402

SIZES = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
             max_position_embeddings=512)


def build(kind: str, tiny_model_dir, out):
    """A random model of `kind` with the tiny tokenizer (vocab, EOS and pad ids), saved in `out`."""
    config_class, config = {
        "gpt2": (T.GPT2Config, dict(n_embd=64, n_layer=2, n_head=2, n_positions=512)),
        "phi3": (T.Phi3Config, SIZES),
        "gpt_neox": (T.GPTNeoXConfig, SIZES),
        "llama": (T.LlamaConfig, dict(SIZES, attention_dropout=0.1)),
        "granite": (T.GraniteConfig, dict(SIZES, logits_scaling=4.0)),
        "seed_oss": (T.SeedOssConfig, dict(SIZES, num_key_value_heads=2, head_dim=32)),  # dropout 0.1
        "deepseek_v3": (T.DeepseekV3Config, dict(
            SIZES, num_key_value_heads=2, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
            first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=8,
            v_head_dim=16, n_group=1, topk_group=1))}[kind]
    return build_random_model(out, config_class, tiny_model_dir, **config)


def test_default_lora_targets_become_all_linear_where_the_model_lacks_them(tiny_model_dir, tmp_path, capsys):
    qwen3 = T.AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert lora_targets(qwen3, DEFAULT_LORA_TARGET_MODULES, True) == DEFAULT_LORA_TARGET_MODULES
    for kind in ("phi3", "gpt_neox", "gpt2"):  # fused or differently named projections: some or all names missing
        model = T.AutoModelForCausalLM.from_pretrained(build(kind, tiny_model_dir, tmp_path / kind))
        assert lora_targets(model, DEFAULT_LORA_TARGET_MODULES, True) == "all-linear", kind
    assert "LoRA: this model has no q_proj, k_proj, v_proj, gate_proj, up_proj layers: targeting all its linear" \
        in capsys.readouterr().out  # phi3's line: it has o_proj and down_proj only
    with pytest.raises(ConfigError, match=r"^lora_target_modules=\['c_q'\]: none is a layer of this model"):
        lora_targets(model, ["c_q"], False)
    assert lora_targets(model, ["c_attn", "c_q"], False) == ["c_attn", "c_q"]  # as asked


def test_dropout_is_off_in_the_policys_own_layers(tiny_model_dir, tmp_path):
    gpt2 = T.AutoModelForCausalLM.from_pretrained(build("gpt2", tiny_model_dir, tmp_path / "gpt2"))
    llama = T.AutoModelForCausalLM.from_pretrained(build("llama", tiny_model_dir, tmp_path / "llama"))
    seed = T.AutoModelForCausalLM.from_pretrained(build("seed_oss", tiny_model_dir, tmp_path / "seed_oss"))
    assert any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in gpt2.modules())  # GPT-2's defaults: 0.1
    assert any(getattr(m, "residual_dropout", 0.0) > 0 for m in seed.modules())  # a rate its layers pass on
    for model in (gpt2, llama, seed):
        disable_dropout(model)
        assert not any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())
        assert not any(getattr(m, name, 0.0) for m in model.modules()
                       for name in ("attention_dropout", "residual_dropout"))


@pytest.mark.integration  # trains two steps in-process
def test_gpt2_trains_with_lora_and_its_log_probs_match_the_samplers(tiny_model_dir, tmp_path):
    """GPT-2 with its dropout 0.1: the default LoRA targets none of its layers (all-linear instead), and with dropout
    on the trainer's forward the segment attention refused it at step 1 (and the ratios drifted off 1)."""
    first = first_step_ratios(build("gpt2", tiny_model_dir, tmp_path / "gpt2"), tmp_path / "run",
                              check=lambda t: t.model.peft_config["default"].target_modules)  # all-linear, by peft
    assert 1 - 1e-4 < first["importance_ratio/min"] <= first["importance_ratio/max"] < 1 + 1e-4, first


def first_step_ratios(model_dir, out, check=lambda trainer: True, **config) -> dict:
    """Step 1's metrics of a 2-step run of `model_dir` on test_trainer's task (`check(trainer)` before it trains)."""
    from test_trainer import make_config, make_env

    trainer = vf.RLTrainer(str(model_dir), make_env(), make_config(out, **config))
    try:
        assert check(trainer)
        trainer.train()
    finally:
        trainer.close()
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return next(s for s in steps if s.get("step") == 1 and "importance_ratio/min" in s)


def test_dropout_is_off_in_a_peft_models_base_and_the_adapters_own_stays(tiny_model_dir, tmp_path):
    """A notebook's own PeftModel (get_peft_model before RLTrainer): its base layers lose their dropout as a model
    by path does, and the adapter keeps the `lora_dropout` it was built with."""
    from peft import LoraConfig, get_peft_model

    from verifiers_rl.trainer.model_loading import load_policy

    gpt2 = T.AutoModelForCausalLM.from_pretrained(build("gpt2", tiny_model_dir, tmp_path / "gpt2"))
    peft_model = get_peft_model(gpt2, LoraConfig(r=4, lora_dropout=0.05, target_modules=["c_attn"]))
    args = vf.RLConfig(output_dir=str(tmp_path / "out"), use_lora=True, report_to="none")
    model, _ = load_policy(peft_model, args, tokenizer=T.AutoTokenizer.from_pretrained(tiny_model_dir))
    drops = [(".lora_dropout." in name, m.p) for name, m in model.named_modules() if isinstance(m, torch.nn.Dropout)]
    kept, base = [p for own, p in drops if own], [p for own, p in drops if not own]
    assert kept and set(kept) == {0.05}
    assert base and set(base) == {0.0}


class _ScaledLogits(T.LlamaForCausalLM):
    """A forward that changes the logits after the head, in a way no config field names."""

    def forward(self, input_ids=None, attention_mask=None, logits_to_keep=0, **kwargs):
        out = super().forward(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=logits_to_keep,
                              **kwargs)
        out.logits = out.logits * 0.5
        return out


def test_the_output_head_serves_log_probs_only_where_it_gives_the_models_own_logits(caplog):
    """The chunked log-prob path applies the output head to the last hidden state itself: a model whose forward
    does more after the head (Granite's logits_scaling; an unnamed scale, caught by the once-per-model check) keeps
    the full-logits path."""
    from verifiers_rl.trainer.logprobs import _output_head

    config = dict(SIZES, vocab_size=64)
    torch.manual_seed(0)
    llama = T.LlamaForCausalLM(T.LlamaConfig(**config))
    assert _output_head(llama) is llama.lm_head
    assert _output_head(T.GraniteForCausalLM(T.GraniteConfig(**config, logits_scaling=4.0))) is None
    assert _output_head(T.GraniteForCausalLM(T.GraniteConfig(**config, logits_scaling=1.0))) is not None
    scaled = _ScaledLogits(T.LlamaConfig(**config)).train()
    with caplog.at_level("WARNING", logger="verifiers_rl.trainer.logprobs"):
        assert _output_head(scaled) is None
        assert _output_head(scaled) is None  # the verdict is kept: one check, one line
    assert scaled.training  # the check's eval mode is undone
    assert [r.getMessage() for r in caplog.records] == [
        "_ScaledLogits: its logits are not its output head on its last hidden state (a scale or cap after the "
        "head): log-probs come from its full logits, without chunking or prompt packing"]


@pytest.mark.integration  # trains two steps in-process
@pytest.mark.parametrize("kind", ["granite", "seed_oss", "deepseek_v3"])
def test_the_first_step_trains_on_the_log_probs_it_sampled_from(kind, tiny_model_dir, tmp_path):
    """The sampler's policy is the trainer's at step 1, so every importance ratio is 1. Before: Granite's log-probs
    came from the head alone (its forward divides by logits_scaling after it), 4x too sharp (ratios 0.64-1.37);
    Seed-OSS trained with its residual dropout on (0.93-1.08); DeepSeek-V3's rollouts all errored in the local
    engine's KV cache, sized for values as wide as keys."""
    first = first_step_ratios(build(kind, tiny_model_dir, tmp_path / kind), tmp_path / "run", use_lora=False,
                              max_tokens=16)
    assert 1 - 1e-4 < first["importance_ratio/min"] <= first["importance_ratio/max"] < 1 + 1e-4, first
