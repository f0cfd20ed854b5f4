"""The wheels `pip install .` builds (hatch_build.py): a compiled one tagged for its interpreter and platform, a pure
one with no extension module; each installed into a fresh venv, where `mqtt pub` publishes to Debian's mosquitto.

The build goes through pip with build isolation (hatchling from the package index or pip's cache). The compiled
wheel reuses the checkout's build when `make install` made one (seconds); without one it compiles a copy (a
minute or two). The venvs get the wheel alone (--no-deps) and find the runtime dependencies in this interpreter's
site-packages through a .pth file, so nothing but the wheel is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import uuid
import zipfile
from pathlib import Path

import pytest

from mqtt_cli import DIST_NAME, __version__

from .brokers import Broker
from .conftest import REPO_ROOT, cli_env

pytestmark = [pytest.mark.slow, pytest.mark.network, pytest.mark.interop]

EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
#: The tag of a wheel built here with extension modules: cp311-cp311-linux_x86_64 on CPython 3.11, Linux x86-64.
PLATFORM_TAG = sysconfig.get_platform().replace("-", "_").replace(".", "_")
ABI = f"cp{sys.version_info.major}{sys.version_info.minor}"
COMPILED_TAG = f"{ABI}-{ABI}-{PLATFORM_TAG}"


def build_wheel(out: Path, *, pure: bool) -> Path:
    env = {k: v for k, v in os.environ.items() if k not in ("MQTT_CLI_PURE", "PYTHONPATH")}
    if pure:
        env["MQTT_CLI_PURE"] = "1"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q", "-w", str(out), "."],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, f"pip wheel failed:\n{result.stdout}\n{result.stderr}"
    (wheel,) = out.glob(f"{DIST_NAME}-{__version__}-*.whl")
    return wheel


def install_in_fresh_venv(wheel: Path, venv: Path) -> Path:
    """The venv's `mqtt` console script, after installing the wheel alone into a new venv."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    venv_python = venv / "bin" / "python"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv_python), "install", "--no-deps", "--no-index",
         "--disable-pip-version-check", "-q", str(wheel)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, f"pip install failed:\n{result.stdout}\n{result.stderr}"
    purelib = subprocess.run(
        [str(venv_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    # The runtime dependencies (typer, rich, trio, ...) from this interpreter; mqtt_cli itself is not among them
    # (the editable install of the checkout is a .pth of its own, not processed from a path added this way).
    (Path(purelib) / "runtime-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin" / "mqtt"


def isolated_env() -> dict[str, str]:
    """No PYTHONPATH (it would put the checkout before the installed package), no MQTT_CLI_PURE."""
    return {k: v for k, v in cli_env().items() if k not in ("PYTHONPATH", "MQTT_CLI_PURE")}


def publish_and_read_back(mqtt: Path, broker: Broker, venv: Path) -> None:
    topic = f"wheels/{uuid.uuid4().hex}"
    pub = subprocess.run(
        [str(mqtt), "pub", "-h", broker.host, "-p", str(broker.port), "-t", topic, "-m", "from a wheel", "-q", "1",
         "-r"],
        cwd=venv, env=isolated_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert pub.returncode == 0, pub.stderr
    sub = subprocess.run(
        ["mosquitto_sub", "-h", broker.host, "-p", str(broker.port), "-t", topic, "-C", "1", "-W", "10"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert sub.stdout == "from a wheel\n", sub.stderr


def origin_of_reader(venv: Path) -> str:
    probe = "import mqtt_cli.core.reader as m; print(m.__file__)"
    return subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe], cwd=venv, env=isolated_env(), capture_output=True, text=True,
        check=True,
    ).stdout.strip()  # fmt: skip


def test_the_pure_wheel_holds_no_extension_and_publishes(tmp_path: Path, mosquitto: Broker) -> None:
    wheel = build_wheel(tmp_path / "dist", pure=True)
    assert wheel.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as zf:
        assert not [name for name in zf.namelist() if name.endswith((".so", ".stamp"))]
    venv = tmp_path / "venv"
    mqtt = install_in_fresh_venv(wheel, venv)
    version = subprocess.run([str(mqtt), "--version"], env=isolated_env(), capture_output=True, text=True, cwd=venv)
    assert version.stdout == f"{DIST_NAME} {__version__} (pure Python)\n", version.stderr
    assert origin_of_reader(venv).startswith(str(venv))
    publish_and_read_back(mqtt, mosquitto, venv)


def test_the_compiled_wheel_is_tagged_for_its_interpreter_and_publishes(tmp_path: Path, mosquitto: Broker) -> None:
    compiler = sysconfig.get_config_var("CC") or "cc"
    if shutil.which(compiler.split()[0]) is None:
        pytest.skip(f"no C compiler ({compiler}): pip builds a pure wheel here (the test above)")
    wheel = build_wheel(tmp_path / "dist", pure=False)
    assert wheel.name == f"{DIST_NAME}-{__version__}-{COMPILED_TAG}.whl"
    with zipfile.ZipFile(wheel) as zf:
        extensions = [name for name in zf.namelist() if name.endswith(".so")]
        assert "mqtt_cli/compiled.stamp" in zf.namelist()
    assert f"mqtt_cli/core/reader{EXT_SUFFIX}" in extensions
    assert all(name.endswith(EXT_SUFFIX) for name in extensions)
    venv = tmp_path / "venv"
    mqtt = install_in_fresh_venv(wheel, venv)
    version = subprocess.run([str(mqtt), "--version"], env=isolated_env(), capture_output=True, text=True, cwd=venv)
    assert version.stdout == f"{DIST_NAME} {__version__} (compiled: mypyc)\n", version.stderr
    reader = origin_of_reader(venv)
    assert reader.startswith(str(venv)) and reader.endswith(EXT_SUFFIX)
    publish_and_read_back(mqtt, mosquitto, venv)
