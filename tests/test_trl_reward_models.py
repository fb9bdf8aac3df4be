"""TRL's reward models among reward_funcs: a model dir (loaded as TRL loads one) or a loaded model scores each
rollout as TRL's GRPOTrainer does; its texts are built with TRL's own `apply_chat_template` here to check ours."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
from trl.data_utils import apply_chat_template

import verifiers_rl as vf

from test_trainer import make_config

PROMPTS = [{"prompt": [{"role": "user", "content": f"Say {w}."}]} for w in ("cat", "lamp", "tree", "sand")]


def trl_scores(model_dir, states, conversational: bool) -> list[float]:
    """What TRL's `_calculate_rewards` computes for a reward model on these rollouts."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1).eval()
    model.config.pad_token_id = tok.pad_token_id
    replies = [(s["completion"] or [{}])[-1].get("content") or "" for s in states]
    if conversational:
        texts = [apply_chat_template({"messages": s["input"]["prompt"] + [{"role": "assistant", "content": r}]},
                                     tok)["text"] for s, r in zip(states, replies)]
    else:
        texts = [s["input"]["trl_prompt"] + r for s, r in zip(states, replies)]
    inputs = tok(text=texts, return_tensors="pt", padding=True, padding_side="right", add_special_tokens=False)
    with torch.inference_mode():
        return model(**inputs).logits[:, 0].tolist()


@pytest.mark.parametrize("conversational", [True, False])
def test_a_reward_model_by_dir_scores_as_trls(tiny_model_dir, tmp_path, conversational):
    # a sequence classifier on the tiny model (its score head initialised from seed 0, as saved)
    torch.manual_seed(0)
    rm = AutoModelForSequenceClassification.from_pretrained(str(tiny_model_dir), num_labels=1)
    rm.save_pretrained(tmp_path / "rm")
    AutoTokenizer.from_pretrained(str(tiny_model_dir)).save_pretrained(tmp_path / "rm")
    data = PROMPTS if conversational else [{"prompt": p["prompt"][0]["content"]} for p in PROMPTS]
    trainer = vf.RLTrainer(str(tiny_model_dir), reward_funcs=str(tmp_path / "rm"), train_dataset=data,
                           args=make_config(tmp_path / "out", max_steps=1))
    trainer.train()
    states = trainer.last_states
    assert [s["reward"] for s in states] == pytest.approx(trl_scores(tmp_path / "rm", states, conversational),
                                                          abs=1e-5)
    assert "rm" in states[0]["metrics"]  # named by its model, as TRL names it


def test_a_loaded_reward_model_with_its_processing_class_beside_a_function(tiny_model_dir, tmp_path):
    torch.manual_seed(1)
    rm = AutoModelForSequenceClassification.from_pretrained(str(tiny_model_dir), num_labels=1)
    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    trainer = vf.RLTrainer(str(tiny_model_dir), reward_funcs=[rm, lambda completions, **kw: [1.0] * len(completions)],
                           reward_processing_classes=[tok, None], train_dataset=PROMPTS,
                           args=make_config(tmp_path, max_steps=1))
    trainer.train()
    assert not any(p.requires_grad for p in rm.parameters()) and not rm.training  # scored, never trained
    rm.save_pretrained(tmp_path / "rm")
    tok.save_pretrained(tmp_path / "rm")
    expected = trl_scores(tmp_path / "rm", trainer.last_states, True)
    assert [s["reward"] - 1.0 for s in trainer.last_states] == pytest.approx(expected, abs=1e-5)
