"""Building an RLConfig has no side effects on the process: no environment variable written, vllm neither imported
nor looked up. W&B's variables are written when training starts (RLTrainer.train → run_settings.export_wandb_env);
CUDA and vllm are probed when the plan is made. Run in a fresh interpreter, so nothing earlier has imported anything."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = r"""
import importlib.abc, json, os, sys

asked = []

class Watch(importlib.abc.MetaPathFinder):
    # every import of vllm, and every importlib.util.find_spec("vllm") probe, passes through the meta path
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "vllm":
            asked.append(name)
        return None

sys.meta_path.insert(0, Watch())
import verifiers_rl as vf
from transformers import TrainingArguments
from verifiers_rl.trainer.run_settings import export_wandb_env

TrainingArguments(output_dir=sys.argv[1])  # what transformers itself does on first use (torch's cache dir) is not ours
before = dict(os.environ)
cfgs = [vf.RLConfig(output_dir=sys.argv[1], wandb={"project": "p-side", "entity": "e-side", "name": "n"}),
        vf.RLConfig(output_dir=sys.argv[1], use_lora=False, vllm_weight_transfer="nccl"),
        vf.RLConfig(output_dir=sys.argv[1], use_lora=False, vllm_weight_transfer="gloo", inference_backend="vllm")]
changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
probed = list(asked)
export_wandb_env(cfgs[0])
print(json.dumps({"changed": changed, "probed": probed, "report_to": cfgs[0].report_to,
                  "after_train_start": [os.environ.get("WANDB_PROJECT"), os.environ.get("WANDB_ENTITY")]}))
"""


def test_building_an_rlconfig_changes_no_environment_variable_and_probes_no_vllm(tmp_path):
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("WANDB_")}
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "out")], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["changed"] == [] and out["probed"] == []
    assert out["report_to"] == ["wandb"]  # the table still turns W&B on: a value of the config, not the process
    assert out["after_train_start"] == ["p-side", "e-side"]  # what train() start writes


def test_the_watch_sees_a_vllm_probe(tmp_path):
    """The check above can fail: the same watch records a find_spec probe and an environment write."""
    probe = SCRIPT.replace("changed = sorted", "import importlib.util; importlib.util.find_spec('vllm'); "
                                               "os.environ['WANDB_X'] = '1'\nchanged = sorted")
    r = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "out")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["probed"] == ["vllm"] and out["changed"] == ["WANDB_X"]
