#!/usr/bin/env bash
# On the lent GPU machine (no network): install the wheels of scripts/gpu-wheels.sh into a scratch folder (never
# over the machine's torch/transformers: `pip install --no-deps --no-index --target`), print the versions, then run
# benchmarks/gpu_check.py with the arguments given. Everything goes to $OUT/gpu-check.log as it comes (OUT defaults
# to ./gpu-check-out); gpu-check.json beside it holds the results.
#
#   bash scripts/gpu-check.sh                   # every check, about 5-8 minutes on one H100
#   bash scripts/gpu-check.sh --only engine,trl
#   bash scripts/gpu-check.sh --cpu-smoke       # toy sizes on the CPU (PYTHON=... to pick the interpreter)
#
# With the device tool: first `bash scripts/gpu-wheels.sh` here (.gpu-wheels is ignored: not in a clone), then one
# call: command `bash scripts/gpu-check.sh`, carry [".gpu-wheels"], timeout_s 600 (the checks stop themselves at
# 450 s: --budget). What comes back: $OUT/gpu-check.log and $OUT/gpu-check.json.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
export OUT=${OUT:-$REPO/gpu-check-out}
mkdir -p "$OUT"
LOG="$OUT/gpu-check.log"
PY=${PYTHON:-python3}
WHEELS=${GPU_WHEELS_DIR:-$REPO/.gpu-wheels}
SITE=${GPU_CHECK_SITE:-${TMPDIR:-/tmp}/gpu-check-site}
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false

say() { printf '%s\n' "$*" | tee -a "$LOG"; }
say "=== scripts/gpu-check.sh $* ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(uname -n), $(nproc) cores)"

