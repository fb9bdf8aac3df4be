"""How many of verifiers' example environments load and score rows through `vf-eval`, unedited, on the `ours`
runtime (`import verifiers` answered by verifiers_rl), with the offline tiny model?

    uv run python benchmarks/verifiers_examples.py /work/.mirror/PrimeIntellect-ai+verifiers/repo [--commit 7ebf37f]
    uv run python benchmarks/verifiers_examples.py PATH/TO/verifiers-checkout --json

SOURCE is a verifiers git checkout or bare mirror (its `environments/` at COMMIT is extracted into a temp dir with
`git archive`), or a plain folder holding `environments/`. Nothing of verifiers is copied into this repository.

Per example, in that temp dir: `vf-eval <name> -m <tiny model> -n 2 -r 1 -t 64 -o rollouts.jsonl`, run by a
separate venv (cached under ~/.cache/verifiers-rl/) that has this package installed editable plus each example's
own dependencies, installed with `vf-install` (which leaves `verifiers` itself out). An example "runs" when
vf-eval exits 0 and every rollout it wrote has a reward and no rollout or reward-function error.

Offline: HF_HUB_OFFLINE=1 / HF_DATASETS_OFFLINE=1. A `sitecustomize` put on the subprocess's PYTHONPATH patches
`datasets.load_dataset` (when datasets is first imported) to answer the hub ids in STANDINS with small synthetic
datasets that have the same columns, and says "stand-in for <hub id>" on stderr; any other id goes to the real
function (and fails offline). `vf.load_example_dataset` reaches the same patch through `datasets.load_dataset`.
The same hook adds a stand-in NLTK data folder (a few 5-letter nouns; a tagger calling them nouns) to
`nltk.data.path` for the Wordle examples. The output names each stand-in an example used.

Examples that need an outside service (an API key, a sandbox, a browser, a search API, a judge server) are not
run: EXCLUDED names the reason for each, checked by reading the example's code at 7ebf37f.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = Path.home() / ".cache" / "verifiers-rl"
DEFAULT_COMMIT = "7ebf37f"

# name -> why it needs something outside this machine (read from each example's code at 7ebf37f)
EXCLUDED = {
    "browser_cua_example": "browser service: Browserbase (BROWSERBASE_API_KEY) through a CUA server run in a "
                           "Prime sandbox (docker image); gpt-4o-mini judge",
    "browser_dom_example": "browser service: Browserbase + Stagehand (BROWSERBASE_API_KEY, MODEL_API_KEY, a "
                           "Browserbase project_id); gpt-4o-mini judge",
    "continuation_quality": "API key: OPENAI_API_KEY for the gpt-4.1-mini judge (vf.ensure_keys)",
    "mcp_search_env": "search API: EXA_API_KEY (Exa MCP server via npx) and an OpenAI judge",
    "opencode_harbor": "sandbox service: HarborEnv/CliAgentEnv runs the agent in a Prime sandbox (docker image)",
    "openenv_echo": "sandbox service: vf.OpenEnvEnv always runs the OpenEnv server in a Prime sandbox",
    "openenv_textarena": "sandbox service: vf.OpenEnvEnv always runs the OpenEnv server in a Prime sandbox",
    "self_reward": "judge server: JudgeRubric calls a model server at http://0.0.0.0:8000/v1",
    "terminus_harbor": "sandbox service: HarborEnv runs the agent in a Prime sandbox (docker image)",
    "toxicity_explanation": "API key: OPENAI_API_KEY for the gpt-4.1-mini judge (vf.ensure_keys)",
    "wiki_search": "API key: OPENAI_API_KEY for the judge and for OpenAI embeddings (chromadb)",
}

# --- synthetic stand-ins for hub datasets, keyed by hub id ------------------------------------------------------
_FIRST = ["Ada", "Boris", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kofi", "Lena",
          "Mateo", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Sven", "Tariq", "Uma", "Viktor", "Wen", "Yara"]
_LAST = ["Abel", "Brandt", "Castillo", "Dubois", "Eriksen", "Fontaine", "Gupta", "Hoffmann", "Ivanova", "Jensen",
         "Kowalski", "Lindqvist", "Moreau", "Nakamura", "Okafor", "Petrov", "Quinn", "Rossi", "Schmidt", "Tanaka"]
_WORDS = ["river", "valley", "council", "harbor", "railway", "festival", "province", "library", "treaty", "bridge",
          "cathedral", "mountain", "village", "dynasty", "museum", "market", "garrison", "canal", "orchard"]


def _gsm8k(rng: random.Random, i: int) -> dict:
    a, b, c = rng.randint(2, 40), rng.randint(2, 40), rng.randint(2, 9)
    return {"question": f"Sam has {a} apples and buys {c} bags of {b} apples each. How many apples does Sam have?",
            "answer": f"He buys {c} * {b} = <<{c}*{b}={c * b}>>{c * b} apples.\n{a} + {c * b} = {a + c * b}\n"
                      f"#### {a + c * b}"}


def _competition_math(rng: random.Random, i: int) -> dict:
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    return {"problem": f"Compute ${a} \\cdot {b} + {i}$.", "level": f"Level {rng.randint(1, 5)}",
            "type": "Prealgebra", "solution": f"${a} \\cdot {b} + {i} = \\boxed{{{a * b + i}}}$."}


def _sentence(rng: random.Random) -> str:
    words = rng.sample(_WORDS, rng.randint(5, 9))
    return f"The {words[0]} " + " ".join(words[1:]) + f" was recorded in {rng.randint(1200, 2000)}"


def _paragraph(rng: random.Random, i: int) -> dict:
    return {"text": ". ".join(_sentence(rng) for _ in range(rng.randint(14, 20))) + "."}


def _authors(rng: random.Random, i: int) -> dict:
    return {"names": [f"{rng.choice(_FIRST)} {rng.choice(_LAST)}" for _ in range(20)]}


def _reverse_text(rng: random.Random, i: int) -> dict:
    return {"prompt": " ".join(rng.sample(_WORDS, rng.randint(4, 10)))}


def _mmmu(rng: random.Random, i: int) -> dict:
    from PIL import Image

    opts = rng.sample(_WORDS, 4)
    row = {"id": f"dev_Art_{i + 1}", "question": f"<image 1> Which word is written under the {rng.choice(_WORDS)}?",
           "options": repr(opts), "explanation": "", "img_type": "['Paintings']",
           "answer": "ABCD"[rng.randrange(4)], "topic_difficulty": "Easy", "question_type": "multiple-choice",
           "subfield": "Art History", "image_1": Image.new("RGB", (32, 32), tuple(rng.randrange(256) for _ in "rgb"))}
    row.update({f"image_{k}": None for k in range(2, 8)})
    return row


# hub id -> (row maker, rows per split); rows are made for whatever config and split the example asks
STANDINS = {
    "openai/gsm8k": (_gsm8k, 1200),  # math_group selects 1000 train rows
    "chiayewken/competition_math": (_competition_math, 1200),
    "kalomaze/alphabetic-arxiv-authors-it1": (_authors, 64),
    "PrimeIntellect/Reverse-Text-RL": (_reverse_text, 64),
    "agentlans/wikipedia-paragraphs": (_paragraph, 64),
    "MMMU/MMMU": (_mmmu, 5),
}


def standin_dataset(path: str, name: str | None, split: str):
    from datasets import Dataset, Features, Image, Value

    make, n = STANDINS[path]
    rng = random.Random(f"{path}/{name}/{split}")
    rows = [make(rng, i) for i in range(n)]
    if path == "MMMU/MMMU":
        feats = {k: Value("string") for k in rows[0]}
        feats.update({f"image_{k}": Image() for k in range(1, 8)})
        return Dataset.from_list(rows, features=Features(feats))
    return Dataset.from_list(rows)


def _patch_datasets(datasets_module) -> None:
    original = datasets_module.load_dataset

    def load_dataset(path, name=None, *args, split=None, **kwargs):
        if path not in STANDINS:
            return original(path, name, *args, split=split, **kwargs)
        print(f"[verifiers_examples] stand-in for {path}" + (f" ({name})" if name else "")
              + f" split={split or 'all'}", file=sys.stderr, flush=True)
        if split is not None:
            return standin_dataset(path, name, str(split))
        return datasets_module.DatasetDict({s: standin_dataset(path, name, s) for s in ("train", "test")})

    datasets_module.load_dataset = load_dataset
    if hasattr(datasets_module, "load"):
        datasets_module.load.load_dataset = load_dataset


# NLTK data (from raw.githubusercontent.com, unreachable here) that textarena's and GEM's Wordle read: a word list
# (5-letter nouns) and a part-of-speech "tagger" that calls every one of them a noun.
NLTK_WORDS = ["apple", "beach", "chair", "dance", "eagle", "fruit", "grape", "house", "index", "juice", "knife",
              "lemon", "music", "night", "ocean", "piano", "queen", "river", "stone", "table", "uncle", "voice",
              "water", "youth", "zebra", "bread", "cloud", "dream", "field", "heart", "light", "money", "plant"]
NLTK_DATA_VAR = "VF_EXAMPLES_NLTK_DATA"


def write_nltk_standin(root: Path) -> Path:
    words = root / "corpora" / "words"
    words.mkdir(parents=True, exist_ok=True)
    for name in ("en", "en-basic"):
        (words / name).write_text("\n".join(NLTK_WORDS) + "\n")
    tagger = root / "taggers" / "averaged_perceptron_tagger_eng"
    tagger.mkdir(parents=True, exist_ok=True)
    for part, value in (("weights", {}), ("tagdict", {w: "NN" for w in NLTK_WORDS}), ("classes", ["NN"])):
        (tagger / f"averaged_perceptron_tagger_eng.{part}.json").write_text(json.dumps(value))
    return root


def _patch_nltk(nltk_module) -> None:
    root = os.environ.get(NLTK_DATA_VAR)
    if root:
        nltk_module.data.path.insert(0, root)
        print("[verifiers_examples] stand-in for nltk_data (words, averaged_perceptron_tagger_eng)",
              file=sys.stderr, flush=True)


_PATCHES = {"datasets": _patch_datasets, "nltk": _patch_nltk}


class _PatchOnImport:
    """sys.meta_path finder: lets `datasets` / `nltk` import normally, then patches them (nothing is imported
    eagerly, so Python children of vf-eval that lack them are untouched)."""

    def find_spec(self, fullname, path=None, target=None):
        patch = _PATCHES.get(fullname)
        if patch is None:
            return None
        import importlib.util

        del _PATCHES[fullname]
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            exec_module = spec.loader.exec_module

            def exec_and_patch(module):
                exec_module(module)
                patch(module)

            spec.loader.exec_module = exec_and_patch
        return spec


def install_standins() -> None:
    """Called by the generated sitecustomize in every Python process vf-eval starts."""
    for name in [n for n in _PATCHES if n in sys.modules]:
        _PATCHES.pop(name)(sys.modules[name])
    sys.meta_path.insert(0, _PatchOnImport())


def write_shim(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
        "import verifiers_examples as _vx\n"
        "sys.path.pop(0)\n"
        "_vx.install_standins()\n")
    return folder


# --- the examples, the venv, the model -----------------------------------------------------------------------------
def extract_examples(source: Path, commit: str, dest: Path) -> Path:
    """`environments/` of SOURCE at COMMIT (git) or as it is (plain folder), copied under DEST."""
    is_git = subprocess.run(["git", "-C", str(source), "rev-parse", "--git-dir"], capture_output=True,
                            check=False).returncode == 0
    if is_git:
        archive = subprocess.run(["git", "-C", str(source), "archive", commit, "environments"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    else:
        shutil.copytree(source / "environments", dest / "environments")
    return dest / "environments"


def example_names(env_root: Path) -> list[str]:
    return sorted(d.name for d in env_root.iterdir() if d.is_dir() and (d / f"{d.name}.py").exists())


def _sha(*parts: bytes) -> str:
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]


def ensure_venv(venv: Path, env_root: Path, names: list[str], reinstall: bool) -> dict[str, str]:
    """The benchmark venv: this package (editable) and each example's dependencies via `vf-install`, one call per
    example (one that does not install does not stop the others); remembered per example in a stamp file.
    Returns {example: install error}."""
    stamp_path = venv / "verifiers-examples-stamp.json"
    base = _sha((REPO / "pyproject.toml").read_bytes())
    stamp = json.loads(stamp_path.read_text()) if stamp_path.exists() and not reinstall else {}
    uv = shutil.which("uv") or sys.exit("this benchmark needs uv on PATH")
    env = {**os.environ, "VIRTUAL_ENV": str(venv)}
    if stamp.get("base") != base:
        if not (venv / "bin" / "python").exists():
            subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
        subprocess.run([uv, "pip", "install", "-q", "-e", str(REPO)], env=env, check=True)
        stamp = {"base": base, "examples": {}}
    for name in names:
        key = _sha((env_root / name / "pyproject.toml").read_bytes())
        if stamp["examples"].get(name, {}).get("key") == key:
            continue
        print(f"installing {name} (vf-install) ...", file=sys.stderr, flush=True)
        p = subprocess.run([str(venv / "bin" / "vf-install"), str(env_root / name)], capture_output=True, text=True,
                           env=env, cwd=env_root, check=False)
        error = None if p.returncode == 0 else "dependencies do not install: " + first_error_line(p.stderr)
        stamp["examples"][name] = {"key": key, "error": error}
        stamp_path.write_text(json.dumps(stamp, indent=1))
    return {n: e["error"] for n, e in stamp["examples"].items() if n in names and e["error"]}


def ensure_tiny_model(venv: Path, model_dir: Path) -> Path:
    if not (model_dir / "config.json").exists():
        subprocess.run([str(venv / "bin" / "vf-tiny-model"), str(model_dir), "--force"], check=True,
                       capture_output=True)
    return model_dir


# --- one example -------------------------------------------------------------------------------------------------
_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)\b.*")


def first_error_line(text: str) -> str:
    """The line that says what went wrong: vf-eval's `error: ...`, else the exception line of the last traceback,
    else the last non-empty line."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("error: "):
            return ln[len("error: "):]
    starts = [i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call last)")]
    if starts:
        for ln in lines[starts[-1] + 1:]:
            if not ln.startswith((" ", "\t")) and _EXC_LINE.match(ln):
                return ln
    for ln in reversed(lines):
        if _EXC_LINE.match(ln) or "error" in ln.lower():
            return ln.strip()
    return lines[-1].strip() if lines else "(no output)"


