#!/usr/bin/env bash
# Download, into .gpu-wheels/ (ignored), the wheels that the lent GPU machine lacks for verifiers-rl and the checks
# of benchmarks/gpu_check.py: run it HERE (it needs PyPI), then carry .gpu-wheels to the GPU machine, where
# scripts/gpu-check.sh installs them into a scratch folder (never over the machine's torch/transformers).
#
#   bash scripts/gpu-wheels.sh            # versions from uv.lock; cp312 and cp311 wheels where code is compiled
#
# What is downloaded: the closure of verifiers-rl's dependencies in uv.lock, walked from the package itself, minus
# what the GPU image already has (GPU_IMAGE_HAS below: the package list of /work/.library/device/KINDS.md, "Python
# packages already there", read 2026-11-17; the image's python3 is 3.12.3 with torch 2.11, transformers 5.17). A
# package the image has is not walked into: its own dependencies are the image's business. Set GPU_WHEELS_EXTRA
# to add names (e.g. "pyarrow pandas" for a machine without them) and GPU_WHEELS_PYTHONS for other Pythons.
# verifiers-rl itself is not downloaded: gpu-check.sh installs the working tree (hatchling, brought here too).
set -euo pipefail
cd "$(dirname "$0")/.."

DEST=${GPU_WHEELS_DIR:-.gpu-wheels}
PYTHONS=${GPU_WHEELS_PYTHONS:-"3.12 3.11"}
MAX_MIB=${GPU_WHEELS_MAX_MIB:-60}
PY=${PYTHON:-python3}

GPU_IMAGE_HAS="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers
flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib
kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py
markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind
narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc
nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir
onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging
pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11
py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham
simplejson six sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore
threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics
torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig
werkzeug wheel wrapt xarray xxhash yarl zipp"
# small pure-python packages the image has, brought anyway: gpu-check.sh puts one ahead of the image's only when the
# image's version fails a requirement of the wheels it installs (openai wants typing-extensions>=4.14, ...)
UPGRADES=${GPU_WHEELS_UPGRADES:-"typing-extensions anyio idna h11 sniffio"}

# name==version for each package to fetch, from uv.lock (markers evaluated for CPython 3.12 on Linux x86_64)
mapfile -t SPECS < <(GPU_IMAGE_HAS="$GPU_IMAGE_HAS" EXTRA="${GPU_WHEELS_EXTRA:-} $UPGRADES" "$PY" - <<'EOF'
import os, tomllib
try:
    from packaging.markers import Marker
except ImportError:
    from pip._vendor.packaging.markers import Marker

lock = {p["name"]: p for p in tomllib.load(open("uv.lock", "rb"))["package"]}
has = set(os.environ["GPU_IMAGE_HAS"].split())
env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux", "platform_system": "Linux",
       "platform_machine": "x86_64", "implementation_name": "cpython", "platform_python_implementation": "CPython",
       "os_name": "posix", "extra": ""}
want, todo = set(), [d["name"] for d in lock["verifiers-rl"]["dependencies"]] + os.environ["EXTRA"].split()
while todo:
    name = todo.pop()
    if name in want or name not in lock or (name in has and name not in os.environ["EXTRA"].split()):
        continue
    want.add(name)
    for d in lock[name].get("dependencies", []):
        if "marker" not in d or Marker(d["marker"]).evaluate(env):
            todo.append(d["name"])
for name in sorted(want):
    print(f"{name}=={lock[name]['version']}")
EOF
)
[ ${#SPECS[@]} -gt 0 ] || { echo "gpu-wheels: nothing to download (uv.lock unreadable?)" >&2; exit 1; }
echo "gpu-wheels: ${#SPECS[@]} packages from uv.lock for Python ${PYTHONS// /, }: ${SPECS[*]}"

rm -rf "$DEST"
mkdir -p "$DEST"
PLATFORMS=()
for p in manylinux2014_x86_64 manylinux_2_17_x86_64 manylinux_2_24_x86_64 manylinux_2_27_x86_64 \
         manylinux_2_28_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64 manylinux_2_35_x86_64 \
         manylinux_2_39_x86_64; do
    PLATFORMS+=(--platform "$p")
done
# the build backend, so gpu-check.sh can `pip install` the working tree itself (its examples and configs are placed
# by the install, as in an editable install: a tree on PYTHONPATH alone has none); not in uv.lock: newest releases
SPECS+=(${GPU_WHEELS_BUILD:-hatchling trove-classifiers tomlkit})
for v in $PYTHONS; do
    "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --implementation cp \
        --python-version "$v" "${PLATFORMS[@]}" -d "$DEST" "${SPECS[@]}" 2> >(grep -v "^WARNING: Location" >&2)
done

{
    echo "# wheels for the lent GPU machine: scripts/gpu-wheels.sh, $(date -u +%Y-%m-%dT%H:%MZ), Pythons $PYTHONS"
    echo "# brought only when the image's version fails a requirement: $UPGRADES"
    (cd "$DEST" && ls -l *.whl | awk '{printf "%9d  %s\n", $5, $9}')
} > "$DEST/MANIFEST.txt"
cat "$DEST/MANIFEST.txt"
bytes=$(du -cb "$DEST"/*.whl | tail -1 | cut -f1)
mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
echo "gpu-wheels: $(ls "$DEST"/*.whl | wc -l) wheels, $mib MiB in $DEST (limit $MAX_MIB MiB; the tree travels too)"
if awk -v b="$bytes" -v m="$MAX_MIB" 'BEGIN { exit !(b > m * 1048576) }'; then
    echo "gpu-wheels: over $MAX_MIB MiB: drop names from GPU_WHEELS_EXTRA or a Python from GPU_WHEELS_PYTHONS" >&2
    exit 1
fi
