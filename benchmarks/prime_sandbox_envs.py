"""Do prime-environments' SandboxEnv environments (--set sandbox, the default) and those that need no sandbox, key,
judge or search (--set offline: OFFLINE_ENVS) run, unedited, under our `vf-eval` with the offline tiny model?

    uv run python benchmarks/prime_sandbox_envs.py /work/.mirror/CodeAgentCN+prime-environments/repo
    uv run python benchmarks/prime_sandbox_envs.py PATH/TO/prime-environments --only gptworld --json
    uv run python benchmarks/prime_sandbox_envs.py PATH/TO/prime-environments --set offline

SOURCE is a prime-environments git checkout or bare mirror (ENVS' folders at COMMIT are extracted into a temp dir
with `git archive`), or a plain folder holding `environments/`. Nothing of prime-environments is copied into this
repository.

Per environment: `vf-eval <name> --env-path <its folder> -m <tiny model> -n 2 -r 1 -t 64`, run by a separate venv
(cached under ~/.cache/verifiers-rl/) with this package editable and each environment's dependencies installed by
`vf-install` (verifiers_examples.ensure_venv), plus WORKAROUNDS where an environment's own requirements do
not install or import as declared (each named on its line). The tiny model is built with 16k positions: these prompts are
several thousand byte-level tokens. Offline: hub ids in STANDINS are answered by small synthetic datasets with the
same columns (verifiers_examples' `datasets.load_dataset` patch; "stand-in for <id>" on stderr), so the rest of
the environment can run; any other hub id fails offline. Files fetched with `requests.get` from URL_STANDINS are
answered the same way, and ENV_ARGS gives an environment the arguments that point it at local stand-ins (a SQLite
database, a verifier module). The same sitecustomize records every command the local sandbox runs (exit code,
first stderr line), so a setup step that needs the network is named.

One line per environment: `runs` (vf-eval exit 0, rollouts written, none with an error), the rollouts, errors,
mean reward, sandbox commands failed / run with the first failure, and NEEDS: what it needs from outside this
machine to score (read from its code), beside any stand-in it was given.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import verifiers_examples as vx  # noqa: E402 -- the sibling benchmark: venv, stand-in patch, error lines

CACHE = vx.CACHE / "prime-sandbox-envs"
LOG_VAR = "VF_PRIME_ENVS_SANDBOX_LOG"

# name -> what it needs from outside this machine to score a rollout (read from its code at 7a25597)
ENVS = {
    "autodiff": "docker image mkyacine/autodiff (jax, jaxtyping, beartype in the sandbox's python3)",
    "gptworld": "hub dataset wambosec/gptworld-levels",
    "humaneval": "hub dataset openai/openai_humaneval; and its rows carry info['oai_tools'], which verifiers >= "
                 "0.3 refuses (the same ValueError in verifiers 0.3.1)",
    "llm_training_puzzles": "a root image with network for its setup (apt-get install curl, pip install numba "
                            "chalk-diagrams ipython, curl of lib.py from GitHub)",
    "polars_env": "hub dataset bhoy/polars-tasks-v1; image python:3.11-slim with network (its setup pip-installs "
                  "polars numpy, then runs `python`)",
    "tensor_puzzles": "an image with network for its setup (pip install torch from download.pytorch.org, "
                      "torchtyping, hypothesis)",
    "transformerpuzzles": "a root image with network for its setup (apt-get, pip install RASPy from GitHub, "
                          "chalk-diagrams pycairo)",
    "vllm_code_search": "its start_command (apk add ripgrep, git clone of vLLM from GitHub); a judge API "
                        "(api.pinference.ai; JUDGE_API_KEY / PRIME_API_KEY / OPENAI_API_KEY at load)",
}

# name -> (why, packages): what the benchmark venv gets beside `vf-install` so the environment imports here
WORKAROUNDS = {
    "humaneval": ("its openbench -> inspect-ai imports mcp.server.fastmcp, gone in mcp 2", ["mcp<2"]),
    "tensor_puzzles": ("its pyproject requires Python >= 3.12; its dependencies installed into this Python",
                       ["datasets", "hypothesis", "modal", "prime", "pytest", "torch", "torchtyping"]),
}


def apply_workarounds(venv: Path, names: list[str]) -> None:
    uv = shutil.which("uv") or sys.exit("this benchmark needs uv on PATH")
    packages = sorted({p for n in names if n in WORKAROUNDS for p in WORKAROUNDS[n][1]})
    if packages:
        subprocess.run([uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), *packages],
                       check=True)


# --- stand-ins for hub datasets (synthetic rows with the columns each environment reads) ------------------------
def _gptworld_level(rng: random.Random, i: int) -> dict:
    # the worked example of gptworld's own prompt: key at (1, 1), flag at (2, 2), three actions
    return {"difficulty": ["easy", "medium", "hard", "evil"][i % 4], "boundary": [3, 3], "key": [1, 1],
            "flag": [2, 2], "init": [0, 0], "walls": [[2, 0]], "min_actions": 3}


def _polars_task(rng: random.Random, i: int) -> dict:
    values = [rng.randint(1, 50) for _ in range(5)]
    return {"prompt": "Keep the rows of df whose column `a` is above 10 and store the result in df.",
            "input_data": json.dumps({"type": "dict", "data": {"a": values}}),
            "expected_output": json.dumps({"data": {"a": [v for v in values if v > 10]}, "dtypes": {"a": "int64"}})}


def _humaneval(rng: random.Random, i: int) -> dict:
    k = rng.randint(2, 9)
    return {"task_id": f"HumanEval/{i}", "entry_point": f"add_{k}",
            "prompt": f'def add_{k}(x: int) -> int:\n    """Return x plus {k}."""\n',
            "canonical_solution": f"    return x + {k}\n",
            "test": f"METADATA = {{}}\n\ndef check(candidate):\n    assert candidate(1) == {1 + k}\n"}


STANDINS = {"wambosec/gptworld-levels": (_gptworld_level, 4), "bhoy/polars-tasks-v1": (_polars_task, 8),
            "openai/openai_humaneval": (_humaneval, 8)}


# --- --set offline: environments that need no sandbox, key, judge or search to score (read from their code) -------
OFFLINE_ENVS = {
    "mastermind": "nothing: it makes its games itself (MultiTurnEnv, XMLParser, @vf.stop, 5 reward functions)",
    "fh_aviary": "nothing with its default env_name dummy (MultiTurnEnv over an Aviary env: state['tool_defs'] "
                 "from convert_func_to_tool_def, setup_state rebuilds the prompt as vf message classes)",
    "hanabi": "nothing: it deals its games itself (StatefulToolEnv); runs only while the model calls no tool: its "
              "other player calls state['client'].chat.completions and reads env.oai_tools, verifiers <= 0.1.10's "
              "names (0.1.11 and 0.3 fail the same; 0.3.1 already at import)",
    "agent_dojo": "nothing: agentdojo ships its suites (ToolEnv with per-rollout state['tool_defs'] and its own "
                  "call_tool, info as a JSON string)",
    "boolq": "hub dataset google/boolq (Parser(extract_fn=...))",
    "hellaswag": "hub dataset Rowan/hellaswag (a Parser subclass, Dataset.from_generator)",
    "winogrande": "hub dataset allenai/winogrande (a reward function without **kwargs)",
    "mmlu": "hub dataset cais/mmlu",
    "arc": "hub dataset allenai/ai2_arc (extract_boxed_answer)",
    "truthfulqa": "hub dataset truthful_qa",
    "legalbench": "hub dataset DatologyAI/legalbench (run with use_think: ThinkParser, its format reward)",
    "ascii_tree": "hub dataset kalomaze/ascii-tree-mix-it1 (XMLParser, two weighted rewards, max_concurrent=)",
    "pydantic_adherence": "hub dataset justus27/pydantic-adherance-test (a Parser subclass with its own format "
                          "reward, info column)",
    "allenai_ifeval": "hub dataset allenai/RLVR-IFeval (prompt column of messages, run with use_think: ThinkParser)",
    "longbench_v2": "hub dataset THUDM/LongBench-v2 (4 reward functions, task column)",
    "clockbench": "hub dataset nmayorga7/clockbench (MultiTurnEnv, image prompts, setup_state edits the prompt)",
    "nyt_connections": "a JSON file on raw GitHub (MultiTurnEnv whose env_response rewrites state['answer'], "
                       "which its reward functions read)",
    "lisanbench": "a word list on raw GitHub (3 reward functions, one with a negative weight)",
    "synlogic": "hub dataset MiniMaxAI/SynLogic and a clone of its GitHub repository (its task verifiers); here "
                "a one-task task2verifier.py as its repo_root (a reward function reading the task column)",
    "skyrl_sql": "hub file seeklhy/OmniSQL-datasets (its SQLite databases); here a local database as db_roots, "
                 "questions by hf_path (ToolEnv with its own env_response)",
}

_W = vx._WORDS


def _boolq(rng: random.Random, i: int) -> dict:
    return {"question": f"is the {rng.choice(_W)} older than the {rng.choice(_W)}", "answer": bool(i % 2),
            "passage": vx._sentence(rng) + "."}


def _hellaswag(rng: random.Random, i: int) -> dict:
    return {"activity_label": "Walking", "ctx_a": vx._sentence(rng) + ".", "ctx_b": f"then the {rng.choice(_W)}",
            "endings": [vx._sentence(rng) for _ in range(4)], "label": str(i % 4)}


def _winogrande(rng: random.Random, i: int) -> dict:
    a, b = rng.sample(_W, 2)
    return {"sentence": f"The {a} was larger than the {b} because _ was built first.", "option1": a,
            "option2": b, "answer": str(1 + i % 2)}


def _mmlu(rng: random.Random, i: int) -> dict:
    return {"question": f"Which came first in {rng.randint(1200, 2000)}?", "subject": "history",
            "choices": rng.sample(_W, 4), "answer": i % 4}


def _arc(rng: random.Random, i: int) -> dict:
    return {"id": f"q{i}", "question": f"Which {rng.choice(_W)} is nearest?",
            "choices": {"text": rng.sample(_W, 4), "label": ["A", "B", "C", "D"]}, "answerKey": "ABCD"[i % 4]}


def _truthfulqa(rng: random.Random, i: int) -> dict:
    labels = [0, 0, 0]
    labels[i % 3] = 1
    return {"question": f"Where is the {rng.choice(_W)}?", "mc1_targets": {"choices": rng.sample(_W, 3),
                                                                         "labels": labels},
            "mc2_targets": {"choices": rng.sample(_W, 2), "labels": [1, 0]}}


def _legalbench(rng: random.Random, i: int) -> dict:
    return {"text": vx._sentence(rng) + ". Is there personal jurisdiction?", "answer": ["Yes", "No"][i % 2],
            "index": str(i)}


def _ascii_tree(rng: random.Random, i: int) -> dict:
    root, *kids = rng.sample(_W, 4)
    tree = root + "\n" + "\n".join(f" +-- {k}" for k in kids)
    return {"prompt": f"Draw {', '.join(kids)} under {root} as an ASCII tree in <ascii_formatted> tags.",
            "verification_info": json.dumps({"ground_truth": tree})}


def _pydantic(rng: random.Random, i: int) -> dict:
    code = "from pydantic import BaseModel\n\nclass Place(BaseModel):\n    name: str\n    year: int\n"
    return {"prompt": "Describe a place as JSON with a name and a year.",
            "verification_info": json.dumps({"pydantic_config": code, "model_name": "Place"})}


def _ifeval(rng: random.Random, i: int) -> dict:
    word = rng.choice(_W)
    truth = [{"func_name": "verify_keywords", "keyword_list": [word]},
             {"func_name": "validate_lowercase"}][i % 2]
    return {"messages": [{"role": "user", "content": f"Write about a {word}."}], "ground_truth": json.dumps(truth),
            "constraint_type": truth["func_name"], "constraint": f"Use {truth['func_name']}"}


def _longbench(rng: random.Random, i: int) -> dict:
    return {"_id": f"lb{i}", "domain": "Single-Document QA", "sub_domain": "Academic", "difficulty": "hard",
            "length": "short", "question": f"When was the {rng.choice(_W)} recorded?",
            **{f"choice_{c}": str(rng.randint(1200, 2000)) for c in "ABCD"}, "answer": "ABCD"[i % 4],
            "context": vx._paragraph(rng, i)["text"]}


def _clockbench(rng: random.Random, i: int) -> dict:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (255, 255, 255)).save(buf, format="PNG")
    h, m = rng.randint(1, 12), rng.randint(0, 59)
    ask = "Reply with JSON with keys valid, hours, minutes, seconds."
    return {"id": f"clock{i}", "image": {"bytes": buf.getvalue(), "path": None},
            "question_time": "What time does the clock show? " + ask, "question_shift": "Add 3 hours. " + ask,
            "question_angle": "Turn the minute hand 90 degrees. " + ask, "question_zone": "Now in Tokyo? " + ask,
            "target_time": json.dumps({"valid": True, "hours": h, "minutes": m, "seconds": None}),
            "target_shift": json.dumps({"valid": True, "hours": (h + 3) % 12, "minutes": m, "seconds": None}),
            "target_angle": json.dumps({"valid": True, "hours": h, "minutes": (m + 15) % 60, "seconds": None}),
            "target_zone": json.dumps({"valid": False})}


STANDINS.update({"google/boolq": (_boolq, 8), "Rowan/hellaswag": (_hellaswag, 8),
                 "allenai/winogrande": (_winogrande, 8), "cais/mmlu": (_mmlu, 8), "allenai/ai2_arc": (_arc, 8),
                 "truthful_qa": (_truthfulqa, 8), "DatologyAI/legalbench": (_legalbench, 8),
                 "kalomaze/ascii-tree-mix-it1": (_ascii_tree, 8), "justus27/pydantic-adherance-test": (_pydantic, 8),
                 "allenai/RLVR-IFeval": (_ifeval, 8), "THUDM/LongBench-v2": (_longbench, 8),
                 "nmayorga7/clockbench": (_clockbench, 4)})


def _skyrl_question(rng: random.Random, i: int) -> dict:
    return [{"db_id": "farm", "question": "How many pigs are there?",
             "query": "SELECT COUNT(*) FROM animals WHERE species = 'pig'"},
            {"db_id": "farm", "question": "How old is the oldest animal?",
             "query": "SELECT MAX(age) FROM animals"}][i % 2]


SKYRL_STANDIN = "standin/skyrl-sql-farm"  # its data_path branch calls load_dataset(".json"), which fails anywhere
STANDINS[SKYRL_STANDIN] = (_skyrl_question, 4)


def _skyrl_sql_args(work: Path) -> dict:
    """A SQLite database in the layout skyrl_sql reads (db_roots/<db_id>/<db_id>.sqlite), questions by hf_path."""
    import sqlite3

    db = work / "skyrl_dbs" / "farm" / "farm.sqlite"
    db.parent.mkdir(parents=True, exist_ok=True)
    db.unlink(missing_ok=True)
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE animals (id INTEGER PRIMARY KEY, species TEXT, age INTEGER)")
        conn.executemany("INSERT INTO animals (species, age) VALUES (?, ?)", [("pig", 2), ("cow", 5), ("pig", 1)])
    return {"hf_path": SKYRL_STANDIN, "dataset_split": "train", "db_roots": [str(db.parent.parent)]}


def _synlogic(rng: random.Random, i: int) -> dict:
    a, b = rng.randint(2, 50), rng.randint(2, 50)
    return {"prompt": f"What is {a} + {b}? Answer with the number.", "data_source": "synlogic/arithmetic",
            "extra_info": {"game_data_str": json.dumps({"answer": str(a + b)})}}


STANDINS["MiniMaxAI/SynLogic"] = (_synlogic, 8)


def _synlogic_args(work: Path) -> dict:
    """SynLogic's verifiers come from a clone of its repository (repo_root/task2verifier.py): one task here."""
    repo = work / "synlogic_repo"
    repo.mkdir(exist_ok=True)
    (repo / "task2verifier.py").write_text(
        "class Arithmetic:\n    def verify(self, data, text):\n        return data.answer in text\n\n\n"
        "verifier_classes = {'arithmetic': Arithmetic}\n")
    return {"repo_root": str(repo), "num_eval_examples": 4}


