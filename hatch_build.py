"""Hatchling build hook: a wheel carries the mypyc build of the hot modules when one can be had, and then says so.

`pip install .`, `pipx install .`, `pip wheel .` and `make zipapp` build a wheel through this hook:

* MQTT_CLI_PURE set (to anything but "" or "0"): a pure wheel, `py3-none-any`, with no extension module.
* The checkout has a build for this interpreter that matches its sources (`make install` made one): that build.
* Else, with a C compiler: the package is copied to a temporary directory and compiled there by
  scripts/build_compiled.py (a minute or two); the checkout is left as it was.
* No C compiler, or the compile fails: a pure wheel, and a line on standard error says why.

A wheel with extension modules is tagged for the interpreter and platform that built them (`cp311-cp311-
linux_x86_64`: hatchling infers the tag), so pip will not install it where they cannot load. Editable installs
(`make install`) get nothing from here: `make compiled` builds in place.
"""

from __future__ import annotations

import enum
import glob
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

ENV_PURE = "MQTT_CLI_PURE"  # mqtt_cli.buildmode.ENV_PURE (not imported: the build needs none of the package)
STAMP_NAME = "compiled.stamp"  # mqtt_cli.buildmode.STAMP's name
#: What compiling needs besides a C compiler (the test extra pins the same mypy for `make install`).
COMPILE_REQUIRES = ["mypy>=1.11", "setuptools>=65"]


class Plan(enum.Enum):
    PURE = "pure Python"
    CHECKOUT = "the checkout's compiled build"
    COMPILE = "compile with mypyc"


def _wants_pure() -> bool:
    return os.environ.get(ENV_PURE, "") not in ("", "0")


def _has_compiler() -> bool:
    compiler = sysconfig.get_config_var("CC") or "cc"
    return shutil.which(compiler.split()[0]) is not None


def _checkout_build_is_fresh(root: str) -> bool:
    """True when mqtt_cli.buildmode would run the checkout's compiled build under this interpreter."""
    if not os.path.exists(os.path.join(root, "mqtt_cli", STAMP_NAME)):
        return False
    probe = "from mqtt_cli import buildmode; print(buildmode.BUILD == buildmode.COMPILED_BUILD)"
    env = {k: v for k, v in os.environ.items() if k != ENV_PURE}
    result = subprocess.run([sys.executable, "-c", probe], cwd=root, env=env, capture_output=True, text=True)
    return result.returncode == 0 and result.stdout.strip() == "True"


def _compiled_files(package_parent: str) -> list[str]:
    """The extension modules and the stamp of the build in package_parent/mqtt_cli, relative to package_parent."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    package = os.path.join(package_parent, "mqtt_cli")
    found = glob.glob(os.path.join(package, "**", f"*{suffix}"), recursive=True)
    found.append(os.path.join(package, STAMP_NAME))
    return sorted(os.path.relpath(path, package_parent) for path in found)


class CompiledBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def _plan(self) -> Plan:
        if self.target_name != "wheel" or _wants_pure():
            return Plan.PURE
        if _checkout_build_is_fresh(self.root):
            return Plan.CHECKOUT
        return Plan.COMPILE if _has_compiler() else Plan.PURE

    def dependencies(self) -> list[str]:
        return COMPILE_REQUIRES if self._plan() is Plan.COMPILE else []

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        self._tmp: str | None = None
        if version == "editable":
            return
        plan = self._plan()
        if plan is Plan.CHECKOUT:
            source = self.root
        elif plan is Plan.COMPILE:
            source = self._compile()
            if source is None:
                return
        else:
            if self.target_name == "wheel" and not _wants_pure():
                sys.stderr.write("hatch_build: no C compiler: the wheel is pure Python\n")
            return
        for relative in _compiled_files(source):
            build_data["force_include"][os.path.join(source, relative)] = relative
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def _compile(self) -> str | None:
        """Compiles a copy of the package; its directory, or None (and why on standard error) when that failed."""
        self._tmp = tempfile.mkdtemp(prefix="mqttkit-wheel-")
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        shutil.copytree(
            os.path.join(self.root, "mqtt_cli"),
            os.path.join(self._tmp, "mqtt_cli"),
            ignore=shutil.ignore_patterns("__pycache__", f"*{suffix}", "core__mypyc.*", STAMP_NAME),
        )
        script = os.path.join(self.root, "scripts", "build_compiled.py")
        result = subprocess.run([sys.executable, script, "--root", self._tmp], capture_output=True, text=True)
        if result.returncode != 0:
            sys.stderr.write(result.stderr[-4000:])
            sys.stderr.write("hatch_build: the compiled build failed: the wheel is pure Python\n")
            return None
        return self._tmp

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
