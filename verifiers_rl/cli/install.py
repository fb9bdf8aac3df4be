"""`vf-install ENV...` (also `vfrl-install`): install environment packages written for verifiers, WITHOUT the
`verifiers` package.

Community environments declare `verifiers>=0.1` with no upper bound; a plain `pip install` then pulls the
newest verifiers (0.4+, which has no classic API and pins openai < 3). This package answers `import verifiers`
itself (see verifiers_runtime), so the environment needs everything it lists except verifiers:
`uv pip install --excludes <file naming verifiers> ENV...` into this Python. `--with-verifiers` instead pins
the real package to the classic-API releases (verifiers>=0.2.1,<0.4), which then answers `import verifiers`.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from verifiers_rl.cli.common import fail, program_name


def _parser(prog: str = "vf-install") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("envs", nargs="+", metavar="ENV", help="an environment folder, or a package name/spec")
    p.add_argument("--with-verifiers", action="store_true",
                   help="also install the real verifiers, pinned to its classic-API releases (>=0.2.1,<0.4)")
    p.add_argument("--target", help="install into this folder instead of the current Python (uv's --target)")
    p.add_argument("--dry-run", action="store_true", help="print the command, run nothing")
    return p


def install_command(envs: list[str], with_verifiers: bool, target: str | None, rules_dir: Path) -> list[str]:
    uv = shutil.which("uv")
    if uv is None:
        fail("vf-install needs uv (`pip install uv`): pip cannot leave one dependency out of a resolution")
    cmd = [uv, "pip", "install", "--python", sys.executable]
    # the real verifiers pinned to its classic-API releases, or left out of the resolution
    kind, rule = ("overrides", "verifiers>=0.2.1,<0.4") if with_verifiers else ("excludes", "verifiers")
    rules = rules_dir / f"{kind}.txt"
    rules.write_text(rule + "\n")
    cmd += [f"--{kind}", str(rules)]
    if target:
        cmd += ["--target", target]
    return cmd + [str(Path(e).resolve()) if Path(e).exists() else e for e in envs]


def main(argv: list[str] | None = None) -> int:
    args = _parser(program_name("vf-install")).parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = install_command(args.envs, args.with_verifiers, args.target, Path(tmp))
        print(" ".join(cmd), file=sys.stderr)
        if args.dry_run:
            return 0
        rc = subprocess.run(cmd).returncode
    if rc != 0:
        fail(f"installing {' '.join(args.envs)} failed (uv's message is above)", code=rc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
