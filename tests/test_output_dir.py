"""A reused output dir: what counts as an earlier run, and what --clean-output-dir keeps (the run's inputs)."""

from __future__ import annotations

from types import SimpleNamespace

from verifiers_rl.launching.output_dir import check_output_dir, used_by


def _earlier_run(out):
    (out / "checkpoint-2").mkdir(parents=True)
    (out / "checkpoint-4").mkdir()
    (out / "metrics.jsonl").write_text('{"step": 4}\n')
    (out / "logs").mkdir()
    (out / "warmup").mkdir()
    (out / "warmup" / "model.safetensors").write_bytes(b"w")


def test_an_earlier_run_is_refused_unless_resumed(tmp_path):
    cfg = SimpleNamespace(model=None, tiny_model=None, warmup=None)
    assert used_by(tmp_path / "absent") is None
    (tmp_path / "fresh" / "configs").mkdir(parents=True)  # a dry run's resolved config alone: not a run
    assert check_output_dir(str(tmp_path / "fresh"), cfg, resume=None, clean_requested=False) is None
    out = tmp_path / "run"
    _earlier_run(out)
    assert used_by(out) == "metrics.jsonl and 2 checkpoints"
    line = check_output_dir(str(out), cfg, resume=None, clean_requested=False)
    assert line.startswith(f"output_dir: {out} holds an earlier run (metrics.jsonl and 2 checkpoints); pass "
                           "--clean-output-dir") and "\n" not in line
    assert check_output_dir(str(out), cfg, resume=True, clean_requested=False) is None
    # 'auto' (prime-rl's empty [resume]) resumes only what is there: leftovers with no complete checkpoint are refused
    assert check_output_dir(str(out), cfg, resume="auto", clean_requested=False).startswith("output_dir: ")
    (out / "checkpoint-4" / "trainer_state.json").write_text("{}")
    assert check_output_dir(str(out), cfg, resume="auto", clean_requested=False) is None
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-2", "checkpoint-4", "logs", "metrics.jsonl",
                                                     "warmup"]


def test_clean_output_dir_clears_the_run_and_keeps_its_inputs(tmp_path, capsys):
    out = tmp_path / "run"
    _earlier_run(out)
    cfg = SimpleNamespace(model=None, tiny_model=None, warmup=SimpleNamespace(output_dir=str(out / "warmup")))
    assert check_output_dir(str(out), cfg, resume=None, clean_requested=True) is None
    assert [p.name for p in out.iterdir()] == ["warmup"] and (out / "warmup" / "model.safetensors").exists()
    assert "--clean-output-dir: cleared" in capsys.readouterr().out
    assert used_by(out) is None
