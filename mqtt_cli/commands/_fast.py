"""The one-shot fast path: plain `mqtt pub`, `mqtt sub -C N` and `mqtt rr` without typer, rich or trio.

Loading typer (and click), rich and trio costs several times what the work of a one-shot publish does.
`mqtt_cli/__main__.py` hands `pub`, `sub` and `rr` here first. :func:`parse` reads the arguments as typer
would, but only the forms it fully understands, from the same option table typer's signature is written from
(_client_options.py: names, kind, bounds, environment variable; tests/commands/test_fast.py checks the values
parsed against typer's for each option); an option the fast path does not run
(TLS, --reconnect, -l, --output, ...), --help, a value that is not written plainly (`-q 7`, `-p x`, a value
starting with `-`), a positional argument, `--` or an unknown option give None, and the command goes to typer,
which gives its own results and errors. A parsed command is checked by the same functions as the typer
command's (_plans.py), and runs on the blocking client (net/blocking.py) when its endpoint is plain TCP;
otherwise it also goes to typer. `MQTT_CLI_FAST=0` turns the fast path off.

Fast: pub with -m, -f, -s or -n (not -l or --json-lines); sub when -C, -E or --retained-only bounds it (not
with -U, --output, --stats or --remove-retained); rr; each with the connection options but TLS, --unix,
--reconnect and a -P without a value (the prompt), over mqtt:// only.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from enum import Enum
from typing import TYPE_CHECKING, Any

from mqtt_cli import PROG_NAME
from mqtt_cli.commands import say
from mqtt_cli.core.records import record
from mqtt_cli.exit_codes import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_TIMEOUT

from ._client_options import CONNECTION_PARAMS, OPTIONS, Kind, Opt

if TYPE_CHECKING:
    from mqtt_cli.net.blocking import BlockingClient
    from mqtt_cli.net.settings import ClientSettings

#: The switch: MQTT_CLI_FAST=0 sends every command to typer.
FAST_ENV = "MQTT_CLI_FAST"


def plain_int(value: str) -> bool:
    """A number written plainly (-?(0|[1-9][0-9]{0,17})): what the fast path converts itself. (String tests rather
    than a regular expression: compiling one costs more than all the tests of a command line.)"""
    digits = value[1:] if value[:1] == "-" else value
    return digits.isascii() and digits.isdigit() and len(digits) <= 18 and (digits[0] != "0" or digits == "0")


def plain_float(value: str) -> bool:
    """A decimal written plainly (-?[0-9]{1,15}(.[0-9]{1,15})?): what the fast path converts itself."""
    whole, dot, fraction = (value[1:] if value[:1] == "-" else value).partition(".")
    if not (whole.isascii() and whole.isdigit() and len(whole) <= 15):
        return False
    return not dot or (fraction.isascii() and fraction.isdigit() and len(fraction) <= 15)


#: Each client command's options by name, as the parser looks them up.
OPTION_NAMES = {command: {name: opt for opt in opts for name in opt.names} for command, opts in OPTIONS.items()}


class Source(Enum):
    """Where a value came from, named as click's ParameterSource members are (what _settings asks)."""

    COMMANDLINE = "commandline"
    ENVIRONMENT = "environment"
    DEFAULT = "default"


@record
class Parsed:
    """A command line the fast path understood: the parameter values typer would pass, and their sources."""

    command: str
    params: dict[str, Any]
    sources: dict[str, Source]

    def get_parameter_source(self, name: str) -> Source | None:
        return self.sources.get(name)


def _convert(opt: Opt, value: str) -> Any:
    """`value` as typer would convert it for `opt`, or None when typer must decide (and say what is wrong)."""
    if opt.kind is Kind.STR or opt.kind is Kind.LIST:
        return value
    if opt.kind is Kind.PATH:
        from pathlib import Path  # only for -f: pathlib brings urllib and ipaddress along

        return Path(value) if "\0" not in value else None
    if opt.kind is Kind.INT:
        if not plain_int(value):
            return None
        number: float = int(value)
    else:
        if not plain_float(value):
            return None
        number = float(value)
    if (opt.lo is not None and number < opt.lo) or (opt.hi is not None and number > opt.hi):
        return None
    return number