# name -> load_environment arguments (a function of the work dir where files are made)
ALL_ENVS = {**ENVS, **OFFLINE_ENVS}
ENV_ARGS = {"skyrl_sql": _skyrl_sql_args, "synlogic": _synlogic_args, "legalbench": lambda work: {"use_think": True},
            "allenai_ifeval": lambda work: {"use_think": True}}


def _patch_sandbox_client(client_module) -> None:
    """Record each command the local sandbox runs (and each file put outside what persists) to LOG_VAR's file."""
    path = os.environ.get(LOG_VAR)
    if not path:
        return
    cls = client_module.LocalSandboxClient

    def record(**row) -> None:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")

    def wrap(name, describe):
        original = getattr(cls, name)

        async def wrapped(self, sandbox_id, *args, **kwargs):
            try:
                result = await original(self, sandbox_id, *args, **kwargs)
            except Exception as e:
                record(what=describe(args, kwargs), ok=False, why=f"{type(e).__name__}: {e}")
                raise
            if name == "execute_command" and result.exit_code != 0:
                lines = [ln for ln in (result.stderr or result.stdout).splitlines() if ln.strip()]
                record(what=describe(args, kwargs), ok=False,
                       why=f"exit {result.exit_code}: " + (lines[-1].strip()[:160] if lines else "(no output)"))
            else:
                record(what=describe(args, kwargs), ok=True)
            return result

        setattr(cls, name, wrapped)

    wrap("execute_command", lambda a, k: " ".join((a[0] if a else k.get("command", "")).split())[:90])
    wrap("upload_file", lambda a, k: f"upload_file {a[0] if a else k.get('file_path')}")


