"""vf-eval's config files (cli/eval_config.py): verifiers' `prime eval run` TOML ([[eval]] tables under top-level
defaults) and verifiers v1's `eval @ file.toml` ([env] block, num_tasks, num_rollouts) become vf-eval's arguments,
one namespace per evaluation; flags on the command line win; an unknown key is one line. A real run of such a file:
tests/test_vf_eval.py."""

from __future__ import annotations

import json
import os

import pytest

from verifiers_rl.cli.eval import build_parser
from verifiers_rl.cli.eval_config import EvalConfigError, config_path, eval_runs

# the shape of verifiers' configs/eval/*.toml (its hosted-training starter files)
CLASSIC = """
model = "Qwen/Qwen3.5-4B"
num_examples = 20
rollouts_per_example = 1
max_tokens = 1024

[[eval]]
env_id = "primeintellect/reverse-text"

[[eval]]
id = "math-python"
name = "math-hard"
num_examples = 50
[eval.args]
difficulty = "hard"
[eval.sampling]
temperature = 0.6
"""
# the shape of verifiers' configs/alphabet_sort.toml (`uv run eval @ configs/alphabet_sort.toml --model M`)
V1 = """
num_tasks = 5
num_rollouts = 2

[env.taskset]
id = "alphabet-sort"
min_turns = 2

[env.agent]
max_turns = 4

[env.agent.harness]
id = "null"
"""


def runs(tmp_path, text: str, *argv: str, at: bool = False):
    path = tmp_path / "eval.toml"
    path.write_text(text)
    return eval_runs(["@", str(path), *argv] if at else [str(path), *argv], build_parser())


def test_a_classic_eval_config_is_one_evaluation_per_eval_table(tmp_path):
    first, second = runs(tmp_path, CLASSIC)
    assert (first.env_id, first.model, first.num_examples, first.rollouts_per_example, first.max_tokens) == \
        ("primeintellect/reverse-text", "Qwen/Qwen3.5-4B", 20, 1, 1024)
    assert (second.env_id, second.name, second.num_examples) == ("math-python", "math-hard", 50)
    assert json.loads(second.env_args) == {"difficulty": "hard"}
    assert json.loads(second.sampling_args) == {"temperature": 0.6}
    # a flag given on the command line wins over the file, in every evaluation
    assert [r.model for r in runs(tmp_path, CLASSIC, "-m", "tiny", "-n", "3")] == ["tiny", "tiny"]
    assert [r.num_examples for r in runs(tmp_path, CLASSIC, "-m", "tiny", "-n", "3")] == [3, 3]


def test_a_v1_eval_config_is_its_env_block_with_the_v1_api(tmp_path):
    (run,) = runs(tmp_path, V1, "--model", "tiny", at=True)
    assert (run.env_id, run.api, run.model, run.num_examples, run.rollouts_per_example) == \
        ("alphabet-sort", "v1", "tiny", 5, 2)
    assert json.loads(run.env_args) == {"taskset": {"id": "alphabet-sort", "min_turns": 2},
                                        "agent": {"max_turns": 4, "harness": {"id": "null"}}}


# verifiers 0.4's own names for the same settings: its EvalConfig bounds the tasks by [select] limit (the `-n` flag,
# `n` in a file too) and takes rollouts_per_example / group_size / r for num_rollouts, c for max_concurrent; 0.4
# refuses num_tasks (0.3's name, kept above)
V1_04 = """
model = "tiny"
rollouts_per_example = 3
c = 4

[select]
limit = 2

[env.taskset]
id = "alphabet-sort"
"""


