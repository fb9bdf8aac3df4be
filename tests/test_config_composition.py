"""Config composition on the command line: a file as one section (`--trainer @ trainer.toml`), `--wandb` /
`--no-wandb`, `vf-rl run config.toml` without @, renamed keys (one warning line), `-e VAR[=value]` and
`--wandb-api-key` (values never recorded)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from verifiers_rl.cli import rl as rl_cli
from verifiers_rl.config.loading import ConfigError, apply_env_vars, parse_args, redact_argv
from verifiers_rl.config.schema import resolve_run

BASE_TOML = 'model = "m"\n[env]\nid = "reverse-text"\n[trainer.args]\nmax_steps = 3\nlearning_rate = 0.1\n'


def run_of(tmp_path: Path, *argv: str):
    _, raw, opts = parse_args([*argv, "--output-dir", str(tmp_path / "out")])
    return resolve_run(raw, opts, check_environments=False)


@pytest.fixture(autouse=True)
def _no_wandb_env(monkeypatch):
    # RLConfig exports the W&B project/entity for transformers' callback: keep that inside each test
    for name in ("WANDB_PROJECT", "WANDB_ENTITY", "VF_COMPOSE_X"):
        monkeypatch.delenv(name, raising=False)


def test_a_file_as_one_section_merges_in_file_order(tmp_path):
    (tmp_path / "base.toml").write_text(BASE_TOML)
    (tmp_path / "trainer.toml").write_text("[args]\nmax_steps = 7\nseed = 5\n")
    (tmp_path / "args.toml").write_text("seed = 11\n")
    run = run_of(tmp_path, "@", str(tmp_path / "base.toml"), "--trainer", "@", str(tmp_path / "trainer.toml"))
    assert (run.args.max_steps, run.args.seed, run.args.learning_rate) == (7, 5, 0.1)  # base's lr kept
    run = run_of(tmp_path, "@", str(tmp_path / "base.toml"), "--trainer", f"@{tmp_path / 'trainer.toml'}",
                 "--trainer.args", "@", str(tmp_path / "args.toml"), "--trainer.args.max-steps", "9")
    assert (run.args.max_steps, run.args.seed) == (9, 11)  # later file, then the command line, win
    assert [str(f) for f in run.config_files][1:] == [f"--trainer @ {tmp_path / 'trainer.toml'}",
                                                      f"--trainer.args @ {tmp_path / 'args.toml'}"]


def test_wandb_flags_in_either_place(tmp_path):
    (tmp_path / "base.toml").write_text(BASE_TOML + 'wandb = { project = "p" }\n')
    run = run_of(tmp_path, "@", str(tmp_path / "base.toml"))
    assert run.args.wandb == {"project": "p"} and "wandb" in run.args.report_to
    off = run_of(tmp_path, "@", str(tmp_path / "base.toml"), "--no-wandb")
    assert off.args.wandb is None and off.args.report_to in ([], ["none"], "none")
    (tmp_path / "plain.toml").write_text(BASE_TOML)
    on = run_of(tmp_path, "@", str(tmp_path / "plain.toml"), "--wandb")
    assert on.args.wandb == {} and "wandb" in on.args.report_to
    named = run_of(tmp_path, "@", str(tmp_path / "plain.toml"), "--wandb.project", "q")
    assert named.args.wandb == {"project": "q"}
    bare = run_of(tmp_path, "@", str(tmp_path / "plain.toml"), "--trainer.args.wandb")
    assert bare.args.wandb == {}
    hosted = tmp_path / "hosted.toml"
    hosted.write_text('model = "m"\nmax_steps = 2\n[[env]]\nid = "reverse-text"\n')
    assert run_of(tmp_path, "@", str(hosted), "--wandb").args.wandb == {}


def test_vf_rl_run_takes_a_config_without_at(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(BASE_TOML)
    assert rl_cli.main(["run", str(cfg), "--dry-run", "--output-dir", str(tmp_path / "o")]) == 0
    assert rl_cli.main([str(cfg), "--dry-run", "--output-dir", str(tmp_path / "o2")]) == 0
    assert "resolved config written to" in capsys.readouterr().out


def test_a_switch_before_e_or_a_config_file_takes_no_value(tmp_path, monkeypatch, capsys):
    # Before: `--dry-run -e VAR=1` made "-e" dry_run's value (error: unexpected argument 'VAR=1'), `--wandb -e ...`
    # W&B's, and `vf-rl run --detach c.toml` read detach = "c.toml" (error: no config file).
    cfg = tmp_path / "c.toml"
    cfg.write_text(BASE_TOML)
    monkeypatch.delenv("VF_SWITCH_X", raising=False)
    _, raw, opts = parse_args(["@", str(cfg), "--dry-run", "-e", "VF_SWITCH_X=1", "--wandb", "-e", "WANDB_MODE=off",
                               "--trainer.args.use-lora", "--wandb-api-key", "k"])
    assert opts["dry_run"] is True and opts["env_vars"] == ["VF_SWITCH_X=1", "WANDB_MODE=off", "WANDB_API_KEY=k"]
    assert raw["wandb"] is True and raw["trainer"]["args"]["use_lora"] is True
    files, _, opts = parse_args(["--detach", str(cfg), "--dry-run", "false", "--clean-output-dir", "true"])
    assert files == [cfg] and opts == {**opts, "detach": True, "dry_run": False, "clean_output_dir": True}
    _, raw, _ = parse_args(["@", str(cfg), "--trainer.args.temperature", "-1"])  # a negative value is still one
    assert raw["trainer"]["args"]["temperature"] == -1
    assert rl_cli.main(["run", "--dry-run", str(cfg), "-e", "VF_SWITCH_X=1", "--output-dir", str(tmp_path / "o")]) == 0
    assert "resolved config written to" in capsys.readouterr().out


def test_a_renamed_key_warns_once_and_takes_the_new_name(tmp_path, capsys):
    (tmp_path / "c.toml").write_text(BASE_TOML + "no_cuda = true\n")
    run = run_of(tmp_path, "@", str(tmp_path / "c.toml"))
    assert run.args.use_cpu is True
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["warning: trainer.args.no_cuda is deprecated: it is now trainer.args.use_cpu (set that instead)"]
    (tmp_path / "both.toml").write_text(BASE_TOML + "no_cuda = true\nuse_cpu = true\n")
    with pytest.raises(ConfigError, match="^trainer.args.no_cuda: renamed trainer.args.use_cpu, which is set too"):
        run_of(tmp_path, "@", str(tmp_path / "both.toml"))


def test_env_vars_from_the_command_line_are_set_and_never_recorded(tmp_path, monkeypatch):
    env: dict[str, str] = {"HOME_SET": "1"}
    assert apply_env_vars(["A=1", "HOME_SET", "B=x=y"], env) == ["A", "HOME_SET", "B"]
    assert env == {"HOME_SET": "1", "A": "1", "B": "x=y"}
    with pytest.raises(ConfigError, match="^-e MISSING: not set in this environment"):
        apply_env_vars(["MISSING"], env)
    with pytest.raises(ConfigError, match="not a variable name"):
        apply_env_vars(["1X=2"], env)
    assert redact_argv(["@", "c.toml", "-e", "TOKEN=abc", "-e", "HOME", "--wandb-api-key", "k"]) == \
        ["@", "c.toml", "-e", "TOKEN=***", "-e", "HOME", "--wandb-api-key", "***"]
    _, _, opts = parse_args(["-e", "VF_COMPOSE_X=7", "--wandb-api-key", "secret"])
    assert opts["env_vars"] == ["VF_COMPOSE_X=7", "WANDB_API_KEY=secret"]
    monkeypatch.setenv("WANDB_API_KEY", "before")  # restored after the test
    cfg = tmp_path / "c.toml"
    cfg.write_text(BASE_TOML)
    out = tmp_path / "o"
    assert rl_cli.main(["@", str(cfg), "-e", "VF_COMPOSE_X=7", "--wandb-api-key", "secret", "--dry-run",
                        "--output-dir", str(out)]) == 0
    import os

    assert os.environ["VF_COMPOSE_X"] == "7" and os.environ["WANDB_API_KEY"] == "secret"
    assert "secret" not in (out / "configs" / "rl.toml").read_text()
    assert not json.dumps(sorted(p.name for p in out.rglob("*"))).count("secret")


def test_wandb_on_without_a_key_is_one_line_before_launch(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """Checked before anything starts (wandb's own error comes after the model and the envs load); a key from
    -e / --wandb-api-key, an env_file or W&B's offline mode passes the check."""
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_IDENTITY_TOKEN_FILE", "NETRC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no `wandb login` netrc
    cfg = tmp_path / "c.toml"
    cfg.write_text(BASE_TOML.replace('model = "m"', f'model = "{tiny_model_dir}"'))
    with pytest.raises(SystemExit) as e:
        rl_cli.main(["@", str(cfg), "--wandb.project", "p", "--output-dir", str(tmp_path / "o")])
    assert e.value.code == 1
    assert capsys.readouterr().err.startswith("error: trainer.args.wandb: W&B logging is on, but no W&B API key is "
                                              "set here")
    from verifiers_rl.cli.rl import _check_wandb

    run = run_of(tmp_path, "@", str(cfg), "--wandb.project", "p")
    monkeypatch.setenv("WANDB_MODE", "offline")
    _check_wandb(run)  # passes: nothing raised


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_wandb_online_with_its_server_unreachable_is_one_line_before_launch(tiny_model_dir, tmp_path, monkeypatch,
                                                                              capsys):
    """With a key, wandb.init retries for some 100 s (then raises) when its server cannot be reached: probed
    once, within seconds, before anything starts; the server a `wandb login --host` wrote is the one probed."""
    from verifiers_rl.cli.rl import _check_wandb
    from verifiers_rl.network import wandb_url

    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    url = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("WANDB_BASE_URL", url)
    cfg = tmp_path / "c.toml"
    cfg.write_text(BASE_TOML.replace('model = "m"', f'model = "{tiny_model_dir}"'))
    with pytest.raises(SystemExit) as e:
        rl_cli.main(["@", str(cfg), "--wandb.project", "p", "--output-dir", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 1 and len(err) == 1 and not (tmp_path / "o").exists()
    assert err[0] == (f"error: trainer.args.wandb: W&B logging is on, but W&B's server {url} cannot be reached "
                      "(connection refused); log offline with -e WANDB_MODE=offline (`wandb sync` later), or turn it "
                      "off with --no-wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    _check_wandb(run_of(tmp_path, "@", str(cfg), "--wandb.project", "p"))  # offline: nothing to reach
    monkeypatch.delenv("WANDB_BASE_URL")
    (tmp_path / "wandb-config").mkdir()
    (tmp_path / "wandb-config" / "settings").write_text("[default]\nbase_url = https://wandb.example.org/\n")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    assert wandb_url() == "https://wandb.example.org"


def test_push_to_hub_without_the_hub_is_one_line_before_launch(tiny_model_dir, tmp_path, monkeypatch, capsys):
    hub = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("HF_ENDPOINT", hub)
    for name in ("HF_HUB_OFFLINE", "VF_HUB_UNREACHABLE"):  # vf-rl sets both when the hub is out of reach
        monkeypatch.delenv(name, raising=False)
    cfg = tmp_path / "c.toml"
    cfg.write_text(BASE_TOML.replace('model = "m"', f'model = "{tiny_model_dir}"'))
    with pytest.raises(SystemExit) as e:
        rl_cli.main(["@", str(cfg), "--trainer.args.push-to-hub", "true", "--output-dir", str(tmp_path / "o")])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert e.value.code == 1 and not (tmp_path / "o").exists()
    assert err == [f"error: trainer.args.push_to_hub=True, but the model hub {hub} cannot be reached (connection "
                   "refused); set push_to_hub=False and upload the output dir later (`hf upload`), or train where the "
                   "hub can be reached"]


def test_the_configs_verifiers_runtime_is_the_one_vf_rls_environment_check_uses(tmp_path, monkeypatch, capsys):
    # Before: vf-rl's own check loaded the environment under $VF_VERIFIERS_RUNTIME only, so verifiers_runtime = "real"
    # without the real package passed --dry-run, and a run wrote its dir and started the trainer, which refused it.
    from verifiers_rl.verifiers_runtime import SETTING, RuntimeSettingError, resolve_runtime

    monkeypatch.delenv(SETTING, raising=False)
    # an environment of its own: the runtime is decided where a process first imports an environment's module
    env_dir = tmp_path / "runtime_probe_env"
    env_dir.mkdir()
    (env_dir / "runtime_probe_env.py").write_text("def load_environment(**kwargs):\n    raise NotImplementedError\n")
    cfg = tmp_path / "c.toml"
    cfg.write_text(BASE_TOML.replace('id = "reverse-text"', f'id = "runtime_probe_env"\npath = "{env_dir}"'))
    try:
        resolve_runtime("real")
        return  # the real package is installed here: "real" is a valid choice (tests/test_verifiers_runtime.py)
    except RuntimeSettingError:
        pass
    out = tmp_path / "o"
    with pytest.raises(SystemExit) as e:
        rl_cli.main(["@", str(cfg), "--verifiers-runtime", "real", "--output-dir", str(out)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and not out.exists(), err[-2000:]
    assert err.count("\n") == 1 and "VF_VERIFIERS_RUNTIME=real but the real verifiers package is not installed" in err
    assert SETTING not in os.environ  # the check left the process environment as it found it
    monkeypatch.setenv(SETTING, "real")  # the config's choice wins over the variable, as in the trainer
    assert rl_cli.main(["@", str(cfg), "--verifiers-runtime", "ours", "--dry-run", "--output-dir", str(out)]) == 0
    assert os.environ[SETTING] == "real"
