"""`optim = "muon"` and `"sign_sgd"` (prime-rl's trainer.optim.type values, which transformers has no name for):
the split Muon/AdamW optimizer against torch's own Muon and AdamW run side by side, sign-SGD's update, their one-line
rules, and a real RLTrainer run that trains, checkpoints and resumes with Muon."""

from __future__ import annotations

import copy

import pytest
import torch

from verifiers_rl.errors import SettingError
from verifiers_rl.trainer.optimizers import MuonWithAdamW, SignSGD, build_optimizer


class _Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(11, 6)
        self.up = torch.nn.Linear(6, 9, bias=True)
        self.norm = torch.nn.LayerNorm(9)
        self.lm_head = torch.nn.Linear(9, 11, bias=False)

    def get_input_embeddings(self):
        return self.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, ids):
        return self.lm_head(self.norm(torch.tanh(self.up(self.embed_tokens(ids)))))


class _Args:
    learning_rate, weight_decay, adam_beta1, adam_beta2, adam_epsilon = 0.02, 0.1, 0.9, 0.95, 1e-8
    optim_args = "momentum=0.9"


def _loss_step(model, opt, seed):
    torch.manual_seed(seed)
    ids = torch.randint(0, 11, (4, 5))
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten()).backward()
    opt.step()


DECAY = ["up.weight", "lm_head.weight", "embed_tokens.weight"]


def test_muon_with_adamw_steps_as_torchs_muon_and_adamw_on_prime_rls_split():
    torch.manual_seed(0)
    ours, ref = _Tiny(), None
    ref = copy.deepcopy(ours)
    opt = build_optimizer("muon", ours, _Args(), DECAY)
    assert isinstance(opt, MuonWithAdamW)
    # Muon takes the hidden matrix alone; the embedding, the head, the bias and the norm go to AdamW
    muon_params = [p for g in opt.parts["muon"].param_groups for p in g["params"]]
    assert [id(p) for p in muon_params] == [id(ours.up.weight)]
    ref_muon = torch.optim.Muon([ref.up.weight], lr=0.02, weight_decay=0.1, momentum=0.9,
                                adjust_lr_fn="match_rms_adamw")
    ref_adamw = torch.optim.AdamW([{"params": [ref.embed_tokens.weight, ref.lm_head.weight], "weight_decay": 0.1},
                                   {"params": [ref.up.bias, ref.norm.weight, ref.norm.bias], "weight_decay": 0.0}],
                                  lr=0.02, betas=(0.9, 0.95), eps=1e-8)

    class Both:
        def zero_grad(self):
            ref_muon.zero_grad(), ref_adamw.zero_grad()

        def step(self):
            ref_muon.step(), ref_adamw.step()

    for seed in range(3):
        _loss_step(ours, opt, seed)
        _loss_step(ref, Both(), seed)
    for (name, a), b in zip(ours.named_parameters(), ref.parameters()):
        assert torch.equal(a, b), name
    assert not torch.equal(ours.up.weight, _Tiny().up.weight)


def test_muon_with_adamw_saves_resumes_and_takes_the_schedulers_lr():
    torch.manual_seed(1)
    a = _Tiny()
    b = copy.deepcopy(a)
    opt_a = build_optimizer("muon", a, _Args(), DECAY)
    for seed in range(2):
        _loss_step(a, opt_a, seed)
    saved = copy.deepcopy(opt_a.state_dict())
    assert set(saved) == {"muon", "adamw"}
    b.load_state_dict(a.state_dict())
    opt_b = build_optimizer("muon", b, _Args(), DECAY)
    opt_b.load_state_dict(saved)
    sched_a = torch.optim.lr_scheduler.LambdaLR(opt_a, lambda step: 0.5)
    sched_b = torch.optim.lr_scheduler.LambdaLR(opt_b, lambda step: 0.5)
    # the scheduler writes the groups this optimizer shows: they are its parts' own, after a load too
    assert all(g["lr"] == 0.01 for part in opt_b.parts.values() for g in part.param_groups)
    _loss_step(a, opt_a, 7)
    _loss_step(b, opt_b, 7)
    sched_a.step(), sched_b.step()
    for (name, x), y in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(x, y), name


def test_sign_sgd_moves_each_weight_by_lr_times_the_sign_of_its_gradient():
    torch.manual_seed(2)
    model = _Tiny()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = build_optimizer("sign_sgd", model, _Args(), DECAY)
    assert isinstance(opt, SignSGD)
    _loss_step(model, opt, 0)
    for name, p in model.named_parameters():
        decay = 0.1 if name in DECAY else 0.0
        expected = before[name] * (1 - 0.02 * decay) - 0.02 * p.grad.sign()
        assert torch.allclose(p, expected, atol=1e-7), name


