"""The ``mqtt`` command's shell: --help, --version, exit codes, start-up discipline."""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import typer

from mqtt_cli import __version__
from mqtt_cli.app import app

from .conftest import REPO_ROOT, Run, cli_env

# Commands on the road map: each may appear in --help only once its module exists.
PLANNED = ("serve", "pub", "sub", "bridge", "dump", "pipeline", "bench")
PLACEHOLDER_WORDS = re.compile(r"not (yet )?implemented|coming soon|placeholder|\bTODO\b", re.IGNORECASE)


def help_commands(help_text: str) -> list[str]:
    """Command names in the 'Commands' panel of typer's rich help."""
    lines = help_text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"^╭─ Commands ─", line))
    names = []
    for line in lines[start + 1 :]:
        if line.startswith("╰"):
            break
        match = re.match(r"^│ (\S+)\s", line)
        if match:  # a line that starts a command's entry, not a continuation of its help
            names.append(match.group(1))
    return names


def registered_commands() -> set[str]:
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    return set(group.commands)


def test_help_lists_the_commands_that_exist(run: Run, mqtt_cmd: list[str]) -> None:
    result = run([*mqtt_cmd, "--help"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.lstrip().startswith("Usage: mqtt [OPTIONS] COMMAND [ARGS]...")
    listed = help_commands(result.stdout)
    assert "completions" in listed
    assert sorted(listed) == sorted(registered_commands())


def test_help_has_no_placeholders(run: Run, mqtt_exe: Path) -> None:
    listed = help_commands(run([mqtt_exe, "--help"]).stdout)
    for name in PLANNED:
        exists = (REPO_ROOT / "mqtt_cli" / "commands" / f"{name}.py").exists()
        assert (name in listed) == exists, f"{name!r} in --help but mqtt_cli/commands/{name}.py: {exists}"
    for name in listed:
        result = run([mqtt_exe, name, "--help"])
        assert result.returncode == 0, result.stderr
        assert f"Usage: mqtt {name} " in result.stdout
        assert not PLACEHOLDER_WORDS.search(result.stdout), result.stdout


def test_help_documents_version_option(run: Run, mqtt_exe: Path) -> None:
    result = run([mqtt_exe, "--help"])
    assert re.search(r"--version\s+-V\s.*Show the version and exit\.", result.stdout), result.stdout


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(run: Run, mqtt_cmd: list[str], flag: str) -> None:
    result = run([*mqtt_cmd, flag])
    assert result.returncode == 0
    assert result.stdout == f"mqtt-cli {__version__}\n"
    assert result.stderr == ""


def test_version_is_the_installed_distributions() -> None:
    import importlib.metadata
    import tomllib

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "mqtt-cli"
    assert project["scripts"]["mqtt"] == "mqtt_cli.__main__:main"
    assert importlib.metadata.version("mqtt-cli") == __version__


def test_version_fast_path_does_not_load_typer(run: Run) -> None:
    result = run([sys.executable, "-X", "importtime", "-m", "mqtt_cli", "--version"])
    assert result.returncode == 0
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()}
    assert "mqtt_cli" in imported
    assert not {"typer", "rich", "click", "trio"} & imported


def test_version_option_through_typer_gives_the_same_answer(run: Run, mqtt_exe: Path) -> None:
    # `--version` before a command is not answered by the fast path: typer's eager option answers it.
    result = run([mqtt_exe, "--version", "completions", "bash"])
    assert result.returncode == 0
    assert result.stdout == f"mqtt-cli {__version__}\n"
    code = "from mqtt_cli.app import run; run(['--version'])"
    result = run([sys.executable, "-c", code])
    assert (result.returncode, result.stdout) == (0, f"mqtt-cli {__version__}\n")


def test_prog_name_is_mqtt_however_started(run: Run) -> None:
    result = run([sys.executable, "-m", "mqtt_cli", "completions", "--help"])
    assert result.returncode == 0
    assert "Usage: mqtt completions [OPTIONS] " in result.stdout


@pytest.mark.parametrize(
    "args",
    [["no-such-command"], ["completions", "tcsh"], ["completions"], ["--no-such-option"], []],
    ids=["unknown-command", "bad-choice", "missing-argument", "unknown-option", "no-arguments"],
)
def test_usage_errors_exit_2(run: Run, mqtt_exe: Path, args: list[str]) -> None:
    result = run([mqtt_exe, *args])
    assert result.returncode == 2
    assert "Usage: mqtt" in result.stdout + result.stderr


SCRIPT = """
import sys
from mqtt_cli.app import app, run
from mqtt_cli.commands import fail

@app.command("boom")
def boom() -> None:
    raise KeyboardInterrupt

@app.command("crash")
def crash() -> None:
    password = "hunter2"
    raise RuntimeError(f"kaput {len(password)}")

@app.command("broken")
def broken() -> None:
    fail("could not connect to localhost:1")

run(sys.argv[1:])
"""


def test_runtime_error_exits_1_with_message(run: Run) -> None:
    result = run([sys.executable, "-c", textwrap.dedent(SCRIPT), "broken"])
    assert result.returncode == 1
    assert result.stderr == "mqtt: error: could not connect to localhost:1\n"


def test_unexpected_exception_exits_1_without_showing_locals(run: Run) -> None:
    result = run([sys.executable, "-c", textwrap.dedent(SCRIPT), "crash"])
    assert result.returncode == 1
    assert "RuntimeError: kaput 7" in result.stderr
    assert "hunter2" not in result.stderr + result.stdout


def test_interrupt_exits_130(run: Run) -> None:
    result = run([sys.executable, "-c", textwrap.dedent(SCRIPT), "boom"])
    assert result.returncode == 130


def test_importing_the_app_stays_light() -> None:
    # Commands import their heavy dependencies inside their functions: start-up pays only for typer.
    code = "import sys, mqtt_cli.app; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=cli_env()).stdout
    modules = set(out.split())
    heavy = {"trio", "rich", "asyncio", "pydantic", "paho", "pyspark", "sqlite3", "ssl"}
    assert not heavy & {m.split(".")[0] for m in modules}
    deferred = ("mqtt_cli.net", "mqtt_cli.capture", "mqtt_cli.pipeline", "mqtt_cli.render")
    assert not [m for m in modules if m.startswith(deferred)]


@pytest.mark.parametrize(
    ("code", "returncode", "stdout"),
    [
        ("print('out', end=''); _exit_now(SystemExit(4)); print('not reached')", 4, "out"),
        ("import atexit; atexit.register(print, 'atexit ran'); _exit_now(SystemExit(None))", 0, "atexit ran\n"),
        ("_exit_now(SystemExit('text')); print('returned')", 0, "returned\n"),
        ("_exit_now(SystemExit(300)); print('returned')", 0, "returned\n"),
        (
            "import threading; e = threading.Event(); threading.Thread(target=e.wait).start()\n"
            "_exit_now(SystemExit(3)); print('returned'); e.set()",
            0,
            "returned\n",
        ),
    ],
    ids=["exits-with-code", "runs-atexit", "text-code", "code-out-of-range", "non-daemon-thread"],
)
def test_fast_exit_only_when_nothing_is_lost(code: str, returncode: int, stdout: str) -> None:
    # mqtt_cli.__main__ skips the interpreter's teardown only when that loses nothing.
    result = subprocess.run(
        [sys.executable, "-c", "from mqtt_cli.__main__ import _exit_now\n" + code], capture_output=True, text=True
    )
    assert (result.returncode, result.stdout) == (returncode, stdout)


@pytest.mark.parametrize("name", ["pub", "sub", "rr"])
def test_password_rewrite_knows_every_option_of_the_client_commands(name: str) -> None:
    from mqtt_cli.commands._options import FLAG_OPTIONS, VALUE_OPTIONS

    command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    options = [p for p in command.params if p.param_type_name == "option"]
    values = {o for p in options if not p.is_flag for o in p.opts}
    flags = {o for p in options if p.is_flag for o in (*p.opts, *p.secondary_opts)} | {"--help"}
    assert (set(VALUE_OPTIONS[name]), set(FLAG_OPTIONS[name])) == (values, flags)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["pub", "-t", "a", "-P"], ["pub", "-t", "a", "--password-prompt"]),
        (["pub", "-P", "-t", "a"], ["pub", "--password-prompt", "-t", "a"]),
        (["pub", "--password", "--qos=1"], ["pub", "--password-prompt", "--qos=1"]),
        (["sub", "-P", "-vN"], ["sub", "--password-prompt", "-vN"]),
        (["pub", "-P", "-q1"], ["pub", "--password-prompt", "-q1"]),
        # values are not options: the payload of -m, a password starting with '-'
        (["pub", "-t", "a", "-m", "-P"], ["pub", "-t", "a", "-m", "-P"]),
        (["pub", "-m", "--password", "-t", "a"], ["pub", "-m", "--password", "-t", "a"]),
        (["pub", "-u", "bob", "-P", "-dash-pw"], ["pub", "-u", "bob", "-P", "-dash-pw"]),
        (["pub", "-P", "-", "-t", "a"], ["pub", "-P", "-", "-t", "a"]),
        (["pub", "--", "-P"], ["pub", "--", "-P"]),
    ],
)
def test_password_prompt_rewrite(args: list[str], expected: list[str]) -> None:
    from mqtt_cli.commands._options import rewrite_optional_values

    assert rewrite_optional_values(args) == expected
