"""The compiled build and the pure Python one: which runs, MQTT_CLI_PURE, a build left behind by an edit."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from mqtt_cli import DIST_NAME, __version__, buildmode, version_text

from .conftest import REPO_ROOT, cli_env

PROBE = (
    "import mqtt_cli, mqtt_cli.core.broker, mqtt_cli.core.reader as c; "
    "print(mqtt_cli.version_text()); print(c.__file__)"
)


def probe(root: Path, **env: str) -> tuple[str, str]:
    """(`mqtt --version`'s text, the file mqtt_cli.core.reader came from) in a fresh interpreter importing `root`."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=root,
        env=cli_env(PYTHONPATH=str(root), **env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    version, origin = result.stdout.splitlines()
    return version, origin


def test_version_names_the_build() -> None:
    pattern = rf"{DIST_NAME} {re.escape(__version__)} \((compiled: mypyc|pure Python(: .+)?)\)"
    assert re.fullmatch(pattern, version_text())
    import mqtt_cli.core.reader

    assert (buildmode.BUILD == "compiled: mypyc") == str(mqtt_cli.core.reader.__file__).endswith(".so")


def test_pure_switch_imports_the_sources() -> None:
    version, origin = probe(REPO_ROOT, MQTT_CLI_PURE="1")
    assert origin.endswith("reader.py")
    assert version.startswith(f"{DIST_NAME} {__version__} (pure Python")
    if Path(buildmode.STAMP).exists():
        assert version == f"{DIST_NAME} {__version__} (pure Python: MQTT_CLI_PURE is set)"
        version, origin = probe(REPO_ROOT, MQTT_CLI_PURE="0")  # "0" is not set
        assert (version, origin.endswith(".so")) == (f"{DIST_NAME} {__version__} (compiled: mypyc)", True)


def test_a_build_older_than_its_sources_is_not_used(tmp_path: Path) -> None:
    # A copy of the package with a build's stamp and extension files (empty here: they must not be imported), then
    # one source edited: everything must come from the sources, and --version say why.
    shutil.copytree(REPO_ROOT / "mqtt_cli", tmp_path / "mqtt_cli", ignore=shutil.ignore_patterns("__pycache__"))
    import hashlib
    import importlib.machinery

    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    lines = [f"interpreter {sys.implementation.cache_tag} {sys.platform}"]
    for module in buildmode.COMPILED:
        source = tmp_path / Path(*module.split(".")).with_suffix(".py")
        source.with_suffix(suffix).write_bytes(b"")  # not a loadable extension
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        lines.append(f"{module} {source.stat().st_size} {source.stat().st_mtime_ns} {digest}")
    (tmp_path / "mqtt_cli" / "compiled.stamp").write_text("\n".join(lines) + "\n")
    reader = tmp_path / "mqtt_cli" / "core" / "reader.py"
    reader.write_text(reader.read_text() + "\n# edited after the build\n")
    version, origin = probe(tmp_path)
    assert origin == str(reader)
    expected = "mqtt_cli.core.reader: the source changed since the build (make install rebuilds it)"
    assert version == f"{DIST_NAME} {__version__} (pure Python: {expected})"
    # The same edit undone (same bytes, a new mtime): the stamp's digest recognises the sources again, so the
    # build would be used; with these empty extension files that import fails loudly rather than running stale code.
    reader.write_text(reader.read_text().removesuffix("\n# edited after the build\n"))
    result = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tmp_path, env=cli_env(PYTHONPATH=str(tmp_path), MQTT_CLI_PURE="0"),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0 and "ImportError" in result.stderr


def test_a_build_of_an_older_layout_is_not_used(tmp_path: Path) -> None:
    # A build made before codec.py was split into encoder, decoder and reader: its stamp names a module whose source
    # is gone, and its extension is still there. Pure Python runs, and --version says why.
    shutil.copytree(REPO_ROOT / "mqtt_cli", tmp_path / "mqtt_cli", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    import importlib.machinery

    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    lines = [f"interpreter {sys.implementation.cache_tag} {sys.platform}"]
    for module in ("mqtt_cli.core.codec", "mqtt_cli.core.topics", "mqtt_cli.core.broker"):
        source = tmp_path / Path(*module.split(".")).with_suffix(".py")
        source.with_suffix(suffix).write_bytes(b"")  # not a loadable extension
        lines.append(f"{module} 1 1 {'0' * 64}")
    (tmp_path / "mqtt_cli" / "compiled.stamp").write_text("\n".join(lines) + "\n")
    version, origin = probe(tmp_path)
    assert origin == str(tmp_path / "mqtt_cli" / "core" / "reader.py")
    expected = "the build compiled other modules than this version names"
    assert version == f"{DIST_NAME} {__version__} (pure Python: {expected})"
