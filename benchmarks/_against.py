"""Another commit's broker beside this checkout's: `git archive REF` into a directory, compiled there with REF's own
scripts/build_compiled.py when this checkout runs compiled (benchmarks/broker.py --against,
benchmarks/broker_instructions.py --against). Run it with PYTHONPATH pointing at the directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class AgainstError(Exception):
    """REF could not be archived or compiled (the message says why)."""


def compiled_here() -> bool:
    """Whether this checkout runs its compiled build (then REF's is compiled too, so that like meets like)."""
    sys.path.insert(0, str(ROOT))
    from mqtt_cli import buildmode

    return Path(buildmode.STAMP).exists() and not os.environ.get(buildmode.ENV_PURE)


def prepare(ref: str, tree: Path, paths: tuple[str, ...] = ("mqtt_cli", "scripts")) -> Path:
    """REF's `paths` extracted into `tree` (made here), compiled with mypyc when this checkout is; returns `tree`.
    A `tree` already holding REF's sources (a previous run's, reused) is only compiled if it is not yet."""
    if not (tree / "mqtt_cli").is_dir():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, *paths], capture_output=True, check=False)
        if archive.returncode:
            raise AgainstError(archive.stderr.decode().strip())
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    if compiled_here() and not (tree / "mqtt_cli" / "compiled.stamp").exists():
        print(f"compiling {ref} with mypyc (a minute or two)", flush=True)
        built = subprocess.run([sys.executable, str(tree / "scripts" / "build_compiled.py"), "--root", str(tree)],
                               capture_output=True, text=True, check=False)  # fmt: skip
        if built.returncode:
            raise AgainstError(f"{ref} did not compile:\n{built.stderr}")
    return tree
