"""vf-rl's own process checks `[trainer.args]` without importing transformers: RLConfig's own fields and rules are
`RLFields` (no transformers), transformers' fields are read from its source (config/hf_fields.py). Pinned here
against the imported class on the installed transformers, and end to end: the check imports no transformers, the
config it writes builds the same RLConfig, and transformers' own checks still end a run in one line (in the
trainer, before it builds anything)."""

from __future__ import annotations

import dataclasses
import enum
import json
import subprocess
import sys
import typing
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "configs" / "vf-rl" / "quickstart.toml"
# A value of each kind TOML gives, and the enum values transformers' fields take
SAMPLES = [1, 1.5, True, False, "x", "steps", "no", "linear", "adamw_torch", "every_save", "underflow_overflow",
           ["a"], {"a": 1}, None]


def test_transformers_fields_read_from_its_source_are_the_imported_classs():
    from transformers import TrainingArguments

    from verifiers_rl.config.hf_fields import UNREAD, training_args_fields
    from verifiers_rl.value_check import describe_type, type_error

    source = training_args_fields()
    assert source is not None, "transformers' training_args.py no longer reads: vf-rl's process imports it instead"
    hints = typing.get_type_hints(TrainingArguments)
    live = [f for f in dataclasses.fields(TrainingArguments) if f.init]
    assert [s.name for s in source] == [f.name for f in live]
    unread = []
    for f, s in zip(live, source):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if s.default is UNREAD:
            unread.append(f.name)
        else:
            assert s.default == getattr(default, "value", default), f.name
        assert s.help == str(f.metadata.get("help", "")), f.name
        assert describe_type(s.type) == describe_type(hints[f.name]), f.name
        for value in SAMPLES:
            assert type_error(value, s.type) == type_error(value, hints[f.name]), (f.name, value)
    assert unread == ["optim"]  # its default depends on the torch version (a branch in the class body)


def test_the_source_reader_rebuilds_an_enum_and_gives_up_on_what_it_does_not_read(tmp_path, monkeypatch):
    """A stand-in transformers package: an enum imported from a sibling module is rebuilt with its values; a base
    class (fields this reader would not see) makes it say None, so the caller imports the class."""
    from verifiers_rl.config import hf_fields

    pkg = tmp_path / "transformers"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "utils.py").write_text("from enum import Enum\nclass Mode(str, Enum):\n    A = 'a'\n    B = 'b'\n")
    fields = "".join(f"    f{i}: int = field(default={i}, metadata={{'help': 'n' + 'o. {i}'}})\n" for i in range(20))
    body = ("from dataclasses import dataclass, field\nfrom .utils import Mode\n\n@dataclass\nclass TrainingArguments:"
            "\n    mode: Mode | str = field(default=Mode.B)\n" + fields)
    (pkg / "training_args.py").write_text(body)
    monkeypatch.setattr(hf_fields, "_package_dir", lambda: pkg)
    hf_fields.training_args_fields.cache_clear()
    try:
        got = hf_fields.training_args_fields()
        assert got is not None and got[0].name == "mode" and got[0].default == "b" and got[1].help == "no. 0"
        mode = typing.get_args(got[0].type)[0]
        assert issubclass(mode, enum.Enum) and [m.value for m in mode] == ["a", "b"]
        (pkg / "training_args.py").write_text(body.replace("TrainingArguments:", "TrainingArguments(Base):"))
        hf_fields._tree.cache_clear()
        hf_fields.training_args_fields.cache_clear()
        assert hf_fields.training_args_fields() is None
    finally:
        hf_fields._tree.cache_clear()
        hf_fields.training_args_fields.cache_clear()


def test_the_preview_keeps_rlconfigs_own_checks_and_values(tmp_path):
    from verifiers_rl.config.loading import ConfigError
    from verifiers_rl.config.resolution import build_rl_config

    kwargs = dict(output_dir=str(tmp_path / "run"), batch_size=8, rollouts_per_example=4, micro_batch_size=4,
                  max_seq_len=128, weight_decay=0.1, loss={"type": "dapo"})
    full, preview = build_rl_config(kwargs), build_rl_config(kwargs, preview=True)
    for name in ("run_name", "max_prompt_len", "per_device_train_batch_size", "weight_decay", "loss", "lora_rank"):
        assert getattr(preview, name) == getattr(full, name), name
    for bad, key in ((dict(batch_size=7), "batch_size"), (dict(top_p=0), "top_p"),
                     (dict(loss={"type": "nope"}), "loss")):
        with pytest.raises(ConfigError) as full_error:
            build_rl_config({**kwargs, **bad})
        with pytest.raises(ConfigError) as preview_error:
            build_rl_config({**kwargs, **bad}, preview=True)
        assert str(preview_error.value) == str(full_error.value) and str(full_error.value).startswith(
            f"trainer.args.{key}")


