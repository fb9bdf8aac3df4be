"""The cyclic garbage collector paused while a command imports and loads (verifiers_rl/startup_gc.py), on again
for what it runs: vf-eval's rollouts, the SFT steps."""

from __future__ import annotations

import gc

import pytest

from test_vf_eval import vf_eval_here
from verifiers_rl.startup_gc import paused_gc


@pytest.fixture
def unfrozen():
    """This process's heap as a command's is: nothing frozen (conftest freezes what the test modules imported; put
    back afterwards)."""
    gc.unfreeze()
    yield
    gc.collect()
    gc.freeze()


@pytest.fixture
def collections():
    """The collections that end while the test runs, in order: (generation, objects collected)."""
    seen: list[tuple[int, int]] = []

    def count(phase, info):
        if phase == "stop":
            seen.append((info["generation"], info["collected"]))

    gc.callbacks.append(count)
    yield seen
    gc.callbacks.remove(count)


def test_paused_gc_turns_the_collector_off_inside_and_collects_what_it_made_when_the_block_ends(collections):
    assert gc.isenabled()
    with paused_gc():
        del collections[:]  # an automatic collection just before the block is not the block's
        assert not gc.isenabled()
        with paused_gc():  # nested: the outer block decides
            assert not gc.isenabled()
        junk = [[] for _ in range(5000)]  # more new objects than a generation-0 collection waits for
        for x in junk:
            x.append(x)  # cycles: garbage once the list goes
        del junk, x
        assert not gc.isenabled() and collections == []
    assert gc.isenabled()
    # one collection of the young generations (not the whole heap), and the cycles went in it
    assert collections[0][0] == 1 and collections[0][1] >= 5000, collections


def test_paused_gc_restores_the_collector_when_the_block_raises_and_leaves_it_off_if_it_was(collections):
    with pytest.raises(SystemExit), paused_gc():
        del collections[:]  # an automatic collection just before the block is not the block's
        raise SystemExit(2)  # a command's one-line failure while it loads
    assert gc.isenabled() and collections[0][0] == 1
    gc.disable()
    try:
        del collections[:]
        with paused_gc():
            pass
        assert not gc.isenabled() and collections == []  # a process that runs without it: untouched
    finally:
        gc.enable()


def test_vf_eval_loads_with_the_collector_paused_and_runs_its_rollouts_with_it_on(tiny_model_dir, tmp_path,
                                                                                monkeypatch, capsys):
    import verifiers_rl.cli.eval as vf_eval

    seen: dict[str, bool] = {}
    load, run = vf_eval._load, vf_eval._run

    def loading(*args):
        seen["load"] = gc.isenabled()
        return load(*args)

    async def running(*args):
        seen["rollouts"] = gc.isenabled()
        return await run(*args)

    monkeypatch.setattr(vf_eval, "_load", loading)
    monkeypatch.setattr(vf_eval, "_run", running)
    code, stderr = vf_eval_here(monkeypatch, capsys, "reverse-text", "-m", tiny_model_dir, "-n", 2, "-r", 1, "-t", 8)
    assert code == 0, stderr[-2000:]
    assert seen == {"load": False, "rollouts": True} and gc.isenabled()


def test_sft_loads_with_the_collector_paused_and_trains_with_it_on(tiny_model_dir, tmp_path, monkeypatch, unfrozen):
    import verifiers_rl.sft.trainer as sft

    seen: dict[str, bool] = {}
    build = sft._sft_trainer

    def building(*args):
        seen["load"] = gc.isenabled()
        trainer = build(*args)
        train = trainer[0].train

        def training(*a, **kw):
            seen["train"] = gc.isenabled()
            seen["frozen"] = gc.get_freeze_count() > 0  # what was loaded stays out of the loop's collections
            return train(*a, **kw)

        trainer[0].train = training
        return trainer

    monkeypatch.setattr(sft, "_sft_trainer", building)
    rows = [{"prompt": [{"role": "user", "content": f"say {w}"}], "completion": [{"role": "assistant", "content": w}]}
            for w in ("apple", "river", "sky", "tea")]
    settings = sft.SFTSettings(output_dir=str(tmp_path / "sft"), max_steps=2, batch_size=2, learning_rate=1e-3,
                               logging_steps=1, save_steps=100)
    out, loss = sft.run_sft(str(tiny_model_dir), rows, settings, header=False)
    assert seen == {"load": False, "train": True, "frozen": True} and gc.isenabled()
    assert gc.get_freeze_count() == 0  # put back when training ends
    assert (out / "model.safetensors").is_file() and loss > 0


def test_rl_training_on_the_cpu_leaves_what_was_loaded_out_of_its_collections(tiny_model_dir, tmp_path, unfrozen):
    from transformers import TrainerCallback

    import verifiers_rl as vf
    from test_trainer import make_config, make_env

    frozen: list[int] = []

    class Watch(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            frozen.append(gc.get_freeze_count())

    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path / "rl", max_steps=1),
                           callbacks=[Watch()])
    try:
        trainer.train()
    finally:
        trainer.close()
    assert len(frozen) == 1 and frozen[0] > 10_000, frozen  # torch's, transformers' and the model's objects
    assert gc.get_freeze_count() == 0
    gc.freeze()  # a process that froze its heap itself keeps it frozen through training
    trainer = vf.RLTrainer(str(tiny_model_dir), make_env(), make_config(tmp_path / "again", max_steps=1))
    try:
        trainer.train()
    finally:
        trainer.close()
    assert gc.get_freeze_count() > 0  # not put back (0): what the trainer freed has left it, nothing more