# files an environment fetches with `requests.get` (raw GitHub, unreachable here) -> their stand-in text
_NYT_GROUPS = [("FRUIT", ["APPLE", "GRAPE", "LEMON", "MANGO"]), ("TREES", ["OAK", "ELM", "ASH", "FIR"]),
               ("COLORS", ["RED", "BLUE", "GREEN", "PINK"]), ("PETS", ["DOG", "CAT", "FISH", "BIRD"])]


def _nyt_games() -> str:
    return json.dumps([{"id": i, "date": f"2024-01-{i + 1:02d}", "answers": [
        {"level": lvl, "group": g, "members": m} for lvl, (g, m) in enumerate(_NYT_GROUPS)]} for i in range(8)])


URL_STANDINS = {
    "https://raw.githubusercontent.com/Eyefyre/NYT-Connections-Answers/refs/heads/main/connections.json": _nyt_games,
    "https://raw.githubusercontent.com/dwyl/english-words/master/words_alpha.txt": lambda: "\n".join(
        ["hat", "bat", "cat", "cats", "mine", "line", "lung", "long", "layer", "payer", "pattern", "camping",
         "avoid", "traveller", "origin", "abysmal"]),
}


def _patch_requests(requests_module) -> None:
    original = requests_module.get

    def get(url, *args, **kwargs):
        if url not in URL_STANDINS:
            return original(url, *args, **kwargs)
        print(f"[prime_sandbox_envs] stand-in for {url}", file=sys.stderr, flush=True)
        response = requests_module.Response()
        response.status_code, response.url, response.encoding = 200, url, "utf-8"
        response._content = URL_STANDINS[url]().encode()
        return response

    requests_module.get = get
    requests_module.api.get = get


