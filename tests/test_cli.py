"""The ``mqtt`` command's shell: --help, --version, exit codes, start-up discipline."""

import itertools
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import typer

from mqtt_cli import DIST_NAME, __version__, version_text
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
    # in the order a user needs them, completions last
    assert listed[:8] == ["serve", "pub", "sub", "rr", "bridge", "dump", "analyze", "bench"]
    assert listed[-1] == "completions"


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
    assert result.stdout == version_text() + "\n"
    assert result.stderr == ""


def test_version_is_the_installed_distributions() -> None:
    import importlib.metadata
    import tomllib

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DIST_NAME == "mqttkit"
    assert project["scripts"]["mqtt"] == "mqtt_cli.__main__:main"
    assert importlib.metadata.version(DIST_NAME) == __version__


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
    assert result.stdout == version_text() + "\n"
    code = "from mqtt_cli.app import run; run(['--version'])"
    result = run([sys.executable, "-c", code])
    assert (result.returncode, result.stdout) == (0, version_text() + "\n")


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
    if not args or args == ["completions"]:  # nothing to act on: the help
        assert "Usage: mqtt" in result.stdout + result.stderr
        return
    # one line, no box, and where to read more
    assert result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert re.fullmatch(r"mqtt: error: .+ \(see 'mqtt[a-z ]* (-h|--help)'\)\n", result.stderr), result.stderr


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["pub", "-p", "70000"], {}, "mqtt: error: -p/--port: input should be less than or equal to 65535"),
        (["pub", "-t", "a", "-m", "x"], {"MQTT_PORT": "70000"}, "mqtt: error: MQTT_PORT=70000: input should be"),
        (["sub", "-q", "3"], {}, "mqtt: error: -q/--qos: input should be less than or equal to 2"),
        (["pub", "--bogus"], {}, "mqtt: error: no such option --bogus (see 'mqtt pub --help')"),
        (["pub", "--qoss", "1"], {}, "mqtt: error: no such option --qoss (did you mean --qos?)"),
        (["sub", "--retian-handling", "1"], {}, "(did you mean --retain-handling?)"),
        (["pubb"], {}, "mqtt: error: no such command 'pubb' (did you mean pub?)"),
        (["dump", "--tpye", "PUBLISH", "x.pcap"], {}, "(did you mean --type?)"),
        (["config", "show", "--bogus"], {}, "(see 'mqtt config show -h')"),
        (["config", "set"], {}, "mqtt: error: missing argument KEY (see 'mqtt config set -h')"),
        (["analyze", "ingest", "x.pcap"], {}, "mqtt: error: missing option -o/--out"),
        (["bridge", "--restart-timeout", "1"], {}, "requires 2 arguments (see 'mqtt bridge --help')"),
    ],
)
def test_usage_errors_are_one_line_naming_the_real_source(
    run: Run, mqtt_exe: Path, args: list[str], env: dict[str, str], expected: str
) -> None:
    """Where the bad value came from (the flag, or the environment variable and its value), no box, and a
    suggestion only when one is close (click's own suggested --host and --qos for --bogus)."""
    result = run([mqtt_exe, *args], env=cli_env(**env))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and expected in result.stderr, result.stderr
    assert "env var" not in result.stderr and "Possible options" not in result.stderr


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


# Short options with two meanings, on purpose: -V is the version before a command and the protocol version in the
# clients (mosquitto's letter); serve's -l names a listener, pub's reads standard input line by line (mosquitto's).
# -c: the clients' kept session (mosquitto_pub -c), serve's configuration file (mosquitto -c), passwd's create
# (mosquitto_passwd -c); -U: sub's unsubscribe (mosquitto_sub -U), passwd's update (mosquitto_passwd -U).
# mosquitto's letters on both sides: -D is mosquitto_pub's --property and mosquitto_passwd's delete.
SHORT_EXCEPTIONS = {"-V": {"--version", "--protocol-version"}, "-l": {"--listen", "--stdin-line"},
                    "-i": {"--id", "--client-id"}, "-c": {"--config", "--disable-clean-session", "create"},
                    "-U": {"--unsubscribe", "update"},
                    "-D": {"--property", "delete"}}  # fmt: skip


def test_a_short_option_means_the_same_in_every_command() -> None:
    """-t is a topic (filter) everywhere, -q a QoS, -s standard input, -c a kept session...: `mqtt dump -t 'cap/#'`
    once took -t for the packet type."""
    meanings: dict[str, set[str]] = {}

    def walk(command: typer.core.TyperCommand | typer.core.TyperGroup) -> None:
        for param in command.params:
            opts = getattr(param, "opts", [])
            longs = [o for o in opts if o.startswith("--")]
            for short in (o for o in opts if len(o) == 2 and o.startswith("-")):
                meanings.setdefault(short, set()).add(longs[0] if longs else param.name)
        for sub in getattr(command, "commands", {}).values():
            walk(sub)

    group = typer.main.get_command(app)
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        if name != "bench":  # emqtt-bench's letters, on purpose: below
            walk(command)
    mixed = {s: longs for s, longs in meanings.items() if len(longs) > 1 and longs != SHORT_EXCEPTIONS.get(s)}
    assert not mixed, mixed
    assert meanings["-t"] == {"--topic"} and meanings["-q"] == {"--qos"}
    assert "--disable-clean-session" in meanings["-c"] and meanings["-s"] == {"--stdin-file"}


