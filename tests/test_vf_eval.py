"""vf-eval end to end: real subprocesses (the six examples: vf-eval's main in the test's process), the offline tiny
model and the local engine."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENVS = ["reverse-text", "alphabet-sort", "gsm8k", "math-python", "wiki-search", "wordle"]


def vf_eval(*args, cwd=REPO, timeout=300):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "verifiers_rl.cli.eval", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def vf_eval_here(monkeypatch, capsys, *args) -> tuple[int, str]:
    """vf-eval's `main` in this process (the command's own process: the other tests here, and the installed
    wheel's in test_packaging): (exit code, stderr); a config error's `SystemExit` (one line, code 2) counts as the
    command's exit."""
    from verifiers_rl.cli.eval import main
    from verifiers_rl.verbosity import quiet_bars_begin, quiet_bars_end

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(REPO)
    bars = quiet_bars_begin()  # vf-eval turns transformers' bars off for its process: this one is the session's
    try:
        code = main([str(a) for a in args])
    except SystemExit as e:
        code = e.code
    finally:
        quiet_bars_end(bars)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("env_id", ENVS)
def test_every_example_environment_evaluates_offline(env_id, tiny_model_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "f.jsonl"
    code, stderr = vf_eval_here(monkeypatch, capsys, env_id, "-m", tiny_model_dir, "-n", 4, "-r", 2, "-t", 24,
                                "--output", out)
    assert code == 0, stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 8
    for row in rows:
        assert isinstance(row["reward"], float) and 0.0 <= row["reward"] <= 1.0
        assert {"prompt", "completion", "answer", "metrics", "error"} <= set(row)
    # A random tiny model sometimes samples EOS first: verifiers records that as an empty-response error that ends
    # the rollout (scored on the turns before it). Every other rollout has the assistant's reply.
    replied = [row for row in rows if not row["error"]]
    for row in rows:
        if row["error"]:
            assert "Model returned no" in row["error"]
    assert len(replied) >= 4
    for row in replied:
        assert row["completion"] and row["completion"][0]["role"] == "assistant"
    assert "reward" in stderr  # the summary table


def test_unknown_env_is_one_line_listing_what_exists(tiny_model_dir):
    r = vf_eval("no-such-env", "-m", tiny_model_dir)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "'no-such-env' not found" in lines[0] and "reverse-text" in lines[0]


def test_bad_env_args_are_one_line(tiny_model_dir):
    r = vf_eval("reverse-text", "-m", tiny_model_dir, "--env-args", '{"num_train_exampels": 3}')
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "did you mean 'num_train_examples'" in r.stderr


def test_sampling_args_reach_the_engine_and_bad_ones_are_one_line(tiny_model_dir, tmp_path):
    """-S as verifiers' vf-eval: a JSON object over -t/-T; vLLM's own keys (min_tokens) are honoured."""
    out = tmp_path / "s.jsonl"
    r = vf_eval("reverse-text", "-m", tiny_model_dir, "-n", 3, "-r", 2, "-t", 4, "-S", '{"max_tokens": 24, '
                '"min_tokens": 24}', "--output", out)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["completion_tokens"] for row in rows] == [24] * 6  # no early eos, -t overridden
    r = vf_eval("reverse-text", "-m", tiny_model_dir, "-S", '["min_tokens"]')
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "--sampling-args must be a JSON object" in r.stderr


@pytest.mark.parametrize("flags, line", [(["-r", 0], "-r/--rollouts-per-example must be >= 1 (got 0)"),
                                         (["-t", 0], "-t/--max-tokens must be >= 1 (got 0)"),
                                         (["-T", -1], "-T/--temperature must be >= 0 (got -1.0)")])
def test_out_of_range_flags_are_one_line_before_loading_anything(flags, line):
    r = vf_eval("reverse-text", "-m", "/no/such/model", *flags)
    assert r.returncode == 2 and r.stderr.strip() == f"error: {line}", r.stderr[-2000:]