def parse(args: list[str], environ: dict[str, str] | os._Environ[str] = os.environ) -> Parsed | None:
    """`mqtt pub|sub|rr ARGS` as typer would parse it, or None for anything the fast path leaves to typer."""
    if not args or args[0] not in OPTIONS:
        return None
    command, by_name = args[0], OPTION_NAMES[args[0]]
    if "-D" in args or "--property" in args:  # mosquitto's -D COMMAND NAME VALUE: one value each (_dprops.py)
        from ._dprops import gather

        args = gather(args, lambda token: (opt := by_name.get(token)) is not None and opt.kind is not Kind.FLAG)
    given: dict[str, Any] = {}
    i, n = 1, len(args)
    while i < n:
        token = args[i]
        i += 1
        if len(token) < 2 or token[0] != "-" or token == "--":
            return None  # a positional argument, `-`, `--`
        if token.startswith("--"):
            name, eq, attached = token.partition("=")
            opt = by_name.get(name)
            if opt is None or not opt.fast or (opt.kind is Kind.FLAG and eq):
                return None
            if opt.kind is Kind.FLAG:
                given[opt.param] = True
                continue
            if eq:
                value = attached
            else:
                if i >= n or (args[i][:1] == "-" and args[i] != "-"):
                    return None  # no value, or one that looks like an option (-P's prompt, a negative number)
                value = args[i]
                i += 1
        else:
            opt = by_name.get(token[:2])
            if opt is None or not opt.fast:
                return None
            if opt.kind is Kind.FLAG:
                for letter in token[1:]:  # a cluster of flags: -vN
                    flag = by_name.get("-" + letter)
                    if flag is None or not flag.fast or flag.kind is not Kind.FLAG:
                        return None
                    given[flag.param] = True
                continue
            if len(token) > 2:
                value = token[2:]  # -q1
            else:
                if i >= n or (args[i][:1] == "-" and args[i] != "-"):
                    return None
                value = args[i]
                i += 1
        converted = _convert(opt, value)
        if converted is None:
            return None
        if opt.kind is Kind.LIST:
            given.setdefault(opt.param, []).append(converted)
        else:
            given[opt.param] = converted  # given twice: the last one counts, as with click
    params: dict[str, Any] = {}
    sources: dict[str, Source] = {}
    for opt in OPTIONS[command]:
        if opt.param in given:
            params[opt.param], sources[opt.param] = given[opt.param], Source.COMMANDLINE
            continue
        raw = environ.get(opt.env) if opt.env else None
        if raw:  # click ignores an empty variable
            converted = _convert(opt, raw)
            if converted is None:
                return None
            params[opt.param], sources[opt.param] = converted, Source.ENVIRONMENT
        else:
            params[opt.param], sources[opt.param] = opt.default, Source.DEFAULT
    return Parsed(command, params, sources)


# --- running ---------------------------------------------------------------------------------------------------


class _Stopped(BaseException):
    """SIGINT or SIGTERM: the work stops, DISCONNECT goes out, the exit code says which signal."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class _Signals:
    """The trio path's rule (commands/_runner.py): the first signal stops the work and DISCONNECT still goes
    out; once the work is done a first signal is ignored; a second one ends everything at once."""

    def __init__(self) -> None:
        import signal

        self.seen = 0
        self.finishing = False
        self.code = 0
        for signum, code in ((signal.SIGINT, EXIT_INTERRUPTED), (signal.SIGTERM, EXIT_TERMINATED)):
            signal.signal(signum, self._handler(code))

    def _handler(self, code: int) -> Any:
        def handle(signum: int, frame: object) -> None:
            self.seen += 1
            self.code = self.code or code
            if self.seen == 1 and self.finishing:
                return
            raise _Stopped(self.code)

        return handle


def _check(settings: ClientSettings) -> None:
    """Before any payload is read (-s takes standard input): hand over to typer what the blocking client cannot
    do (TLS, WebSocket or a Unix socket, from a URL, the environment or a profile)."""
    from mqtt_cli.net.blocking import supports

    from ._plans import Unsupported

    if not supports(settings):
        raise Unsupported


def _plan(parsed: Parsed) -> Any:
    """The command's checks and settings (_plans.py), as the typer command works them out."""
    p = parsed.params
    own = {k: v for k, v in p.items() if k not in CONNECTION_PARAMS}
    conn = {k: p[k] for k in CONNECTION_PARAMS}
    from . import _plans

    plan = {"pub": _plans.plan_pub, "sub": _plans.plan_sub, "rr": _plans.plan_rr}[parsed.command]
    return plan(parsed, **own, conn=conn, check=_check)


