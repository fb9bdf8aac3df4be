"""The local engine serves a LoRA policy as a merged plain copy (inference/lora_merge.py): same outputs as the
PEFT model, refreshed at each sync, the policy's own base weights untouched."""

from __future__ import annotations

import torch

from verifiers_rl.inference.lora_merge import merged_copy, refresh_merged

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _peft(tiny_model_dir, **kw):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    cfg = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.1, target_modules=TARGETS, init_lora_weights=False, **kw)
    return get_peft_model(base, cfg)


def _logits(model, ids):
    model.eval()
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_merged_copy_follows_the_adapter_and_leaves_the_policy_alone(tiny_model_dir):
    model = _peft(tiny_model_dir)
    base_before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    merged = merged_copy(model)
    assert merged is not None and not any(p.requires_grad for p in merged.parameters())
    assert not any("lora" in n for n, _ in merged.named_modules())
    ids = torch.randint(3, 250, (3, 17))
    assert torch.allclose(_logits(merged, ids), _logits(model, ids), atol=1e-5)
    with torch.no_grad():  # an optimizer step on the adapters
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.add_(torch.randn_like(p) * 0.05)
    assert not torch.allclose(_logits(merged, ids), _logits(model, ids), atol=1e-3)
    refresh_merged(merged, model)
    assert torch.allclose(_logits(merged, ids), _logits(model, ids), atol=1e-5)
    for n, p in model.named_parameters():
        if "lora_" not in n:
            assert torch.equal(p, base_before[n]), n


def test_what_a_merge_cannot_follow_is_served_as_it_is(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    assert merged_copy(AutoModelForCausalLM.from_pretrained(tiny_model_dir)) is None
    assert merged_copy(_peft(tiny_model_dir, use_dora=True)) is None
    assert merged_copy(_peft(tiny_model_dir, modules_to_save=["lm_head"])) is None


def test_a_half_precision_policy_is_served_unmerged_because_a_merge_drops_small_updates(tiny_model_dir):
    """bf16 base weights (a LoRA policy on a GPU): W + B A * scale rounded to bf16 loses an update below W's rounding
    step, which PEFT's own path (the trainer's forward) keeps; such a policy is served as it is."""
    model = _peft(tiny_model_dir).to(torch.bfloat16)
    assert merged_copy(model) is None
    layer = model.get_base_model().model.layers[0].self_attn.q_proj
    w = layer.get_base_layer().weight
    with torch.no_grad():
        layer.lora_B["default"].weight.mul_(1e-4)  # a small adapter: early in training
        delta = layer.get_delta_weight("default")
        rounded = (w + delta).to(torch.bfloat16) - w  # what a bf16 merge would serve
    assert float(delta.float().abs().mean()) > 0 and float(rounded.float().abs().mean()) < 0.5 * float(
        delta.float().abs().mean())  # most of the update is lost in the merge


def test_trainer_serves_the_trained_adapter_merged(tiny_model_dir, tmp_path):
    import verifiers_rl as vf
    from datasets import Dataset
    from peft import PeftModel

    env = vf.SingleTurnEnv(dataset=Dataset.from_list([{"question": f"say {i}", "answer": "x"} for i in range(8)]),
                           rubric=vf.Rubric(funcs=[lambda completion, **kw: float(len(str(completion)) % 3)]))
    args = vf.RLConfig(output_dir=str(tmp_path), max_steps=2, batch_size=8, rollouts_per_example=4,
                       micro_batch_size=8, max_tokens=6, max_seq_len=64, learning_rate=5e-2, use_lora=True,
                       save_strategy="no", logging_steps=1, sample_log_interval=0, report_to="none")
    trainer = vf.RLTrainer(str(tiny_model_dir), env, args)
    served = trainer.inference.engine.model
    assert served is not trainer.model and not isinstance(served, PeftModel)  # older peft leaves peft_config
    trainer.train()
    ids = torch.randint(3, 250, (2, 9))
    assert torch.allclose(_logits(served, ids), _logits(trainer.model, ids), atol=1e-5)
    trainer.close()
