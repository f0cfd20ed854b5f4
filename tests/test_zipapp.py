"""`make zipapp`: one file, built with shiv, that runs ``mqtt`` with its dependencies inside.

shiv pip-installs the project and its runtime dependencies into the zipapp, so the build needs the
package index (or pip's cache of it); about 10 s here.
"""

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from mqtt_cli import DIST_NAME, __version__

from .conftest import REPO_ROOT, cli_env

pytestmark = [pytest.mark.slow, pytest.mark.network]


@pytest.fixture(scope="module")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("zipapp") / "mqtt.pyz"
    # A clean make: not the jobserver or flags of a `make test` this may run under.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    result = subprocess.run(
        ["make", "--no-print-directory", "zipapp", f"ZIPAPP={out}"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, f"make zipapp failed:\n{result.stdout}\n{result.stderr}"
    assert out.is_file()
    return out


def run_pyz(pyz: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = cli_env(SHIV_ROOT=str(pyz.parent / "shiv-root"))  # shiv unpacks here, not in ~/.shiv
    return subprocess.run([str(pyz), *args], capture_output=True, text=True, env=env, timeout=120)


def test_zipapp_is_an_executable_python3_zip(pyz: Path) -> None:
    assert os.access(pyz, os.X_OK)
    assert pyz.read_bytes().startswith(b"#!/usr/bin/env python3\n")
    assert zipfile.is_zipfile(pyz)


def test_zipapp_holds_the_runtime_dependencies_only(pyz: Path) -> None:
    with zipfile.ZipFile(pyz) as zf:
        tops = {name.split("/")[1] for name in zf.namelist() if name.startswith("site-packages/")}
    assert {"mqtt_cli", "typer", "rich", "trio", "tomli_w"} <= tops
    assert not {"pytest", "hypothesis", "paho", "ruff", "shiv"} & tops


def test_zipapp_version(pyz: Path) -> None:
    result = run_pyz(pyz, "--version")
    # The zipapp carries the compiled build when the tree has one; it is used where it matches the interpreter.
    build = r"compiled: mypyc|pure Python(: .+)?"
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(rf"{DIST_NAME} {re.escape(__version__)} \(({build})\)\n", result.stdout), result.stdout


def test_zipapp_help_and_completions(pyz: Path) -> None:
    result = run_pyz(pyz, "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage: mqtt [OPTIONS] COMMAND [ARGS]..." in result.stdout
    assert "completions" in result.stdout
    result = run_pyz(pyz, "completions", "bash")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (REPO_ROOT / "completions" / "mqtt.bash").read_text()


def test_zipapp_unpacks_once_then_starts_without_shivs_bootstrap(pyz: Path, tmp_path: Path) -> None:
    root = tmp_path / "shiv-root"
    env = cli_env(SHIV_ROOT=str(root))
    first = subprocess.run([str(pyz), "--version"], capture_output=True, text=True, env=env, timeout=120)
    assert first.returncode == 0, first.stderr
    (unpacked,) = root.glob("mqtt.pyz_*/site-packages")  # the first run unpacks here (README says so)
    assert (unpacked / "mqtt_cli" / "__init__.py").is_file()
    # ...and byte-compiles (with PYTHONDONTWRITEBYTECODE set, nothing would write byte code later)
    assert list((unpacked / "mqtt_cli" / "__pycache__").glob("__init__.*.pyc"))
    again = subprocess.run(
        [sys.executable, "-X", "importtime", str(pyz), "--version"], capture_output=True, text=True, env=env,
        timeout=120,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in again.stderr.splitlines()}
    assert "mqtt_cli" in imported
    assert not {"_bootstrap", "zipfile", "json", "subprocess", "shutil"} & imported  # as shiv's bootstrap does
    # One of shiv's own settings: its bootstrap runs, and honours it.
    forced = subprocess.run([str(pyz), "--version"], capture_output=True, text=True, timeout=120,
                            env=cli_env(SHIV_ROOT=str(root), SHIV_FORCE_EXTRACT="1"))  # fmt: skip
    assert forced.stdout == first.stdout, forced.stderr
