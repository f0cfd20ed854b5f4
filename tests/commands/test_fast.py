"""The one-shot fast path (mqtt_cli/commands/_fast.py) against typer: the same options, the same parsed values
and sources for every option, everything unusual left to typer, the same results end to end against mosquitto,
and the fast path really taken (no typer, rich or trio imported) for plain forms."""

import importlib
import inspect
import itertools
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mqtt_cli.app import _build
from mqtt_cli.commands import _fast
from mqtt_cli.commands._client_options import OPTIONS, Kind, Opt
from mqtt_cli.commands._fast import FAST_ENV, parse, plain_float, plain_int

from ..brokers import Broker
from ..conftest import REPO_ROOT, cli_env
from .conftest import wait_for_output

COMMANDS = tuple(OPTIONS)


def _click(command: str) -> Any:
    return _build(command)


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MQTT_")}


# --- the option table ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_table_has_every_option_as_typer_defines_it(command: str) -> None:
    click_params = {p.name: p for p in _click(command).params if p.name != "help"}
    table = {o.param: o for o in OPTIONS[command]}
    assert set(table) == set(click_params)
    for name, param in click_params.items():
        opt = table[name]
        assert set(opt.names) == set(param.opts) | set(param.secondary_opts), name
        assert (opt.kind is Kind.FLAG) == bool(param.is_flag), name
        assert (opt.kind is Kind.LIST) == bool(param.multiple), name
        assert opt.env == param.envvar, name
        info = param.type_descriptor.parameter_info
        assert (opt.lo, opt.hi) == (info.min, info.max), name
        annotation = param.type_descriptor.annotation
        if param.multiple:
            assert annotation == list[str], name  # the fast parser's lists are of str
        else:
            kind = {bool: Kind.FLAG, int: Kind.INT, float: Kind.FLOAT, Path: Kind.PATH, str: Kind.STR}[annotation]
            assert opt.kind is kind, name
        default = param.default
        assert opt.default == (None if default in ((), []) else default), name


@pytest.mark.parametrize("command", COMMANDS)
def test_typer_and_the_fast_path_take_the_same_options(command: str) -> None:
    """Both parsers come from the command's one table (_client_options.py): typer's command has exactly the
    table's option names, the fast parser knows exactly those, and each takes a value in both exactly when the
    table says it does (a flag none, any other option one argument: the next option is read as an option)."""
    click_params = [p for p in _click(command).params if p.name != "help"]
    typer_names = {name: p for p in click_params for name in (*p.opts, *p.secondary_opts)}
    table_names = {name: opt for opt in OPTIONS[command] for name in opt.names}
    assert set(typer_names) == set(table_names) == set(_fast.OPTION_NAMES[command])
    for name, opt in table_names.items():
        param = typer_names[name]
        assert (param.is_flag, param.nargs, param.multiple) == (opt.kind is Kind.FLAG, 1, opt.kind is Kind.LIST), name
        assert _fast.OPTION_NAMES[command][name] is opt, name
        if opt.param == "d_property":  # -D COMMAND NAME VALUE: three or four arguments (_dprops.py, test_dprops.py)
            continue
        value = [] if opt.kind is Kind.FLAG else [_sample(opt)]
        parsed = parse([command, name, *value, "--debug"], _clean_env())
        if not opt.fast:
            assert parsed is None, name  # left to typer
            continue
        assert parsed is not None, name
        assert parsed.params["debug"] is True, name  # --debug was read as an option: one value taken, no more
        if value:
            assert parse([command, name], _clean_env()) is None, name  # no value: typer says so
        expected = _typer_parse([command, name, *value, "--debug"], _clean_env())[0]
        assert parsed.params[opt.param] == expected[opt.param], name


def _sample(opt: Opt) -> str:
    if opt.kind is Kind.INT:
        return str(int(opt.hi if opt.hi is not None else (opt.lo or 0) + 3))
    if opt.kind is Kind.FLOAT:
        return "2.5"
    return {Kind.PATH: "some/file.bin", Kind.LIST: "k=v"}.get(opt.kind, "a b/c")