# `mqtt bench` takes emqtt-bench's letters, which its users know (#22): -c clients, -i/-I intervals, -s size, -L
# the message limit, -n the first client number, -C a clean session. Its other letters mean what they do in pub/sub.
BENCH_LETTERS = {"-c": "--count", "-i": "--interval", "-I": "--interval-of-msg", "-s": "--size", "-L": "--limit",
                 "-n": "--startnumber", "-C": "--clean", "-t": "--topic", "-q": "--qos", "-r": "--retain",
                 "-V": "--protocol-version", "-k": "--keepalive", "-h": "--host", "-p": "--port",
                 "-u": "--username", "-P": "--password"}  # fmt: skip


def test_bench_takes_emqtt_bench_letters() -> None:
    import click

    group = typer.main.get_command(app)
    bench = group.get_command(click.Context(group), "bench")  # type: ignore[attr-defined]
    letters = {o: next(x for x in p.opts if x.startswith("--")) for p in bench.params for o in p.opts if len(o) == 2}
    assert letters == BENCH_LETTERS


def test_the_connection_options_and_the_exit_codes_are_defined_once() -> None:
    """pub, sub and rr get their connection options from one definition (_options.with_connection), and every
    exit code comes from mqtt_cli/exit_codes.py: no command module numbers one itself."""
    from mqtt_cli.commands._options import CONNECTION_PARAMS

    group = typer.main.get_command(app)

    def connection_options(name: str) -> set[tuple[str, ...]]:
        command = group.commands[name]  # type: ignore[attr-defined]
        return {tuple(p.opts) for p in command.params if p.name in CONNECTION_PARAMS}

    assert connection_options("pub") == connection_options("sub") == connection_options("rr")
    assert len(connection_options("pub")) == len(CONNECTION_PARAMS)
    numbered = re.compile(r"^EXIT_\w+ = \d+|exit_code = \d+", re.MULTILINE)
    for path in (REPO_ROOT / "mqtt_cli").rglob("*.py"):
        if path.name in ("exit_codes.py", "analyze.py", "serve.py"):  # analyze, serve: other branches' work
            continue
        source = path.read_text()
        assert not numbered.search(source), path
        if path.parent.name == "commands" and path.stem in ("pub", "sub", "rr"):
            assert "o.Host" not in source and "locals()" not in source, path


def test_help_placeholders_are_readable(run: Run, mqtt_exe: Path) -> None:
    """No `<bool>` after an on/off flag, no typer type names (`<int range>`, `<float,float>...`, `<list[str]>`) or
    `[0<=x<=2]` ranges: a placeholder says what to give (PORT 1..65535, 0|1|2, FILE, SECONDS)."""
    group = typer.main.get_command(app)
    paths = [[name] for name in group.commands]  # type: ignore[attr-defined]
    paths += [[name, sub] for name in ("config", "analyze") for sub in group.commands[name].commands]  # type: ignore[attr-defined]
    for path in paths:
        result = run([mqtt_exe, *path, "--help"])
        assert result.returncode == 0, (path, result.stderr)
        options = [line for line in result.stdout.splitlines() if re.match(r"^│ +(\* +)?--", line)]
        assert options, path
        for line in options:
            assert not re.search(r"<(bool|int|float|str|list|Path|tuple)|<=x|x<=|x>=", line), (path, line)
    pub = run([mqtt_exe, "pub", "--help"]).stdout
    assert re.search(r"--qos +-q +0\|1\|2 ", pub) and re.search(r"--port +-p +PORT 1\.\.65535 ", pub), pub
    assert re.search(r"--retain +-r +Retain", pub), pub  # a flag: nothing between its names and its help


@pytest.mark.parametrize("columns", [80, 100])
def test_help_at_ordinary_widths_cuts_nothing_and_breaks_no_sentence(run: Run, columns: int) -> None:
    """Every command's --help at 80 and 100 columns: every option's names whole (not `--use-identity-as-us…`), no
    `…` anywhere, and the text wrapped greedily (a hard line break of the source kept, then wrapped, left `7 a
    message was` alone on a line)."""
    group = typer.main.get_command(app)
    paths = [[name] for name in group.commands]  # type: ignore[attr-defined]
    paths += [[name, sub] for name in ("config", "analyze") for sub in group.commands[name].commands]  # type: ignore[attr-defined]
    for path in paths:
        result = run([sys.executable, "-m", "mqtt_cli", *path, "--help"], env=cli_env(COLUMNS=str(columns)))
        assert result.returncode == 0, (path, result.stderr)
        text = result.stdout
        assert "…" not in text, (path, text)
        assert max(len(line) for line in text.splitlines()) <= columns, (path, text)
        command = group
        for name in path:
            command = command.commands[name]  # type: ignore[attr-defined]
        for param in command.params:  # type: ignore[attr-defined]
            if not getattr(param, "hidden", False):
                for opt in (*param.opts, *param.secondary_opts):
                    assert re.search(rf"(^|[\s,]){re.escape(opt)}([\s,]|$)", text, re.M), (path, opt, text)
        # The command's own text (between the usage line and the first panel): each line as full as wrapping makes
        # it, i.e. the next line's first word would not have fitted after it.
        prose = text.split("╭")[0].splitlines()[3:]
        for line, after in itertools.pairwise(prose):
            if line.strip() and after.strip():
                assert len(line.rstrip()) + 1 + len(after.split()[0]) > columns - 2, (path, line, after)


def test_main_called_from_python_leaves_the_collector_as_it_found_it(capsys: pytest.CaptureFixture[str]) -> None:
    """main() turns the garbage collector off while it imports the app, and back on only if it was on."""
    import gc

    from mqtt_cli.__main__ import main

    def help_of_serve() -> None:
        with pytest.raises(SystemExit) as done:
            main(["serve", "--help"])
        assert done.value.code == 0

    gc.disable()
    try:
        help_of_serve()
        assert not gc.isenabled()
    finally:
        gc.enable()
    help_of_serve()
    assert gc.isenabled()