def test_an_output_that_cannot_be_written_is_one_line_before_the_rollouts(tiny_model_dir, tmp_path, monkeypatch,
                                                                          capsys):
    # verifiers' vf-eval takes -o as an output directory; ours writes one .jsonl file. Before: a directory there ran
    # every rollout, then ended in IsADirectoryError's traceback and the results were lost.
    (tmp_path / "evals").mkdir()
    (tmp_path / "a-file").write_text("")
    for out, line in [(tmp_path / "evals", f"{tmp_path / 'evals'} is a directory; give the .jsonl file to write, "
                                           f"e.g. {tmp_path / 'evals' / 'results.jsonl'}"),
                      (tmp_path / "a-file" / "r.jsonl", f"{tmp_path / 'a-file'} is a file, not a directory")]:
        code, stderr = vf_eval_here(monkeypatch, capsys, "reverse-text", "-m", tiny_model_dir, "-n", 2, "-r", 2,
                                    "-o", out)
        assert code == 2 and stderr.startswith(f"error: -o/--output: {line}"), stderr[-2000:]
        assert stderr.count("\n") == 1 and "rollouts" not in stderr  # nothing was evaluated
    assert list((tmp_path / "evals").iterdir()) == []


def test_environment_code_failing_to_load_is_one_line(tiny_model_dir, tmp_path):
    """A missing dependency of the environment, and its own load_environment() raising (e.g. a download that
    fails offline), each end in one line naming the environment and what to do."""
    for name, code in {"needs_dep": "import surely_not_installed_pkg\n",
                       "fetches": "def load_environment():\n    raise ConnectionError('could not reach example.org')\n"}.items():
        (tmp_path / "environments" / name).mkdir(parents=True)
        (tmp_path / "environments" / name / f"{name}.py").write_text(code)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    for env_id, expected in [("needs-dep", ["needs the module 'surely_not_installed_pkg'", "vfrl-install"]),
                             ("fetches", ["load_environment() failed: ConnectionError: could not reach example.org"])]:
        r = subprocess.run([sys.executable, "-m", "verifiers_rl.cli.eval", env_id, "-m", str(tiny_model_dir)],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and all(x in lines[0] for x in expected), r.stderr[-2000:]


CLASSIC_ENV = '''
import verifiers as vf  # unedited: this package answers `import verifiers`
from datasets import Dataset


def load_environment(**kwargs):
    dataset = Dataset.from_dict({
        "question": ["Say hello.", "Say goodbye.", "Say yes.", "Say no."],
        "answer": ["hello", "goodbye", "yes", "no"],
    })
    parser = vf.XMLParser(["think", "answer"], answer_field="answer")

    def correct_answer_reward_func(completion, answer, **kwargs):
        response = parser.parse_answer(completion) or ""
        return 1.0 if response.strip() == answer else 0.0

    def flaky_length_reward_func(completion):
        text = completion[-1]["content"]
        if len(text) % 2 == 0:
            raise ValueError("even length")
        return min(1.0, len(text) / 100)

    rubric = vf.Rubric(funcs=[correct_answer_reward_func, flaky_length_reward_func], weights=[1.0, 0.2])
    return vf.SingleTurnEnv(dataset=dataset, system_prompt="Think, then answer in <answer> tags.",
                            parser=parser, rubric=rubric, **kwargs)
'''


def test_classic_verifiers_environment_runs_unchanged_and_raising_reward_is_counted(tiny_model_dir, tmp_path):
    pkg = tmp_path / "environments" / "classic_env"
    pkg.mkdir(parents=True)
    (pkg / "classic_env.py").write_text(CLASSIC_ENV)
    # `import verifiers` is answered by this package's runtime: the environment's source is not edited.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VF_VERIFIERS_RUNTIME": "ours"}
    out = tmp_path / "rows.jsonl"
    r = subprocess.run([sys.executable, "-m", "verifiers_rl.cli.eval", "someone/classic-env", "-m",
                        str(tiny_model_dir), "-n", "4", "-r", "4", "-t", "16", "--output", str(out)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 16
    assert all(set(row["metrics"]) == {"correct_answer_reward_func", "flaky_length_reward_func", "num_turns"}
               for row in rows)  # verifiers' multi-turn monitor adds num_turns
    assert "verifiers runtime: ours" in r.stderr
    # a rollout that itself failed (an empty reply is verifiers' EmptyModelResponseError) is scored too, and
    # this reward function then fails on its empty completion: both are counted
    errored = [row for row in rows if row["reward_errors"] and not row["error"]]
    assert errored  # 16 random-length replies: some have even length
    for row in errored:
        assert row["metrics"]["flaky_length_reward_func"] == 0.0
        assert "ValueError: even length" in row["reward_errors"]["flaky_length_reward_func"]
    assert "errors/reward_funcs" in r.stderr
    n_errors = sum(1 for row in rows if row["reward_errors"])
    assert f"{n_errors}" in r.stderr.split("errors/reward_funcs")[1].split("\n")[0]


BROKEN_ENV = """
import verifiers as vf


class Broken(vf.SingleTurnEnv):
    async def rollout(self, *args, **kwargs):
        raise RuntimeError("while calling the tool server\\nConnectionRefusedError: tool server is down")


def zero(completion):
    return 0.0


def load_environment(**kwargs):
    return Broken(dataset=[{"question": w, "answer": w} for w in ("a", "b", "c")], rubric=vf.Rubric(funcs=[zero]))
"""


def test_an_eval_whose_every_rollout_errored_exits_non_zero_naming_the_errors(tiny_model_dir, tmp_path):
    (tmp_path / "environments" / "broken").mkdir(parents=True)
    (tmp_path / "environments" / "broken" / "broken.py").write_text(BROKEN_ENV)
    r = vf_eval("broken", "-m", tiny_model_dir, "-n", "2", "-r", "2", cwd=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out[-2000:]
    assert "4 of 4 rollouts errored (first: ConnectionRefusedError: tool server is down)" in out
    assert "error: every rollout errored: nothing was measured" in out


def test_an_eval_whose_prompts_fill_the_context_says_so_and_fails(tmp_path, monkeypatch, capsys):
    from verifiers_rl.models.tiny import build_tiny_model

    short = build_tiny_model(tmp_path / "short", max_position_embeddings=48)  # reverse-text's prompts are longer
    code, stderr = vf_eval_here(monkeypatch, capsys, "reverse-text", "-m", short, "-n", 2, "-r", 1)
    assert code == 1, stderr[-2000:]
    assert ("error: 2 of 2 rollouts had no room for a reply (the prompt fills the model's context)"
            in " ".join(stderr.split()))


def test_an_eval_config_with_two_environments_evaluates_each(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """verifiers' `prime eval run` config shape: top-level defaults, one [[eval]] per environment, each written to
    its own file under -o (tests/test_eval_config.py: the parsing)."""
    config = tmp_path / "bench.toml"
    config.write_text(f'model = "{tiny_model_dir}"\nnum_examples = 2\nrollouts_per_example = 1\nmax_tokens = 8\n'
                      '[[eval]]\nid = "reverse-text"\nname = "rt"\nargs = {dataset_source = "offline"}\n'
                      '[[eval]]\nenv_id = "wordle"\nnum_examples = 1\n')
    code, stderr = vf_eval_here(monkeypatch, capsys, config, "-o", tmp_path / "out.jsonl", "-S", '{"min_tokens": 1}')
    assert code == 0, stderr[-2000:]
    assert [len((tmp_path / f).read_text().splitlines()) for f in ("out-rt.jsonl", "out-wordle.jsonl")] == [2, 1]
    assert "rt ·" in stderr and "wordle ·" in stderr  # each evaluation's summary table


def test_save_results_writes_verifiers_results_and_metadata(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """verifiers' `-s` (63 of prime-environments' READMEs' vf-eval commands carry it): results.jsonl and
    metadata.json under <-o>/evals/<env>--<model>/<id>/; a config's output_dir saves there too. Before: -s was an
    unrecognized argument, and a config's save_results / output_dir were ignored."""
    import statistics

    model = str(tiny_model_dir)
    code, stderr = vf_eval_here(monkeypatch, capsys, "reverse-text", "-m", model, "-n", 2, "-r", 2, "-t", 4,
                                "-a", '{"dataset_source": "offline"}', "-s", "-o", tmp_path / "a")
    assert code == 0, stderr[-2000:]
    config = tmp_path / "e.toml"
    config.write_text(f'model = "{model}"\nnum_examples = 1\nrollouts_per_example = 3\nmax_tokens = 4\n'
                      f'output_dir = "{tmp_path / "b"}"\n[[eval]]\nid = "reverse-text"\n'
                      'args = {dataset_source = "offline"}\n')
    code, stderr = vf_eval_here(monkeypatch, capsys, config)
    assert code == 0, stderr[-2000:]
    for base, n, r in (("a", 4, 2), ("b", 3, 3)):
        (run,) = list((tmp_path / base / "evals" / f"reverse-text--{model.replace('/', '--')}").iterdir())
        rows = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
        meta = json.loads((run / "metadata.json").read_text())
        assert len(rows) == n and len(run.name) == 8
        assert meta["env_id"] == "reverse-text" and meta["model"] == model and meta["rollouts_per_example"] == r
        assert meta["avg_reward"] == pytest.approx(statistics.mean(r["reward"] for r in rows))


def test_save_results_goes_where_verifiers_puts_it(tmp_path, monkeypatch):
    """No -o: ./environments/<module>/outputs when the environment's folder is there, else ./outputs."""
    import argparse

    from verifiers_rl.cli.eval import _results_dir

    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(env_id="owner/my-env", output=None, env_path=None, name=None)
    assert _results_dir(args, "org/m").parent == Path("outputs/evals/owner--my-env--org--m")
    (tmp_path / "environments" / "my_env").mkdir(parents=True)
    assert _results_dir(args, "org/m").parent == Path("environments/my_env/outputs/evals/owner--my-env--org--m")


def test_a_model_without_a_chat_template_is_one_line_before_the_rollouts(tiny_model_dir, tmp_path, monkeypatch,
                                                                         capsys):
    """Before: every rollout errored with transformers' template error, then 'every rollout errored'."""
    import shutil

    model = tmp_path / "no-template"
    shutil.copytree(tiny_model_dir, model)
    for f in model.glob("chat_template.*"):
        f.unlink()
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    code, stderr = vf_eval_here(monkeypatch, capsys, "reverse-text", "-m", model, "-n", 2, "-r", 1,
                                "-a", '{"dataset_source": "offline"}')
    assert code == 2 and stderr.strip().splitlines()[-1].startswith(f"error: {model}'s tokenizer has no chat template")
    assert "rollouts" not in stderr  # nothing was evaluated


def test_a_verifiers_vf_eval_command_line_runs_with_its_shuffle_and_state_columns(tiny_model_dir, tmp_path,
                                                                                 monkeypatch, capsys):
    monkeypatch.delenv("VF_VERBOSE", raising=False)
    common = ["reverse-text", "-m", tiny_model_dir, "-n", 4, "-r", 1, "-t", 4]

    def ids(*flags) -> tuple[list, list[dict], str]:
        out = tmp_path / f"{len(list(tmp_path.iterdir()))}.jsonl"
        code, stderr = vf_eval_here(monkeypatch, capsys, *common, *flags, "-o", out)
        assert code == 0, stderr[-2000:]
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        return [r["example_id"] for r in rows], rows, stderr

    plain, _, _ = ids()
    shuffled, rows, stderr = ids("--shuffle", "-N", "-d", "-C", "timing,info")  # verifiers' flags
    assert shuffled == ids("--seed", "0")[0] != plain  # --shuffle: seed 0, as verifiers' vf-eval
    assert all("generation_ms" in r["timing"] and r["info"] is not None for r in rows)
    assert "note: -N/--no-interleave-scoring (verifiers' vf-eval) changes nothing here" in stderr
    code, stderr = vf_eval_here(monkeypatch, capsys, *common, "-i")
    assert code == 2 and stderr.strip().splitlines()[-1] == (
        "error: -i/--independent-scoring: verifiers' vf-eval flag, not supported by this vf-eval; rollouts are scored "
        "by group, as the environment's rubric asks")