@pytest.mark.parametrize("kwargs, key, text", [
    ({"optim": "muon", "optim_args": "momentum=0.9,beta=2"}, "optim_args", "'beta' is not an option of optim='muon'"),
    ({"optim": "muon", "optim_args": "nesterov=maybe"}, "optim_args", "nesterov='maybe' is not a bool"),
    ({"optim": "muon", "fsdp": "full_shard"}, "optim", "fsdp / deepspeed shard"),
    ({"optim": "sign_sgd", "optim_args": "momentum=0.9"}, "optim_args", "optim='sign_sgd' takes none"),
])
def test_a_setting_muon_or_sign_sgd_cannot_take_is_one_line_naming_it(kwargs, key, text, tmp_path):
    from verifiers_rl import RLConfig

    with pytest.raises(SettingError) as e:
        RLConfig(output_dir=str(tmp_path), **kwargs)
    assert e.value.key == key and text in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_rltrainer_trains_checkpoints_and_resumes_with_muon(tiny_model_dir, tmp_path):
    import verifiers_rl as vf
    from datasets import Dataset

    def letters_env():
        rows = [{"question": f"Say something ({i}).", "answer": ""} for i in range(16)]
        def share(completion) -> float:
            return sum(c.isalpha() for c in str(completion)) / max(len(str(completion)), 1)

        return vf.SingleTurnEnv(dataset=Dataset.from_list(rows), rubric=vf.Rubric(funcs=[share]))

    def config(**extra):
        return vf.RLConfig(output_dir=str(tmp_path / "out"), max_steps=2, batch_size=4, rollouts_per_example=2,
                           micro_batch_size=4, max_tokens=6, max_seq_len=96, learning_rate=0.01, optim="muon",
                           optim_args="momentum=0.9", save_strategy="steps", save_steps=1, report_to="none", seed=0,
                           use_lora=False,
                           **extra)

    assert config().optim == "muon"
    trainer = vf.RLTrainer(tiny_model_dir, letters_env(), config())
    up = next(p for n, p in trainer.model.named_parameters() if n.endswith("layers.0.mlp.up_proj.weight"))
    before = up.detach().clone()
    trainer.train()
    inner = trainer.optimizer.optimizer
    assert isinstance(inner, MuonWithAdamW) and inner.parts["muon"].param_groups[0]["momentum"] == 0.9
    assert not torch.equal(before, up)
    state = copy.deepcopy(inner.state_dict())
    trainer.close()
    resumed = vf.RLTrainer(tiny_model_dir, letters_env(), config(resume_from_checkpoint=str(tmp_path / "out" /
                                                                                           "checkpoint-1")))
    resumed.train()  # step 2 again, from checkpoint-1's weights and optimizer state
    again = resumed.optimizer.optimizer.state_dict()
    for part in ("muon", "adamw"):
        for key, values in state[part]["state"].items():
            for name, value in values.items():
                assert torch.allclose(value.float(), again[part]["state"][key][name].float(), atol=1e-6), (part, name)
    resumed.close()


@pytest.mark.integration  # trains in-process (~6 s)
def test_vf_sft_trains_with_muon_as_a_prime_rl_sft_config_asks(tiny_model_dir, tmp_path):
    # Before: vf-sft refused a prime-rl SFT config's `[optim] type = "muon"` in one line.
    from verifiers_rl.config.prime_sft import translate
    from verifiers_rl.sft.config import SFTRunConfig
    from verifiers_rl.sft.trainer import run_sft

    raw = {"model": {"name": str(tiny_model_dir)}, "max_steps": 2,
           "data": {"name": "rows.jsonl", "seq_len": 32, "batch_size": 2},
           "optim": {"type": "muon", "lr": 0.01, "mu": 0.9}}
    cfg = SFTRunConfig.model_validate(translate(raw))
    assert (cfg.trainer.optim, cfg.trainer.optim_args, cfg.trainer.adam_beta2) == ("muon",
                                                                                  "momentum=0.9,nesterov=false", 0.95)
    rows = [{"prompt": f"say {w}", "completion": w} for w in ("apple", "river", "stone", "cloud")]
    settings = cfg.trainer.settings().model_copy(update={"output_dir": str(tmp_path / "sft"), "save_steps": 10,
                                                         "logging_steps": 1})
    seen = []
    original = MuonWithAdamW.step

    def step(self, closure=None):
        seen.append(sorted(self.parts))
        return original(self, closure)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(MuonWithAdamW, "step", step)
        out, loss = run_sft(str(tiny_model_dir), rows, settings)
    assert seen == [["adamw", "muon"]] * 2 and loss > 0 and (out / "model.safetensors").exists()