def run(args: list[str]) -> int | None:
    """Runs `mqtt pub|sub|rr ARGS` on the fast path and returns its exit code, or None when typer must run it
    (nothing was sent or printed then). Usage errors exit through `fail` (SystemExit) as on the typer path."""
    if os.environ.get(FAST_ENV) == "0":
        return None
    parsed = parse(args)
    if parsed is None:
        return None
    p = parsed.params
    if parsed.command == "sub" and not (p["count"] or p["exit_on_suback"] or p["retained_only"]):
        return None  # a subscriber that runs on: the trio path (batched output, reconnecting)
    from ._plans import Unsupported

    try:
        plan = _plan(parsed)
    except Unsupported:
        return None
    except (KeyboardInterrupt, EOFError):  # reading -s's standard input, say: as click says it (Abort)
        sys.stderr.write("\n")
        say(f"{PROG_NAME}: aborted")
        return EXIT_FAILURE
    from mqtt_cli.net.blocking import BlockingClient

    client = BlockingClient(plan.settings)
    signals = _Signals()
    try:
        client.connect(while_waiting=None if parsed.command == "pub" else _load_output)
    except _Stopped as stop:
        return stop.code
    except Exception as err:
        return _client_error(err)
    finally:
        gc.enable()  # off while starting up (mqtt_cli/__main__.py): on for what may run long (pub -l, sub -C)
    try:
        try:
            if parsed.command == "pub":
                code = _pub(client, plan, p)
            elif parsed.command == "sub":
                code = _sub(client, plan, p)
            else:
                code = _rr(client, plan, p)
        finally:
            signals.finishing = True
            client.disconnect()
    except _Stopped as stop:
        client.disconnect()
        return stop.code
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except Exception as err:
        return _client_error(err)
    return code


def _load_output() -> None:
    """sub's and rr's printing, imported while the broker answers CONNECT rather than after."""
    from . import _output  # noqa: F401


def _client_error(err: Exception) -> int:
    from mqtt_cli.net.errors import ClientError

    if not isinstance(err, ClientError):
        raise err
    say(f"{PROG_NAME}: error: {err}")
    return err.exit_code


def _quiet_stdout() -> None:
    # Python would complain again when flushing stdout at exit (as commands/_runner.py does).
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


def _pub(client: BlockingClient, plan: Any, p: dict[str, Any]) -> int:
    """pub.py's work for -m, -f, -s and -n (see there)."""
    from mqtt_cli.exit_codes import EXIT_USAGE
    from mqtt_cli.net.errors import ClientError

    from . import fail
    from ._plans import fail_refused, protocol_name, publish_counts

    if plan.props and client.version != 5:
        spoken = protocol_name(client.version)
        fail(f"the broker speaks MQTT {spoken}: message properties need 5.0", EXIT_USAGE)
    try:
        for i in range(plan.repeat):
            if i and plan.repeat_delay:
                time.sleep(plan.repeat_delay)
            client.publish(plan.topic or "", plan.payload, plan.qos, plan.retain, plan.props)
        client.wait_acknowledged()
    except ClientError as err:
        if client.refused:  # the refusal is the cause; mosquitto, for one, then drops the connection
            fail_refused(client, f"; then: {err}")
        err.args = (f"{err} ({publish_counts(client)})",)
        raise
    if client.refused:
        fail_refused(client)
    return 0


def _sub(client: BlockingClient, plan: Any, p: dict[str, Any]) -> int:
    """sub.py's work (see there), for the forms the fast path takes."""
    from mqtt_cli.net.blocking import WorkTimedOut

    from ._output import Printer

    printer = Printer(plan.mode, p["fmt"], not p["no_newline"], plan.out_file, plan.form)
    if p["timeout"] is not None:  # -W counts from the connection, as with mosquitto_sub, and bounds the work
        client.deadline = time.monotonic() + p["timeout"]
    try:
        return _receive(client, plan, p, printer)
    except WorkTimedOut:
        say(f"mqtt: timed out after {p['timeout']:g} s")
        return EXIT_TIMEOUT