_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+)')


def error_site(text: str, roots: list[Path]) -> str | None:
    """`path:line` of the innermost frame of the last traceback, relative to this repo or the examples' dir."""
    frames = [m for ln in text.split("Traceback (most recent call last)")[-1].splitlines() if (m := _FRAME.match(ln))]
    if not frames:
        return None
    path, line = frames[-1].group(1), frames[-1].group(2)
    for root in roots:
        if path.startswith(str(root) + os.sep):
            path = os.path.relpath(path, root)
            break
    return f"{path}:{line}"


def _judge_rollouts(out: Path) -> tuple[str | None, float | None]:
    """(error or None, mean reward) from the rollouts vf-eval wrote."""
    rows = [json.loads(ln) for ln in out.read_text().splitlines() if ln.strip()] if out.exists() else []
    if not rows:
        return "vf-eval exited 0 but wrote no rollouts", None
    for row in rows:
        if row.get("error"):
            return "rollout error: " + str(row["error"]).strip().splitlines()[0], None
        if row.get("reward_errors"):
            func, err = next(iter(row["reward_errors"].items()))
            return f"reward function {func} failed: " + str(err).strip().splitlines()[0], None
        if not isinstance(row.get("reward"), (int, float)):
            return f"rollout has no numeric reward ({row.get('reward')!r})", None
    return None, sum(r["reward"] for r in rows) / len(rows)