def test_a_v1_eval_config_in_verifiers_0_4_names_is_read(tmp_path):
    (run,) = runs(tmp_path, V1_04, at=True)
    assert (run.env_id, run.api, run.model, run.num_examples, run.rollouts_per_example, run.max_concurrent) == \
        ("alphabet-sort", "v1", "tiny", 2, 3, 4)
    (run,) = runs(tmp_path, V1_04.replace("limit = 2", "n = 5").replace("rollouts_per_example", "group_size"), at=True)
    assert (run.num_examples, run.rollouts_per_example) == (5, 3)
    # select's other keys vf-eval cannot honour are still one line naming them
    with pytest.raises(EvalConfigError, match="select.skip: not supported by vf-eval"):
        runs(tmp_path, V1_04.replace("limit = 2", "skip = 1"), at=True)

@pytest.mark.parametrize("text, line", [
    (CLASSIC.replace('id = "math-python"', 'id = "math-python"\nextra_env_kwargs = {max_turns = 3}'),
     "eval.1.extra_env_kwargs: not supported by vf-eval"),
    # before: a misspelt key read "not supported by vf-eval", and a value of the wrong type passed here and ended the
    # evaluation in a TypeError traceback ('>' not supported between instances of 'str' and 'int')
    (CLASSIC.replace("name = ", "num_exampels = 5\nname = "), "eval.1.num_exampels: unknown key (did you mean "
                                                             "eval.1.num_examples?)"),
    (CLASSIC.replace("num_examples = 20", 'num_examples = "20"'), "num_examples: expected int, got '20'"),
    (CLASSIC.replace("max_tokens = 1024", "max_tokens = 1e3"), "max_tokens: expected int, got 1000.0"),
    (CLASSIC.replace('env_id = "primeintellect/reverse-text"', 'env_id = "r"\nargs = [1]'),
     "eval.0.args: expected table or str, got [1]"),
    ("model = 'm'\n", 'eval: no [[eval]] table (one per environment: id = "..."), and no v1 [env] block'),
    ("[[eval]]\nname = 'x'\n", "eval.0.id: required (the environment to evaluate)"),
    ("[env.agent]\nmax_turns = 2\n", "env.taskset.id: required (the taskset to evaluate)"),
])
def test_what_vf_eval_cannot_read_is_one_line(text, line, tmp_path):
    with pytest.raises(EvalConfigError) as e:
        runs(tmp_path, text)
    assert str(e.value) == line


def test_verifiers_0_4s_flags_for_its_config_keys_are_read_as_the_config(tmp_path):
    """`vf-eval alphabet-sort --num-rollouts 2 --sampling.temperature 0.7 --env.taskset.min-turns 2` (verifiers 0.4's
    command line: its config's keys as flags, a bare id the taskset's) is the evaluation its @ eval.toml would be."""
    argv = ["alphabet-sort", "-m", "tiny", "--num-rollouts", "2", "--sampling.temperature=0.7",
            "--sampling.max-tokens", "64", "--select.n", "3", "--select.shuffle", "--select.seed", "5",
            "--env.taskset.min-turns", "2", "--env.agent.harness.id", "null", "--client.base-url", "http://h:8000/v1",
            "--no-push"]
    (run,) = eval_runs(argv, build_parser())
    assert (run.env_id, run.api, run.model, run.rollouts_per_example, run.num_examples) == \
        ("alphabet-sort", "v1", "tiny", 2, 3)
    assert (run.shuffle, run.shuffle_seed, run.base_url) == (True, 5, "http://h:8000/v1")
    assert json.loads(run.sampling_args) == {"temperature": 0.7, "max_tokens": 64}
    assert json.loads(run.env_args) == {"taskset": {"id": "alphabet-sort", "min_turns": 2},
                                        "agent": {"harness": {"id": "null"}}}
    # without --env.* flags the environment loads as vf-eval loads any (classic or v1, by --api)
    (run,) = eval_runs(["reverse-text", "-m", "tiny", "--num-rollouts", "3"], build_parser())
    assert (run.env_id, run.api, run.rollouts_per_example, run.env_args) == ("reverse-text", "auto", 3, "{}")
    # beside a v1 config file the flags win over its keys
    (run,) = runs(tmp_path, V1, "--model", "tiny", "--num-rollouts", "4", "--env.taskset.min-turns", "3", at=True)
    assert run.rollouts_per_example == 4 and json.loads(run.env_args)["taskset"] == {"id": "alphabet-sort",
                                                                                    "min_turns": 3}
    for argv, line in ((["reverse-text", "-m", "t", "--dry-run"], "dry_run: not supported by vf-eval"),
                       (["reverse-text", "-m", "t", "--select.skip", "2"], "select.skip: not supported by vf-eval"),
                       (["reverse-text", "-m", "t", "--num-rollout", "2"], None)):
        if line is None:  # not one of its flags: argparse's own error, as before
            with pytest.raises(SystemExit):
                eval_runs(argv, build_parser())
            continue
        with pytest.raises(EvalConfigError, match=f"^{line}$"):
            eval_runs(argv, build_parser())