def _receive(client: BlockingClient, plan: Any, p: dict[str, Any], printer: Any) -> int:
    from mqtt_cli.core.events import PongReceived
    from mqtt_cli.core.packets import Subscription
    from mqtt_cli.core.topics import matches
    from mqtt_cli.exit_codes import EXIT_USAGE
    from mqtt_cli.net.errors import SubscribeRefused

    from . import fail
    from ._output import FormatError

    if plan.v5_only and client.version != 5:
        fail(f"the broker speaks MQTT 3.1.1: {', '.join(plan.v5_only)} need 5.0", EXIT_USAGE)
    subs = [
        Subscription(f, plan.qos, p["no_local"] and client.version == 5, p["retain_as_published"],
                     p["retain_handling"])
        for f in plan.filters
    ]  # fmt: skip
    codes = client.subscribe(subs, plan.subscribe_props, marker=p["retained_only"])
    refused = [(f, c) for f, c in zip(plan.filters, codes, strict=False) if c >= 0x80]
    if refused:
        from mqtt_cli.core.reasons import reason_name

        what = ", ".join(f"{f!r}: {reason_name(c, 9, client.version)}" for f, c in refused)
        raise SubscribeRefused(f"the broker refused the subscription ({what})")
    if p["exit_on_suback"]:
        return 0
    excluded = p["exclude"] or []
    count = p["count"]
    no_retained, retained_only = p["no_retained"], p["retained_only"]
    selective = no_retained or retained_only or bool(excluded)

    def warn(err: FormatError) -> None:
        say(f"mqtt: warning: {err}")

    received = 0
    while True:  # as sub.py's loop: a read's messages printed with one write
        batch = client.next_messages()
        if type(batch) is PongReceived:
            if retained_only:
                client.wait_acknowledged()
                return 0
            continue
        if selective:
            batch = [
                m for m in batch
                if not (no_retained and m.retain) and not (retained_only and not m.retain)
                and not (excluded and any(matches(f, m.topic) for f in excluded))
            ]  # fmt: skip
        done = count is not None and received + len(batch) >= count
        if done:
            batch = batch[: count - received]
        printer.write(batch, time.time(), warn)
        received += len(batch)
        if done:
            client.wait_acknowledged()
            return 0


def _rr(client: BlockingClient, plan: Any, p: dict[str, Any]) -> int:
    """rr.py's work (see there)."""
    from mqtt_cli.net.blocking import WorkTimedOut

    client.deadline = time.monotonic() + p["timeout"]  # -W counts from the connection and ends only the wait
    try:
        return _request(client, plan, p)
    except WorkTimedOut:
        say(f"mqtt: no response within {p['timeout']:g} s")
        return EXIT_TIMEOUT


def _request(client: BlockingClient, plan: Any, p: dict[str, Any]) -> int:
    from mqtt_cli.core.packets import Subscription
    from mqtt_cli.core.properties import EMPTY_PROPERTIES
    from mqtt_cli.core.reasons import reason_name
    from mqtt_cli.net.errors import PublishFailed, SubscribeRefused

    from ._output import Printer
    from ._plans import is_response

    printer = Printer(plan.mode, None, not p["no_newline"], form=plan.form)
    correlation_data = p["correlation_data"]
    correlation = correlation_data.encode() if correlation_data is not None else os.urandom(16)
    v5 = client.version == 5
    codes = client.subscribe([Subscription(plan.response_topic, plan.qos)], plan.subscribe_props if v5 else
                             EMPTY_PROPERTIES)  # fmt: skip
    if codes[0] >= 0x80:
        why = reason_name(codes[0], 9, client.version)
        raise SubscribeRefused(f"the broker refused the subscription to {plan.response_topic!r}: {why}")
    props = (
        plan.publish_props.replace(response_topic=plan.response_topic, correlation_data=correlation)
        if v5
        else EMPTY_PROPERTIES
    )
    client.publish(plan.topic, plan.payload, plan.qos, False, props)
    client.wait_acknowledged()
    if client.refused:
        raise PublishFailed(f"the broker refused the request: {reason_name(client.refused[0].reason_code, 4)}")
    while True:
        item: Any = client.next_message()
        if is_response(item, v5, correlation):
            printer(item, time.time())
            return 0