def run_example(name: str, workdir: Path, venv: Path, model: Path, shim: Path, args) -> dict:
    out = workdir / f"{name}.rollouts.jsonl"
    pythonpath = os.pathsep.join(filter(None, [str(shim), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VF_VERIFIERS_RUNTIME": "ours", NLTK_DATA_VAR: str(workdir / "nltk_data"), "PYTHONPATH": pythonpath,
           "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmd = [str(venv / "bin" / "vf-eval"), name, "-m", str(model), "-n", str(args.num_examples), "-r", "1",
           "-t", str(args.max_tokens), "-o", str(out)]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=args.timeout,
                           check=False)
        rc, stderr = p.returncode, p.stdout + "\n" + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, stderr = None, (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else ""
    result = {"example": name, "seconds": round(time.monotonic() - t0, 1),
              "standins": sorted(set(re.findall(r"stand-in for (\S+)", stderr)))}
    if rc is None:
        return {**result, "status": "fails", "error": f"timed out after {args.timeout}s"}
    if rc != 0:
        return {**result, "status": "fails", "error": first_error_line(stderr),
                "at": error_site(stderr, [REPO, workdir / "environments", venv])}
    if "verifiers runtime: ours" not in stderr:
        return {**result, "status": "fails", "error": "vf-eval did not announce the `ours` verifiers runtime"}
    error, reward = _judge_rollouts(out)
    if error:
        return {**result, "status": "fails", "error": error}
    return {**result, "status": "runs", "reward": round(reward, 4)}


# --- report --------------------------------------------------------------------------------------------------------
def describe(r: dict) -> str:
    if r["status"] == "excluded":
        line = f"excluded: {r['reason']}"
    elif r["status"] == "runs":
        line = f"runs (reward {r['reward']:.3f}, {r['seconds']:.0f}s)"
    else:
        line = f"fails: {r['error']}" + (f"  (at {r['at']})" if r.get("at") else "")
    if r.get("standins"):
        line += f"  [stand-in for {', '.join(r['standins'])}]"
    return f"{r['example']:24s} {line}"


def figure(results: list[dict]) -> str:
    excluded = [r["example"] for r in results if r["status"] == "excluded"]
    considered = [r for r in results if r["status"] != "excluded"]
    runs = sum(r["status"] == "runs" for r in considered)
    return (f"{runs} of {len(considered)} examples that need no outside service run unchanged "
            f"({len(excluded)} excluded" + (f": {', '.join(excluded)})" if excluded else ")"))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", type=Path, help="a verifiers checkout or git mirror (or a folder with environments/)")
    p.add_argument("--commit", default=DEFAULT_COMMIT, help=f"commit to extract (default {DEFAULT_COMMIT})")
    p.add_argument("--only", nargs="+", metavar="NAME", help="run only these examples")
    add_run_options(p, venv_default=None)
    return p


def add_run_options(p: argparse.ArgumentParser, venv_default: Path | None) -> None:
    """The options this benchmark shares with prime_sandbox_envs.py: rows, tokens, time, venv, output."""
    p.add_argument("-n", "--num-examples", type=int, default=2, help="rows per example (default 2)")
    p.add_argument("-t", "--max-tokens", type=int, default=64, help="max tokens per model turn (default 64)")
    p.add_argument("--timeout", type=int, default=600, help="seconds per example (default 600)")
    p.add_argument("--venv", type=Path, default=venv_default,
                   help=f"benchmark venv (default: {venv_default or 'under ~/.cache/verifiers-rl/'})")
    p.add_argument("--reinstall", action="store_true", help="install the venv's packages again")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (its path is printed)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the lines")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="verifiers-examples-"))
    try:
        env_root = extract_examples(args.source, args.commit, work)
        names = [n for n in example_names(env_root) if not args.only or n in args.only]
        to_run = [n for n in names if n not in EXCLUDED]
        venv = args.venv or CACHE / f"verifiers-examples-{args.commit}" / "venv"
        venv.parent.mkdir(parents=True, exist_ok=True)
        install_failed = ensure_venv(venv, env_root, to_run, args.reinstall)
        model = ensure_tiny_model(venv, CACHE / "verifiers-examples-tiny-model")
        shim = write_shim(work / "shim")
        write_nltk_standin(work / "nltk_data")
        results = []
        for name in names:
            if name in EXCLUDED:
                results.append({"example": name, "status": "excluded", "reason": EXCLUDED[name]})
            elif name in install_failed:
                results.append({"example": name, "status": "fails", "error": install_failed[name]})
            else:
                results.append(run_example(name, work, venv, model, shim, args))
            if not args.json:
                print(describe(results[-1]), flush=True)
        summary = figure(results)
        if args.json:
            print(json.dumps({"source": str(args.source), "commit": args.commit, "runtime": "ours",
                              "results": results, "figure": summary}, indent=2))
        else:
            print("\n" + summary)
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if any(r["status"] == "runs" for r in results) else 1  # none running: a failed benchmark


if __name__ == "__main__":
    raise SystemExit(main())