def install_standins() -> None:
    """Called by the generated sitecustomize in every Python process vf-eval starts."""
    vx.STANDINS.update(STANDINS)
    vx._PATCHES["requests"] = _patch_requests
    vx._PATCHES["verifiers_rl.sandbox.client"] = _patch_sandbox_client
    vx.install_standins()


def write_shim(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
        "import prime_sandbox_envs as _ps\n"
        "sys.path.pop(0)\n"
        "_ps.install_standins()\n")
    return folder


# --- one environment ---------------------------------------------------------------------------------------------
def extract(source: Path, commit: str, names: list[str], dest: Path) -> Path:
    if (source / "environments").is_dir():
        for name in names:
            shutil.copytree(source / "environments" / name, dest / "environments" / name)
    else:
        archive = subprocess.run(["git", "-C", str(source), "archive", commit,
                                  *[f"environments/{n}" for n in names]], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest / "environments"


def _rollouts(out: Path) -> dict:
    rows = [json.loads(ln) for ln in out.read_text().splitlines() if ln.strip()] if out.exists() else []
    errors = [str(r["error"]).strip().splitlines()[0] for r in rows if r.get("error")]
    reward_errors = [f"{k}: {v}" for r in rows for k, v in (r.get("reward_errors") or {}).items()]
    rewards = [r["reward"] for r in rows if isinstance(r.get("reward"), (int, float))]
    return {"rollouts": len(rows), "errors": len(errors) + len(reward_errors),
            "first_error": (errors + reward_errors or [None])[0],
            "reward": round(sum(rewards) / len(rewards), 4) if rewards else None,
            "stop_conditions": sorted({str(r.get("stop_condition")) for r in rows})}


def _commands(log: Path) -> dict:
    rows = [json.loads(ln) for ln in log.read_text().splitlines() if ln.strip()] if log.exists() else []
    failed = [r for r in rows if not r["ok"]]
    return {"commands": len(rows), "commands_failed": len(failed),
            "first_failed": f"`{failed[0]['what']}` -> {failed[0]['why']}" if failed else None}


def run_env(name: str, env_root: Path, work: Path, venv: Path, model: Path, shim: Path, args) -> dict:
    out, log = work / f"{name}.rollouts.jsonl", work / f"{name}.sandbox.jsonl"
    pythonpath = os.pathsep.join(filter(None, [str(shim), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VF_VERIFIERS_RUNTIME": "ours", "PYTHONPATH": pythonpath, LOG_VAR: str(log), "VIRTUAL_ENV": str(venv),
           "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmd = [str(venv / "bin" / "vfrl-eval"), name, "--env-path", str(env_root / name), "-m", str(model),
           "-n", str(args.num_examples), "-r", "1", "-t", str(args.max_tokens), "-o", str(out)]
    if name in ENV_ARGS:
        cmd += ["-a", json.dumps(ENV_ARGS[name](work))]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=args.timeout, check=False)
        rc, text = p.returncode, p.stdout + "\n" + p.stderr
    except subprocess.TimeoutExpired:
        rc, text = None, ""
    result = {"env": name, "needs": ALL_ENVS[name], "seconds": round(time.monotonic() - t0, 1),
              "workaround": WORKAROUNDS.get(name, (None,))[0],
              "standins": sorted({ln.split("stand-in for ")[1].split()[0] for ln in text.splitlines()
                                  if "stand-in for " in ln}), **_commands(log)}
    if rc is None:
        return {**result, "status": "fails", "error": f"timed out after {args.timeout}s"}
    if rc != 0:
        return {**result, "status": "fails", "error": vx.first_error_line(text),
                "at": vx.error_site(text, [vx.REPO, env_root, venv])}
    result.update(_rollouts(out))
    ok = result["rollouts"] > 0 and result["errors"] == 0
    return {**result, "status": "runs" if ok else "fails", "error": None if ok else result["first_error"]}


def describe(r: dict) -> str:
    if r["status"] == "runs":
        line = f"runs: {r['rollouts']} rollouts, {r['errors']} errors, reward {r['reward']}"
    else:
        line = f"fails: {r['error']}" + (f" (at {r['at']})" if r.get("at") else "")
        if r.get("rollouts"):
            line += f"; {r['rollouts']} rollouts, {r['errors']} errors"
    if r.get("commands"):
        line += f"; sandbox commands failed {r['commands_failed']}/{r['commands']}"
        line += f", first {r['first_failed']}" if r.get("first_failed") else ""
    if r.get("standins"):
        line += f"; stand-in for {', '.join(r['standins'])}"
    if r.get("workaround"):
        line += f"; venv workaround: {r['workaround']}"
    return f"{r['env']:22s} {line}; needs: {r['needs']}"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", type=Path, help="a prime-environments checkout or git mirror (or a folder with "
                                             "environments/)")
    p.add_argument("--commit", default="HEAD", help="commit to extract (default HEAD)")
    p.add_argument("--set", choices=["sandbox", "offline"], default="sandbox",
                   help="sandbox: the SandboxEnv environments (default); offline: environments that score with no "
                        "sandbox, key, judge or search (OFFLINE_ENVS), hub datasets stood in")
    p.add_argument("--only", nargs="+", metavar="NAME", choices=sorted(ALL_ENVS), help="run only these environments")
    vx.add_run_options(p, venv_default=CACHE / "venv")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    names = args.only or sorted(ENVS if args.set == "sandbox" else OFFLINE_ENVS, key=str.lower)
    work = Path(tempfile.mkdtemp(prefix="prime-sandbox-envs-"))
    try:
        env_root = extract(args.source, args.commit, names, work)
        args.venv.parent.mkdir(parents=True, exist_ok=True)
        install_failed = vx.ensure_venv(args.venv, env_root, names, args.reinstall)
        apply_workarounds(args.venv, names)
        model = CACHE / "tiny-model-16k"
        if not (model / "config.json").exists():
            subprocess.run([str(args.venv / "bin" / "vfrl-tiny-model"), str(model), "--max-positions", "16384",
                            "--force"], check=True, capture_output=True)
        shim = write_shim(work / "shim")
        results = []
        for name in names:  # one at a time: each rollout's sandbox commands take the CPU
            if name in install_failed and name not in WORKAROUNDS:
                results.append({"env": name, "needs": ALL_ENVS[name], "status": "fails",
                                "error": install_failed[name]})
            else:
                results.append(run_env(name, env_root, work, args.venv, model, shim, args))
            if not args.json:
                print(describe(results[-1]), flush=True)
        runs = sum(r["status"] == "runs" for r in results)
        kind = "SandboxEnv environments" if args.set == "sandbox" else "offline environments"
        summary = f"{runs} of {len(results)} {kind} run unedited (tiny model, stand-ins" + (
            ", local sandbox)" if args.set == "sandbox" else ")")
        print(json.dumps({"source": str(args.source), "commit": args.commit, "results": results,
                          "figure": summary}, indent=2) if args.json else "\n" + summary)
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if runs else 1  # a figure of none running is a failed benchmark


if __name__ == "__main__":
    raise SystemExit(main())