# 1. which wheels: those this interpreter can use, for packages it lacks (or has too old for another wheel's needs)
PICK=$("$PY" - "$WHEELS" "$REPO/pyproject.toml" 2>&1 <<'EOF'
import sys, zipfile
from importlib import metadata
from pathlib import Path
from packaging.requirements import Requirement
from packaging.tags import sys_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

folder = Path(sys.argv[1])
ok_tags = set(sys_tags())
wheels = {}
for w in sorted(folder.glob("*.whl")):
    name, version, _, tags = parse_wheel_filename(w.name)
    if tags & ok_tags:
        wheels[canonicalize_name(name)] = (version, w)
if not wheels:
    print(f"wheels: none usable by this Python in {folder} (run scripts/gpu-wheels.sh here, carry .gpu-wheels)")
def have(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
def needs(n):
    """Requirement lines of wheel n, or of verifiers-rl itself (its pyproject.toml)."""
    if n == "verifiers-rl":
        import tomllib
        return tomllib.load(open(sys.argv[2], "rb"))["project"]["dependencies"]
    z = zipfile.ZipFile(wheels[n][1])
    meta = z.read(next(m for m in z.namelist() if m.endswith(".dist-info/METADATA"))).decode()
    return [ln.split(":", 1)[1].strip() for ln in meta.splitlines() if ln.startswith("Requires-Dist:")]
picked = {n for n in wheels if have(n) is None}
notes, changed = [], True
while changed:  # bring our newer copy of a package the image has too old for what we install
    changed = False
    for n in ["verifiers-rl"] + sorted(picked):
        for line in needs(n):
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            dep = canonicalize_name(req.name)
            mine = str(wheels[dep][0]) if dep in picked else have(req.name)
            if mine is not None and req.specifier.contains(mine, prereleases=True):
                continue
            if dep in wheels and dep not in picked and req.specifier.contains(str(wheels[dep][0]), prereleases=True):
                picked.add(dep)
                changed = True
                notes.append(f"  {dep} {wheels[dep][0]} put ahead of the image's {have(req.name)}: {n} needs {req}")
            elif mine is None and dep not in wheels:
                notes.append(f"  WARNING: {n} needs {req}: not installed here and no wheel for it")
            elif mine is not None:
                notes.append(f"  WARNING: {n} needs {req}; this machine has {mine}")
print(f"wheels: {len(picked)} of {len(wheels)} usable in {folder.name}/ to install: "
      + ", ".join(f"{n} {wheels[n][0]}" for n in sorted(picked)))
if notes:
    print("\n".join(dict.fromkeys(notes)))
for n in sorted(picked):
    print(f"PICK {wheels[n][1]}")
EOF
)
printf '%s\n' "$PICK" | grep -v '^PICK ' | tee -a "$LOG"
mapfile -t FILES < <(printf '%s\n' "$PICK" | sed -n 's/^PICK //p')
if [ ${#FILES[@]} -gt 0 ]; then
    rm -rf "$SITE"
    t0=$(date +%s)
    "$PY" -m pip install -q --disable-pip-version-check --no-deps --no-index --no-cache-dir --upgrade \
        --target "$SITE" "${FILES[@]}" 2>&1 | tee -a "$LOG"
    say "wheels: installed into $SITE in $(( $(date +%s) - t0 )) s"
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
# verifiers-rl: its code runs from this tree (gpu_check.py puts it first on sys.path), but the example environments
# and vf-setup's configs are found through the installed package's metadata (verifiers_rl/shipped.py), as in an
# editable install: install the tree itself into the scratch folder (hatchling from the wheels, no network)
if "$PY" -m pip install -q --disable-pip-version-check --no-deps --no-index --no-build-isolation --no-cache-dir \
        --upgrade --target "$SITE" "$REPO" 2>&1 | tee -a "$LOG"; [ "${PIPESTATUS[0]}" -eq 0 ]; then
    say "verifiers-rl: the working tree installed into $SITE (examples and configs in place)"
else
    say "verifiers-rl: pip install of the tree failed: its examples and configs are copied into $SITE instead"
    mkdir -p "$SITE/verifiers_rl/config/workspace/configs" "$SITE/verifiers_rl-0.1.0.dist-info"
    cp -r "$REPO/environments" "$SITE/verifiers_rl/examples"
    cp -r "$REPO/configs/vf-rl" "$SITE/verifiers_rl/config/workspace/configs/vf-rl"
    printf 'Metadata-Version: 2.1\nName: verifiers-rl\nVersion: 0.1.0\n' > "$SITE/verifiers_rl-0.1.0.dist-info/METADATA"
fi
export PYTHONPATH="$REPO:$PYTHONPATH"

# 2. versions
"$PY" - <<'EOF' 2>&1 | tee -a "$LOG"
import importlib, os, platform, sys
cvd = os.environ.get("CUDA_VISIBLE_DEVICES", "(unset)")
print(f"python {platform.python_version()} ({sys.executable}); CUDA_VISIBLE_DEVICES={cvd}")
for name in ("torch", "transformers", "peft", "accelerate", "trl", "datasets", "openai", "pydantic", "numpy", "pyarrow",
             "pandas", "huggingface_hub", "tokenizers", "safetensors", "rich", "math_verify", "verifiers_rl"):
    try:
        m = importlib.import_module(name)
        where = os.path.dirname(os.path.dirname(m.__file__ or ""))
        extra = ""
        if name == "torch":
            extra = f"; CUDA {m.version.cuda}, available {m.cuda.is_available()}, devices {m.cuda.device_count()}"
        print(f"  {name:16s} {getattr(m, '__version__', '?'):14s} {where}{extra}")
    except Exception as e:
        print(f"  {name:16s} NOT IMPORTABLE: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
EOF
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L 2>&1 | tee -a "$LOG"
    nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader 2>&1 | tee -a "$LOG"
else
    say "nvidia-smi: not found"
fi

# 3. the checks (gpu_check.py appends to the same log itself, line by line)
say "=== python benchmarks/gpu_check.py $*"
exec "$PY" benchmarks/gpu_check.py --log "$LOG" "$@"
