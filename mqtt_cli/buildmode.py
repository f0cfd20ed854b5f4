"""Which build of the hot modules runs: compiled with mypyc (`make install` with a C compiler) or pure Python.

scripts/build_compiled.py compiles the modules in COMPILED from their `.py` files (which stay the only sources)
into extension modules beside them (mqtt_cli/core/reader.cpython-311-x86_64-linux-gnu.so next to reader.py), and
writes STAMP: the interpreter it built for and each source's size, mtime and SHA-256. Python imports an extension
module rather than a source file of the same name; `select()` turns that around, for every compiled module
together (compiled modules call each other directly, so a mix would run old code), when

  * MQTT_CLI_PURE is set (to anything but "" or "0"),
  * a source no longer matches the stamp (edited since the build: the extension would run old code), or
  * the build is for another interpreter, or an extension is missing.

Run by mqtt_cli/__init__.py before anything imports the core: without a build it costs one failed stat, with one
a few stats. `BUILD` says what runs (`mqtt --version` shows it), `WHY_PURE` why a build present is not used.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (nothing more is imported at start-up)
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

__all__ = ["BUILD", "COMPILED", "ENV_PURE", "STAMP", "WHY_PURE", "select"]

#: The modules compiled (the hot paths: decoding and encoding, topic matching, the broker's per-message work, the
#: persistence log's records, a restore's queues, `mqtt bench`'s per-message work and paced loop).
COMPILED = (
    "mqtt_cli.core.encoder",
    "mqtt_cli.core.decoder",
    "mqtt_cli.core.reader",
    "mqtt_cli.core.topics",
    "mqtt_cli.core.broker",
    "mqtt_cli.core.admission",
    "mqtt_cli.core.attachment",
    "mqtt_cli.core.closing",
    "mqtt_cli.core.delivery",
    "mqtt_cli.core.outbox",
    "mqtt_cli.core.publishing",
    "mqtt_cli.core.routing",
    "mqtt_cli.core.storage",
    "mqtt_cli.core.systopics",
    "mqtt_cli.core.topiccheck",
    "mqtt_cli.core.session",
    "mqtt_cli.core.flows",
    "mqtt_cli.core.server",
    "mqtt_cli.core.lifecycle",
    "mqtt_cli.core.aliases",
    "mqtt_cli.core.persistence",
    "mqtt_cli.core.changelog",
    "mqtt_cli.core.packed",
    "mqtt_cli.core.sharing",
    "mqtt_cli.core.benchwire",
    "mqtt_cli.net.benchio",
    "mqtt_cli.net.benchloop",
)
ENV_PURE = "MQTT_CLI_PURE"
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
STAMP = os.path.join(_PACKAGE_DIR, "compiled.stamp")
COMPILED_BUILD = "compiled: mypyc"
PURE_BUILD = "pure Python"

BUILD = PURE_BUILD
WHY_PURE = ""


def source_path(module: str, package_dir: str = _PACKAGE_DIR) -> str:
    """The `.py` file of one of the package's modules (in this package, or in a copy of it at `package_dir`)."""
    return os.path.join(package_dir, *module.split(".")[1:]) + ".py"


def _stale(lines: Sequence[str]) -> str:
    """What is wrong with the build the stamp describes, or "" when it matches this interpreter and the sources."""
    if not lines or lines[0] != f"interpreter {sys.implementation.cache_tag} {sys.platform}":
        return "built for another interpreter"
    import importlib.machinery

    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    listed = set()
    for line in lines[1:]:
        module, size, mtime_ns, digest = line.split()
        listed.add(module)
        if module not in COMPILED:  # a build of an older layout (a module since split or renamed)
            return "the build compiled other modules than this version names"
        source = source_path(module)
        if not os.path.exists(source[:-3] + suffix):
            return f"{module}: no compiled module"
        st = os.stat(source)
        if st.st_size == int(size) and st.st_mtime_ns == int(mtime_ns):
            continue
        import hashlib

        with open(source, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != digest:
                return f"{module}: the source changed since the build (make install rebuilds it)"
    if listed != set(COMPILED):
        return "the build compiled other modules than this version names"
    return ""


class _SourceFirst:
    """A meta path finder that imports the compiled modules from their `.py` files."""

    @staticmethod
    def find_spec(name: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name not in COMPILED:
            return None
        from importlib.util import spec_from_file_location

        return spec_from_file_location(name, source_path(name))


def select() -> None:
    """Decides which build runs (once, before the core is imported)."""
    global BUILD, WHY_PURE
    try:
        with open(STAMP, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return  # no compiled build: pure Python, nothing to turn around
    try:
        why = _stale(lines)
    except (OSError, ValueError):
        why = "the build's stamp is unreadable (make install rebuilds it)"
    if not why and os.environ.get(ENV_PURE, "") not in ("", "0"):
        why = f"{ENV_PURE} is set"
    if why:
        WHY_PURE = why
        if _SourceFirst not in sys.meta_path:
            sys.meta_path.insert(0, _SourceFirst)
        return
    BUILD = COMPILED_BUILD