def _spellings(opt: Opt) -> list[list[str]]:
    """Every way of giving `opt` the fast parser takes."""
    if opt.param == "d_property":  # mosquitto's -D COMMAND NAME VALUE: several arguments (_dprops.py)
        return [[name, *value] for name in opt.names for value in (["PUBLISH", "user-property", "k", "v"],
                ["connect", "session-expiry-interval", "60"])] + [["-D", "WILL", "content-type", "x", "--property",
                "SUBSCRIBE", "user-property", "-m", "-D"]]  # fmt: skip
    if opt.kind is Kind.FLAG:
        return [[name] for name in opt.names]
    value = _sample(opt)
    out: list[list[str]] = []
    for name in opt.names:
        out.append([name, value])
        out.append([f"{name}={value}"] if name.startswith("--") else [name + value])
    if opt.kind is Kind.LIST:
        out.append([opt.names[0], value, opt.names[-1], "x=y"])
    return out


def _typer_parse(args: list[str], env: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """What typer hands the command's function for `args` (values as converted, and where each came from)."""
    module = importlib.import_module(f"mqtt_cli.commands.{args[0]}")
    real = getattr(module, args[0])
    seen: dict[str, Any] = {}

    def spy(*_: Any, **kwargs: Any) -> None:
        seen.update(kwargs)

    spy.__signature__ = inspect.signature(real)  # type: ignore[attr-defined]
    spy.__annotations__ = real.__annotations__
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    setattr(module, args[0], spy)
    try:
        command = _click(args[0])
        with command.make_context(args[0], list(args[1:])) as ctx:
            command.invoke(ctx)
    finally:
        setattr(module, args[0], real)
        os.environ.clear()
        os.environ.update(saved)
    seen.pop("ctx")
    sources = {name: ctx.get_parameter_source(name).name for name in seen}
    return seen, sources


_CASES = [
    pytest.param(command, opt, spelling, id=f"{command}-{' '.join(spelling)}")
    for command in COMMANDS
    for opt in OPTIONS[command]
    for spelling in _spellings(opt)
]


@pytest.mark.parametrize(("command", "opt", "spelling"), _CASES)
def test_each_option_parses_as_typer_parses_it(command: str, opt: Opt, spelling: list[str]) -> None:
    args = [command, *spelling]
    parsed = parse(args, _clean_env())
    if not opt.fast:
        assert parsed is None  # left to typer
        return
    assert parsed is not None
    values, sources = _typer_parse(args, _clean_env())
    assert parsed.params == values
    assert {k: s.name for k, s in parsed.sources.items()} == sources


@pytest.mark.parametrize(
    ("command", "opt"), [(c, o) for c in COMMANDS for o in OPTIONS[c] if o.env], ids=lambda x: getattr(x, "param", x)
)
def test_environment_variables_as_typer_reads_them(command: str, opt: Opt) -> None:
    assert opt.env is not None
    env = {**_clean_env(), opt.env: _sample(opt) if opt.kind is not Kind.INT else "1884"}
    args = [command, "-t", "a"]
    parsed = parse(args, env)
    assert parsed is not None
    values, sources = _typer_parse(args, env)
    assert parsed.params == values
    assert {k: s.name for k, s in parsed.sources.items()} == sources
    # the command line beats the environment; an empty variable counts as unset
    for extra, empty in (([opt.names[0], _sample(opt)] if opt.fast else [], False), ([], True)):
        env2 = {**env, opt.env: ""} if empty else env
        args2 = [*args, *extra]
        parsed = parse(args2, env2)
        if parsed is None:
            continue
        values, sources = _typer_parse(args2, env2)
        assert parsed.params == values
        assert {k: s.name for k, s in parsed.sources.items()} == sources


@pytest.mark.parametrize(
    "args",
    [
        ["pub", "--help"],
        ["pub", "-t", "a", "-m", "x", "--help"],
        ["pub", "-t", "a", "-m", "x", "-q", "7"],  # out of range: typer's error
        ["pub", "-t", "a", "-m", "x", "-q", "one"],
        ["pub", "-t", "a", "-m", "x", "-p", "0x10"],
        ["pub", "-t", "a", "-m", "x", "-p", "1_000"],
        ["pub", "-t", "a", "-m", "x", "--repeat", "0"],
        ["pub", "-t"],  # no value
        ["pub", "-t", "a", "-m"],
        ["pub", "-t", "a", "-m", "-x"],  # a value that looks like an option
        ["pub", "-t", "a", "-m", "x", "-P"],  # the password prompt
        ["pub", "-t", "a", "-m", "x", "-P", "-u"],
        ["pub", "-t", "a", "-m", "x", "--", "y"],
        ["pub", "-t", "a", "-m", "x", "extra"],
        ["pub", "-t", "a", "-m", "x", "--nope"],
        ["pub", "-t", "a", "-m", "x", "--retain=1"],  # a flag with a value: typer's error
        ["pub", "-t", "a", "-m", "x", "-rq1"],  # a cluster ending with an option that takes a value
        ["pub", "-t", "a", "-m", "x", "-Z"],
        ["pub", "-t", "a", "-l"],
        ["pub", "-t", "a", "--json-lines"],
        ["pub", "-t", "a", "-m", "x", "--cafile", "ca.pem"],
        ["pub", "-t", "a", "-m", "x", "--unix", "/run/m.sock"],
        ["pub", "-t", "a", "-m", "x", "--reconnect"],
        ["sub", "-t", "a", "-U", "b", "-C", "1"],
        ["sub", "-t", "a", "--output", "f", "-C", "1"],
        ["sub", "-t", "a", "-C", "0"],
        ["sub", "-t", "a", "-C", "1", "-W", "0"],
        ["rr", "-t", "a", "-e", "b", "-m", "x", "-W", "-1"],
        ["--version", "pub"],
        ["serve"],
        [],
    ],
)
def test_anything_unusual_goes_to_typer(args: list[str]) -> None:
    assert parse(args, _clean_env()) is None


def test_an_unparsable_environment_value_goes_to_typer() -> None:
    assert parse(["pub", "-t", "a", "-m", "x"], {"MQTT_PORT": "http"}) is None


def test_plain_numbers_are_what_the_patterns_say() -> None:
    # The fast parser's string tests against the regular expressions they stand for, on every string of up to 4
    # characters from an alphabet of the edge cases (non-ASCII digits, signs, dots, letters), and long ones.
    integer, decimal = re.compile(r"-?(?:0|[1-9][0-9]{0,17})"), re.compile(r"-?[0-9]{1,15}(?:\.[0-9]{1,15})?")
    alphabet = ["-", "0", "1", "9", ".", "e", "+", " ", "_", "\u00b2", "\u0663"]
    values = ["".join(t) for n in range(5) for t in itertools.product(alphabet, repeat=n)]
    values += ["1" * 18, "1" * 19, "-" + "9" * 18, "9" * 15 + "." + "9" * 15, "9" * 16 + ".5", "1." + "2" * 16]
    for value in values:
        assert plain_int(value) == bool(integer.fullmatch(value)), value
        assert plain_float(value) == bool(decimal.fullmatch(value)), value


# --- end to end --------------------------------------------------------------------------------------------------


def _run(args: list[str], fast: bool, env: dict[str, str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    """`python -X importtime -m mqtt_cli ARGS`: its exit, output, and the modules it imported."""
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "mqtt_cli", *args],
        capture_output=True,
        env={**env, FAST_ENV: "1" if fast else "0", "PYTHONPATH": str(REPO_ROOT)},
        timeout=60,
        **kwargs,
    )


def _imported(stderr: bytes) -> set[str]:
    names = set()
    for line in stderr.decode(errors="replace").splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def _said(stderr: bytes) -> str:
    return "\n".join(line for line in stderr.decode().splitlines() if not line.startswith("import time:"))


HEAVY = {"typer", "rich", "trio", "click"}
#: Standard modules the plain forms do without (each costs a one-shot client ms; docs/PERFORMANCE.md).
AVOIDED = {"inspect", "dataclasses", "pathlib", "json", "datetime", "ssl"}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    e = cli_env(XDG_CONFIG_HOME=str(tmp_path / "config"))
    return {k: v for k, v in e.items() if not k.startswith("MQTT_")}


def _at(broker: Broker) -> list[str]:
    return ["-h", broker.host, "-p", str(broker.port)]


@pytest.mark.interop
def test_plain_forms_take_the_fast_path(mosquitto: Broker, env: dict[str, str], topic: str) -> None:
    at = _at(mosquitto)
    retained = [*at, "-t", topic, "-m", "kept", "-r", "-q", "1"]
    for args in (["pub", *retained], ["pub", *at, "-t", topic, "-m", "y"], ["sub", *at, "-t", topic, "-C", "1"],
                 ["rr", *at, "-t", f"{topic}/req", "-e", f"{topic}/resp", "-m", "q", "-W", "0.2"]):  # fmt: skip
        done = _run(args, True, env)
        loaded = _imported(done.stderr)
        assert "mqtt_cli.commands._fast" in loaded, args
        assert not loaded & HEAVY, (args, loaded & HEAVY)
        assert not loaded & AVOIDED, (args, loaded & AVOIDED)
        assert not {m for m in loaded if m.startswith(("typer.", "trio.", "rich."))}, args
        assert done.returncode == (27 if args[0] == "rr" else 0), _said(done.stderr)
    assert _run(["sub", *at, "-t", topic, "-C", "1"], True, env).stdout == b"kept\n"
    _run(["pub", *at, "-t", topic, "-n", "-r"], True, env)


@pytest.mark.interop
@pytest.mark.parametrize(
    "args",
    [
        ["pub", "-t", "{topic}", "-l"],
        ["pub", "-t", "{topic}", "-m", "x", "--help"],
        ["pub", "-t", "{topic}", "-m", "x", "-q", "7"],
        ["sub", "-t", "{topic}", "-E", "--stats"],
        ["pub", "-t", "{topic}", "-m", "x", "-L", "ws://{host}:{ws_port}/"],  # a URL the blocking client cannot do
    ],
)
def test_other_forms_go_to_typer(mosquitto: Broker, env: dict[str, str], topic: str, args: list[str]) -> None:
    fill = {"topic": topic, "host": mosquitto.host, "ws_port": mosquitto.ws_port}
    argv = [a.format(**fill) for a in args]
    if "-L" not in argv:
        argv += _at(mosquitto)
    done = _run(argv, True, env, input=b"")
    assert "typer" in _imported(done.stderr)


def _same(args: list[str], env: dict[str, str], stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    fast, slow = _run(args, True, env, input=stdin), _run(args, False, env, input=stdin)

    def seen(done: subprocess.CompletedProcess[bytes]) -> tuple[int, bytes, str]:
        stdout = re.sub(rb'"received": "[^"]*"', b'"received": "T"', done.stdout)  # --json's receive time
        return done.returncode, stdout, _said(done.stderr)

    assert seen(fast) == seen(slow), args
    return fast


@pytest.mark.interop
def test_the_same_results_as_typer(mosquitto: Broker, env: dict[str, str], topic: str, tmp_path: Path) -> None:
    at = _at(mosquitto)
    payload = tmp_path / "payload.bin"
    payload.write_bytes(b"\x00\x01binary")
    cases: list[tuple[list[str], bytes]] = [
        (["pub", *at, "-t", topic, "-m", "x"], b""),
        (["pub", *at, "-t", topic, "-m", "x", "-q", "1", "-V", "311"], b""),
        (["pub", *at, "-t", topic, "-m", "x", "-q", "2", "--repeat", "3"], b""),
        (["pub", *at, "-t", topic, "-f", str(payload), "-r"], b""),
        (["pub", *at, "-t", topic, "-s", "-q", "1", "-r"], b"from stdin"),
        (["pub", *at, "-t", topic, "-m", "x", "-i", "fast-test", "-d"], b""),
        (["pub", *at, "-t", f"{topic}/#", "-m", "x"], b""),  # usage errors: the same words, exit 2
        (["pub", *at, "-t", topic], b""),
        (["pub", *at, "-t", topic, "-m", "x", "-V", "9"], b""),
        (["pub", "-h", "127.0.0.1", "-p", "1", "-t", topic, "-m", "x"], b""),  # exit 3
        (["pub", *at, "-t", topic, "-m", "x", "--content-type", "t", "-V", "311"], b""),
        (["sub", *at, "-t", topic, "-C", "1", "-v"], b""),  # the retained message of -s above
        (["sub", *at, "-t", topic, "-C", "1", "--json", "-i", "fixed"], b""),
        (["sub", *at, "-t", topic, "-C", "1", "-F", "%t %p %q %r"], b""),
        (["sub", *at, "-t", topic, "--retained-only", "-v"], b""),
        (["sub", *at, "-t", topic, "-C", "1", "-R", "-W", "0.3"], b""),  # exit 27
        (["sub", *at, "-t", topic, "-E"], b""),
        (["sub", *at, "-t", "a/#/b", "-C", "1"], b""),
        (["rr", *at, "-t", f"{topic}/req", "-e", f"{topic}/resp", "-m", "q", "-W", "0.3"], b""),
        (["rr", *at, "-t", f"{topic}/req", "-m", "q"], b""),
    ]
    for args, stdin in cases:
        _same(args, env, stdin)
    _run(["pub", *at, "-t", topic, "-n", "-r"], True, env)


@pytest.mark.interop
def test_rr_answered_on_the_fast_path(mosquitto: Broker, env: dict[str, str], topic: str) -> None:
    """3.1.1: the first live message on the response topic is the answer; published until rr has it."""
    at = _at(mosquitto)
    run_env = {**env, "PYTHONPATH": str(REPO_ROOT)}
    requester = subprocess.Popen(
        [sys.executable, "-m", "mqtt_cli", "rr", *at, "-t", f"{topic}/req", "-e", f"{topic}/resp", "-m", "q",
         "-V", "311", "-W", "20"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=run_env,
    )  # fmt: skip
    try:
        for _ in range(200):
            subprocess.run([sys.executable, "-m", "mqtt_cli", "pub", *at, "-t", f"{topic}/resp", "-m", "answer"],
                           env=run_env, check=True)  # fmt: skip
            if requester.poll() is not None:
                break
            time.sleep(0.05)
        out, err = requester.communicate(timeout=30)
    finally:
        if requester.poll() is None:
            requester.kill()
    assert requester.returncode == 0, err
    assert out == b"answer\n"


@pytest.mark.interop
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_on_the_fast_path_says_goodbye(
    mosquitto: Broker, env: dict[str, str], topic: str, signum: int, code: int
) -> None:
    """As on the trio path: the work stops, DISCONNECT goes out (so no will), the exit code names the signal."""
    at = _at(mosquitto)
    run_env = {**env, "PYTHONPATH": str(REPO_ROOT)}
    python = [sys.executable, "-X", "importtime", "-m", "mqtt_cli"]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "env": run_env}
    watcher = subprocess.Popen([*python, "sub", *at, "-t", f"{topic}/will", "-C", "1", "-W", "30", "-d"], **pipes)
    wait_for_output(watcher, b"SUBACK")
    waiting = subprocess.Popen(
        [*python, "sub", *at, "-t", topic, "-C", "5", "-d", "--will-topic", f"{topic}/will", "--will-payload", "gone"],
        **pipes,
    )  # fmt: skip
    wait_for_output(waiting, b"SUBACK")
    waiting.send_signal(signum)
    _, err = waiting.communicate(timeout=30)
    assert waiting.returncode == code, _said(err)
    assert not _imported(err) & HEAVY
    # the first message on the will topic is this one, not the will: the goodbye was said
    subprocess.run([*python, "pub", *at, "-t", f"{topic}/will", "-m", "marker"], env=run_env, check=True)
    out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, _said(err)
    assert [line for line in out.splitlines() if not line.startswith((b"Client ", b"Subscribed"))] == [b"marker"]


def test_completion_requests_go_to_typer(env: dict[str, str]) -> None:
    """A shell asking for completions (the scripts of `mqtt completions`) is answered by typer, never run."""
    completing = {**env, "_MQTT_COMPLETE": "complete_bash", "COMP_WORDS": "mqtt pub --qo", "COMP_CWORD": "2"}
    done = _run(["pub", "-t", "x", "-m", "y"], True, completing)
    assert done.returncode == 0, _said(done.stderr)
    assert "typer" in _imported(done.stderr)
    assert "mqtt_cli.commands._fast" not in _imported(done.stderr)
    assert b"--qos" in done.stdout


@pytest.mark.interop
def test_standard_input_is_left_for_typer_when_it_runs_the_command(
    mosquitto: Broker, env: dict[str, str], topic: str
) -> None:
    """The fast path hands a ws:// URL to typer before reading -s's standard input: typer reads all of it."""
    url = f"ws://{mosquitto.host}:{mosquitto.ws_port}/"
    done = _run(["pub", "-L", url, "-t", topic, "-s", "-r", "-q", "1"], True, env, input=b"via stdin")
    assert done.returncode == 0, _said(done.stderr)
    assert "trio" in _imported(done.stderr)
    at = _at(mosquitto)
    assert _run(["sub", *at, "-t", topic, "-C", "1"], True, env).stdout == b"via stdin\n"
    _run(["pub", *at, "-t", topic, "-n", "-r"], True, env)
