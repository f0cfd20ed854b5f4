"""The architecture rule, checked on the source: arrows point one way, commands -> net/... -> core.

``mqtt_cli.core`` is sans-IO: it imports no I/O, no clock, no threads, no file system, and nothing from the
layers above it. And ``mqtt_cli`` never imports paho-mqtt, which is only the tests' oracle.
Every import counts, also those inside functions, under ``if TYPE_CHECKING:`` and through
``importlib.import_module("...")`` / ``__import__("...")`` with a literal name.
"""

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "mqtt_cli"
CORE = PACKAGE / "core"

CORE_FORBIDDEN_MODULES = frozenset(
    {"trio", "socket", "ssl", "asyncio", "time", "select", "selectors", "threading", "os"}
)
CORE_FORBIDDEN_PACKAGES = (
    "mqtt_cli.net",
    "mqtt_cli.commands",
    "mqtt_cli.capture",
    "mqtt_cli.pipeline",
    "mqtt_cli.app",
    "mqtt_cli.render",
    "mqtt_cli.__main__",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, is_package: bool = False) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in ``source``, the source of ``module``."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                prefix = ".".join(base)
                target = f"{prefix}.{node.module}" if node.module else prefix
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:  # `from . import net` imports the module mqtt_cli.net
                yield node.lineno, f"{target}.{alias.name}"
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            literal = isinstance(first, ast.Constant) and isinstance(first.value, str)
            if name in ("import_module", "__import__") and literal:
                yield node.lineno, first.value


def core_violations(source: str, module: str, is_package: bool = False) -> list[str]:
    found = []
    for line, name in imported_modules(source, module, is_package):
        top = name.split(".")[0]
        above = any(name == pkg or name.startswith(pkg + ".") for pkg in CORE_FORBIDDEN_PACKAGES)
        if top in CORE_FORBIDDEN_MODULES or above:
            found.append(f"{module}:{line} imports {name}")
    return found


def python_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


# The checker itself, on made-up modules: so that a passing rule is not a blind one.
@pytest.mark.parametrize(
    ("source", "bad"),
    [
        ("import socket", True),
        ("import os.path", True),
        ("from time import monotonic", True),
        ("def f():\n    import trio\n", True),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import ssl\n", True),
        ("from ..net import client", True),
        ("from .. import commands", True),
        ("from mqtt_cli.commands import completions", True),
        ("import importlib\nimportlib.import_module('selectors')", True),
        ("__import__('threading')", True),
        ("from . import codec\nfrom .topics import TopicTrie", False),
        ("from mqtt_cli.core.packets import Publish", False),
        ("from dataclasses import dataclass\nimport struct\nimport enum", False),
        ("from .. import __version__", False),
        ("import mqtt_cli.network_helpers", False),
        ("timeout = 3  # 'import time' in a comment or string is not an import", False),
    ],
)
def test_checker_finds_forbidden_imports(source: str, bad: bool) -> None:
    assert bool(core_violations(source, "mqtt_cli.core.example")) is bad


def test_relative_imports_resolve_from_a_package_init() -> None:
    names = {name for _, name in imported_modules("from . import codec", "mqtt_cli.core", is_package=True)}
    assert "mqtt_cli.core.codec" in names


def test_core_is_sans_io_and_imports_nothing_above_it() -> None:
    files = python_files(CORE)
    if not files:
        pytest.skip("mqtt_cli/core has no modules yet")
    violations = []
    for path in files:
        source = path.read_text(encoding="utf-8")
        violations += core_violations(source, module_name(path), path.name == "__init__.py")
    assert not violations, "mqtt_cli/core must stay sans-IO:\n" + "\n".join(violations)


def test_mqtt_cli_never_imports_paho() -> None:
    files = python_files(PACKAGE)
    assert PACKAGE / "__main__.py" in files
    found = []
    for path in files:
        source = path.read_text(encoding="utf-8")
        for line, name in imported_modules(source, module_name(path), path.name == "__init__.py"):
            if name.split(".")[0] == "paho":
                found.append(f"{path.relative_to(REPO_ROOT)}:{line} imports {name}")
    assert not found, "paho-mqtt is a test oracle only:\n" + "\n".join(found)


# Exit codes are defined once, in mqtt_cli/exit_codes.py (docs/exit-codes.md): elsewhere they are used by name.
EXIT_CODES_MODULE = PACKAGE / "exit_codes.py"
_EXITING_CALLS = {"Exit": 0, "SystemExit": 0, "exit": 0, "_exit": 0, "fail": 1}  # name -> position of the code


