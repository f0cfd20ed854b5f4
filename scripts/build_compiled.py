"""Compile the hot modules (mqtt_cli.buildmode.COMPILED) with mypyc into extension modules beside their sources.

    .venv/bin/python scripts/build_compiled.py          # build (make install runs it)
    .venv/bin/python scripts/build_compiled.py --clean  # remove the build: pure Python again
    python scripts/build_compiled.py --root DIR          # build a copy of the package in DIR/mqtt_cli instead

hatch_build.py runs it with --root on a copy when a wheel is built (`pip install .`, `pip wheel .`) and the
checkout has no build for the interpreter at hand.

The `.py` files stay the only sources: mypyc turns them into C, the machine's C compiler into one shared library
(mqtt_cli/core__mypyc.*.so) and a small extension per module (mqtt_cli/core/reader.*.so next to reader.py), which
Python imports instead of the `.py` file. Last, it writes mqtt_cli/compiled.stamp, by which mqtt_cli.buildmode
tells a build that matches the sources from one left behind by an edit (then everything runs as pure Python).
Exit status: 0 built (or cleaned), 1 the build failed (no C compiler, a compile error): the old build is removed
either way, so what runs is pure Python until a build succeeds.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mqtt_cli.buildmode import COMPILED, STAMP, source_path  # noqa: E402  (after the path is set)

STAMP_NAME = os.path.basename(STAMP)

GROUP = "mqtt_cli.core"  # the shared library: mqtt_cli/core__mypyc.<suffix>


def clean(root: Path) -> None:
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    (root / "mqtt_cli" / STAMP_NAME).unlink(missing_ok=True)
    # Every extension in the package, not only those of COMPILED: one of a module since split or renamed too.
    for ext in glob.glob(str(root / "mqtt_cli" / "**" / f"*{suffix}"), recursive=True):
        os.unlink(ext)
    for lib in glob.glob(str(root / "mqtt_cli" / "core__mypyc.*")):
        os.unlink(lib)


def build(opt_level: str, root: Path) -> None:
    compiler = sysconfig.get_config_var("CC") or "cc"
    if shutil.which(compiler.split()[0]) is None:
        raise SystemExit(f"build_compiled: no C compiler ({compiler}): the hot modules run as pure Python")
    package_dir = str(root / "mqtt_cli")
    sources = [os.path.relpath(source_path(m, package_dir), root) for m in COMPILED]
    # The stamp describes the sources as they were when the build started (one edited meanwhile is then stale).
    lines = [f"interpreter {sys.implementation.cache_tag} {sys.platform}"]
    for module in COMPILED:
        path = source_path(module, package_dir)
        st = os.stat(path)
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        lines.append(f"{module} {st.st_size} {st.st_mtime_ns} {digest}")
    with tempfile.TemporaryDirectory(prefix="mqtt-cli-build-") as tmp:
        # setuptools builds in the current directory and reads a pyproject.toml there: build in an empty one whose
        # mqtt_cli is a link to ours, so that --inplace puts the extensions beside the sources.
        os.symlink(root / "mqtt_cli", Path(tmp) / "mqtt_cli")
        code = (
            "import sys\n"
            "from setuptools import setup\n"
            "from mypyc.build import mypycify\n"
            f"setup(name='mqtt-cli-compiled', packages=[], py_modules=[],\n"
            f"      ext_modules=mypycify({sources!r}, opt_level={opt_level!r}, group_name={GROUP!r}),\n"
            f"      script_args=['-q', 'build_ext', '--inplace', '--build-temp', 'build'])\n"
        )
        result = subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True)
        if result.returncode != 0:
            sys.stderr.write(result.stdout[-4000:] + result.stderr[-4000:])
            raise SystemExit(f"build_compiled: mypyc failed (exit {result.returncode}): pure Python runs")
    (root / "mqtt_cli" / STAMP_NAME).write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clean", action="store_true", help="remove the compiled build")
    parser.add_argument("--opt-level", default="3", help="the C compiler's optimisation level (mypyc's default 3)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the directory holding the mqtt_cli to build")
    args = parser.parse_args()
    root = args.root.resolve()
    clean(root)
    if args.clean:
        return
    build(args.opt_level, root)
    print(f"build_compiled: {len(COMPILED)} modules compiled with mypyc ({', '.join(COMPILED)})")


if __name__ == "__main__":
    main()