_CHECK = """
import sys
from verifiers_rl.config.schema import load_run, write_resolved
run, _ = load_run(["@", sys.argv[1], "--output-dir", sys.argv[2]], preview=True, check_environments=False)
path = write_resolved(run)
print(path)
print(sorted(m for m in ("transformers", "peft", "trl", "torch") if m in sys.modules))
"""


@pytest.mark.integration  # a fresh interpreter: nothing imported by another test
@pytest.mark.parametrize("config", sorted((REPO / "configs" / "vf-rl").glob("*.toml")), ids=lambda p: p.stem)
def test_vf_rls_check_imports_no_transformers_or_torch_and_its_config_builds_the_same_rlconfig(tmp_path, config):
    from verifiers_rl.config.schema import load_run, write_resolved

    r = subprocess.run([sys.executable, "-c", _CHECK, str(config), str(tmp_path / "rl")], capture_output=True,
                       text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    path, imported = r.stdout.strip().splitlines()[-2:]
    assert imported == "[]"
    written, _ = load_run(["@", path], check_environments=False)  # what the trainer builds from what vf-rl wrote
    # ... and from the config written by a check that built the RLConfig itself
    direct, _ = load_run(["@", str(config), "--output-dir", str(tmp_path / "rl")], check_environments=False)
    direct, _ = load_run(["@", str(write_resolved(direct, tmp_path / "direct"))], check_environments=False)
    assert [f.name for f in dataclasses.fields(written.args) if getattr(written.args, f.name)
            != getattr(direct.args, f.name)] == []


@pytest.mark.integration  # runs vf-rl
def test_a_transformers_check_still_ends_the_run_in_one_line_before_the_trainer_builds_anything(tmp_path):
    # vf-rl's main as its console script calls it, then what its own process imported (the launch, the plan and the
    # GPU count included): no torch, no transformers; the trainer process imports them
    script = ("import sys; from verifiers_rl.cli.rl import main; rc = main(sys.argv[1:]); "
              "print('vf-rl imported:', sorted(m for m in ('torch', 'transformers') if m in sys.modules)); sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", script, "@", str(QUICKSTART), "--tiny_model.path", str(tmp_path / "tiny"),
                        "--no-warmup", "--no-eval", "--trainer.args.logging-steps", "0",
                        "--output-dir", str(tmp_path / "rl")], capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: trainer.args: logging strategy"), out  # transformers'
    assert "requires non-zero --logging_steps" in errors[0], out
    assert not (tmp_path / "tiny").exists()  # the trainer stopped at its config: no model built
    assert "vf-rl imported: []" in r.stdout, out[-3000:]


def test_report_to_names_read_from_its_source_are_the_integrations_transformers_has():
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    from verifiers_rl.config.hf_fields import reporting_integrations

    assert reporting_integrations() == tuple(INTEGRATION_TO_CALLBACK)


def _missing_integration() -> str:
    """An integration whose package this venv lacks (tensorboard here), for the refusal below."""
    import importlib.util

    from verifiers_rl.config.hf_fields import _INTEGRATION_MODULES

    missing = [n for n, mods in _INTEGRATION_MODULES.items() if all(importlib.util.find_spec(m) is None for m in mods)]
    if not missing:
        pytest.skip("every reporting integration's package is installed here")
    return missing[0]


@pytest.mark.parametrize("value, expected", [
    ("wandbb", "error: trainer.args.report_to: 'wandbb' is not an integration transformers reports to (did you mean "
               "'wandb'?); one of 'none', 'all', "),
    (None, "error: trainer.args.report_to: '{name}' needs the "),
])
def test_report_to_that_transformers_trainer_refuses_stops_vf_rl_before_anything_launches(value, expected, tmp_path,
                                                                                          capsys):
    # Before: --dry-run passed, and the trainer process built the tiny model and the environment, then transformers'
    # Trainer raised (ValueError: ... is not supported; RuntimeError: TensorBoardCallback requires tensorboard)
    # with a traceback.
    from verifiers_rl.cli import rl as rl_cli

    name = value or _missing_integration()
    with pytest.raises(SystemExit) as e:
        rl_cli.main(["@", str(QUICKSTART), "--tiny_model.path", str(tmp_path / "tiny"), "--no-warmup", "--no-eval",
                     "--trainer.args.report-to", json.dumps([name]), "--output-dir", str(tmp_path / "rl")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(expected.format(name=name)), err
    assert not (tmp_path / "tiny").exists() and not (tmp_path / "rl").exists()