def test_only_a_toml_in_the_environments_place_is_a_config():
    assert config_path(["reverse-text", "-m", "tiny"]) == (None, ["reverse-text", "-m", "tiny"])
    assert config_path(["-m", "tiny", "configs/eval/x.toml"]) == ("configs/eval/x.toml", ["-m", "tiny"])
    assert config_path(["@", "x.toml", "--model", "m"]) == ("x.toml", ["--model", "m"])


def test_verifiers_own_vf_eval_flags_are_aliases_notes_or_one_line(monkeypatch):
    """A verifiers vf-eval command line: its names for our flags work, its display and scheduling flags are a note,
    and one we cannot honour is one line saying what to do instead (not argparse's "unrecognized arguments")."""
    from verifiers_rl.cli.eval_flags import apply_verifiers_flags

    monkeypatch.delenv("VF_VERBOSE", raising=False)
    parse = build_parser().parse_args
    args = parse(["reverse-text", "-m", "m", "--api-base-url", "http://h:1/v1", "--env-dir-path", "envs", "-v",
                  "-N", "-d", "-w", "4", "--shuffle", "-C", "timing,info"])
    assert (args.base_url, args.env_path, args.state_columns) == ("http://h:1/v1", "envs", "timing,info")
    notes, refused = apply_verifiers_flags(args)
    assert refused is None and args.seed == 0 and os.environ["VF_VERBOSE"] == "1"  # verifiers: --shuffle seeds 0
    assert notes == ["note: -N/--no-interleave-scoring (verifiers' vf-eval) changes nothing here: rollouts are scored "
                     "as they finish either way",
                     "note: -d/--disable-tui (verifiers' vf-eval) changes nothing here: no live display here",
                     "note: -w/--num-workers (verifiers' vf-eval) changes nothing here: environments run in this "
                     "process"]
    args = parse(["reverse-text", "-m", "m", "--shuffle", "--shuffle-seed", "7"])
    assert apply_verifiers_flags(args) == ([], None) and args.seed == 7
    args = parse(["reverse-text", "-m", "m", "--shuffle-seed", "7"])  # verifiers: no shuffle without --shuffle
    assert apply_verifiers_flags(args) == ([], None) and args.seed is None
    for flags, line in ((["-H"], "-H/--save-to-hf-hub: verifiers' vf-eval flag, not supported by this vf-eval; save "
                                 "with -s, then upload the folder with `hf upload`"),
                        (["--resume"], "-R/--resume: verifiers' vf-eval flag, not supported by this vf-eval; each "
                                       "evaluation here starts afresh; run it again"),
                        (["-R", "outputs/x"], "-R/--resume: verifiers' vf-eval flag"),
                        (["-x", '{"a": 1}'], "-x/--extra-env-kwargs: verifiers' vf-eval flag, not supported by this "
                                             "vf-eval; give them in -a/--env-args"),
                        (["--header", "X-A: 1", "--header", "X-B: 2"], "--header: verifiers' vf-eval flag")):
        assert apply_verifiers_flags(parse(["reverse-text", "-m", "m", *flags]))[1].startswith(line)