def _number(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def exit_code_violations(source: str, where: str) -> list[str]:
    """Exit codes defined outside exit_codes.py: an ``EXIT_*`` name, an ``exit_code`` set to a number, or a
    number handed to ``fail``/``typer.Exit``/``SystemExit``/``sys.exit``/``os._exit``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")
                if name.startswith("EXIT_") or (name == "exit_code" and _number(node.value)):
                    found.append(f"{where}:{node.lineno} defines {name}")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name not in _EXITING_CALLS:
                continue
            position = _EXITING_CALLS[name]
            code = node.args[position] if len(node.args) > position else None
            code = next((k.value for k in node.keywords if k.arg == "code"), code)
            if _number(code):
                found.append(f"{where}:{node.lineno} {name}() with a bare number")
    return found


@pytest.mark.parametrize(
    ("source", "bad"),
    [
        ("EXIT_USAGE = 2", True),
        ("EXIT_USAGE: int = 2", True),
        ("class E(Exception):\n    exit_code = 3", True),
        ("fail('bad', 2)", True),
        ("fail('bad', code=2)", True),
        ("raise typer.Exit(0)", True),
        ("raise SystemExit(130)", True),
        ("sys.exit(1)", True),
        ("os._exit(0)", True),
        ("from mqtt_cli.exit_codes import EXIT_USAGE\nfail('bad', EXIT_USAGE)", False),
        ("raise typer.Exit(EXIT_OK)", False),
        ("class E(Exception):\n    exit_code = EXIT_FAILURE", False),
        ("fail('bad')", False),
        ("raise typer.Exit()", False),
    ],
)
def test_exit_code_checker(source: str, bad: bool) -> None:
    assert bool(exit_code_violations(source, "example.py")) is bad


def test_exit_codes_are_defined_only_in_exit_codes_module() -> None:
    found = []
    for path in python_files(PACKAGE):
        if path != EXIT_CODES_MODULE:
            found += exit_code_violations(path.read_text(encoding="utf-8"), str(path.relative_to(REPO_ROOT)))
    assert not found, "use the names of mqtt_cli/exit_codes.py:\n" + "\n".join(found)


# The client commands' option tables are read by the one-shot fast path at every `mqtt pub`: no typer, click,
# rich or trio there (nor anything else: the table is plain data).
OPTION_TABLES = PACKAGE / "commands" / "_client_options.py"
TABLE_ALLOWED = frozenset({"enum", "typing"})


def test_the_option_tables_import_nothing_but_the_standard_basics() -> None:
    source = OPTION_TABLES.read_text(encoding="utf-8")
    found = {name.split(".")[0] for _, name in imported_modules(source, module_name(OPTION_TABLES))}
    assert found <= TABLE_ALLOWED, found - TABLE_ALLOWED


# Commands stay thin (parse flags, call net/core, render): these functions each under 100 lines of body.
THIN = {"pub.py": ("pub",), "sub.py": ("sub",), "rr.py": ("rr",), "_settings.py": ("client_settings",)}


def test_the_client_commands_stay_thin() -> None:
    long = []
    for file, names in THIN.items():
        tree = ast.parse((PACKAGE / "commands" / file).read_text(encoding="utf-8"))
        functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for name in names:
            node = functions[name]
            lines = (node.end_lineno or node.lineno) - node.body[0].lineno + 1
            if lines >= 100:
                long.append(f"commands/{file}: {name}'s body is {lines} lines")
    assert not long, long


#: The longest function body (statements after the docstring) a module of mqtt_cli may hold: past it, a function
#: does several things and wants cutting along its own steps.
MAX_BODY_LINES = 100


def long_functions(source: str, where: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = node.body
        if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]
        lines = (node.end_lineno or node.lineno) - body[0].lineno + 1
        if lines > MAX_BODY_LINES:
            found.append(f"{where}:{node.lineno} {node.name} has a body of {lines} lines")
    return found


@pytest.mark.parametrize(("lines", "bad"), [(MAX_BODY_LINES, False), (MAX_BODY_LINES + 1, True)])
def test_long_function_checker(lines: int, bad: bool) -> None:
    source = 'def f():\n    """Doc."""\n' + "    x = 1\n" * lines
    assert bool(long_functions(source, "example.py")) is bad


def test_no_function_body_is_over_the_limit() -> None:
    found = []
    for path in python_files(PACKAGE):
        found += long_functions(path.read_text(encoding="utf-8"), str(path.relative_to(REPO_ROOT)))
    assert not found, f"cut these along their steps (at most {MAX_BODY_LINES} lines):\n" + "\n".join(found)
