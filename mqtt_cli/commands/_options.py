"""The client commands' options (pub, sub, rr) as typer reads them, written from their tables
(_client_options.py): `with_options` gives a command its signature, `rewrite_optional_values` its -P prompt.

A command hands the connection options' values to `client_settings()` (in _settings.py, without typer), which
applies the precedence: flags > environment (MQTT_HOST, MQTT_PORT, ...) > profile (``--profile``, config.toml) >
built-in defaults. Only typer and the standard library are imported here at module level (the client commands
import this module before they run).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from mqtt_cli.exit_codes import EXIT_USAGE

from ._client_options import CONN, CONNECTION, CONNECTION_PARAMS, OWN, Kind, Opt, option_names
from ._settings import VERSIONS, Resolved, client_settings, parse_user_properties, stdin_closed

_TYPES: dict[Kind, Any] = {Kind.FLAG: bool, Kind.STR: str, Kind.INT: int, Kind.FLOAT: float, Kind.PATH: Path,
                           Kind.LIST: list[str]}  # fmt: skip


def annotation(opt: Opt) -> Any:
    """`opt` as typer reads it in a signature: `Annotated[type, typer.Option(...)]`, the type optional (`| None`)
    when the default is None."""
    kind = _TYPES[opt.kind]
    settings = {"envvar": opt.env, "min": opt.lo, "max": opt.hi, "help": opt.help, "rich_help_panel": opt.panel,
                "metavar": opt.metavar}  # fmt: skip
    extra: dict[str, Any] = {key: value for key, value in settings.items() if value is not None}
    if opt.hidden:
        extra["hidden"] = True
    if not opt.show_default:
        extra["show_default"] = False
    return Annotated[kind | None if opt.default is None else kind, typer.Option(*opt.names, **extra)]


#: The connection options as typer reads them, by parameter name.
CONNECTION_OPTIONS: dict[str, Any] = {opt.param: annotation(opt) for opt in CONNECTION}


def connection_option(param: str) -> Any:
    """The connection option `param` as typer reads it, for a command that takes only some of them (bench)."""
    return CONNECTION_OPTIONS[param]


def with_options(command: Callable[..., None]) -> Callable[..., None]:
    """A client command (pub, sub or rr: the function's name) with the options of its table: typer sees them in
    the signature (after the function's own parameters, ctx), the command's own then the connection options;
    the command receives their values as two dicts, `opts` (its own, by parameter name, as the fast path
    hands them to _plans.py) and `conn` (for client_settings())."""
    import functools
    import inspect

    own = OWN[command.__name__]
    own_params = tuple(opt.param for opt in own)
    signature = inspect.signature(command)
    kept = [p for p in signature.parameters.values() if p.name not in ("opts", "conn")]
    added = [inspect.Parameter(opt.param, inspect.Parameter.KEYWORD_ONLY, default=opt.default,
                               annotation=annotation(opt)) for opt in own]  # fmt: skip
    added += [inspect.Parameter(opt.param, inspect.Parameter.KEYWORD_ONLY, default=opt.default,
                                annotation=CONNECTION_OPTIONS[opt.param]) for opt in CONNECTION]  # fmt: skip

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> None:
        opts = {name: kwargs.pop(name) for name in own_params}
        conn = {name: kwargs.pop(name) for name in CONNECTION_PARAMS}
        command(*args, opts=opts, conn=conn, **kwargs)

    run.__signature__ = signature.replace(parameters=[*kept, *added])  # type: ignore[attr-defined]
    run.__annotations__ = {**{k: v for k, v in command.__annotations__.items() if k not in ("opts", "conn")},
                           **{p.name: p.annotation for p in added}}  # fmt: skip
    return run


_PROMPT_FLAGS = ("-P", "--password")
CLIENT_COMMANDS = tuple(OWN)
#: The options of each client command that take a value, and those that do not (from its table):
#: rewrite_optional_values() must know which tokens are values.
VALUE_OPTIONS: dict[str, frozenset[str]] = {command: option_names(command)[0] for command in CLIENT_COMMANDS}
FLAG_OPTIONS: dict[str, frozenset[str]] = {command: option_names(command)[1] for command in CLIENT_COMMANDS}


def _is_option(token: str, values: frozenset[str], flags: frozenset[str]) -> bool:
    """`token` is one of the command's options: `--name`, `--name=value`, `-x`, `-xVALUE` for an option that
    takes a value, or a cluster of flags (`-vN`)."""
    if token.startswith("--"):
        name = token.partition("=")[0]
        return name in values or name in flags or token == "--"
    if len(token) < 2 or not token.startswith("-"):
        return False
    if token[:2] in values:
        return True
    return all(f"-{c}" in flags for c in token[1:])


def rewrite_optional_values(args: list[str]) -> list[str]:
    """`-P`/`--password` without a value (last, or followed by one of the command's options) asks for the
    password: click options cannot take an optional value, so that spelling becomes the hidden flag
    --password-prompt. Any other token after -P is the password, even one starting with '-' (`-P -secret`), as
    with mosquitto_pub; the value of an option that takes one (`-m -P`) is never rewritten."""
    if not args or args[0] not in CLIENT_COMMANDS or not any(a in _PROMPT_FLAGS for a in args):
        return args
    values, flags = VALUE_OPTIONS[args[0]], FLAG_OPTIONS[args[0]]
    out = list(args)
    i = 1
    while i < len(out):
        arg = out[i]
        if arg == "--":
            break
        if arg in _PROMPT_FLAGS:
            nxt = out[i + 1] if i + 1 < len(out) else None
            if nxt is None or _is_option(nxt, values, flags):
                out[i] = "--password-prompt"
                i += 1
            else:
                i += 2  # the password
        elif arg in values:
            i += 2  # the option's value, whatever it looks like
        else:
            i += 1
    return out


__all__ = ["CONN", "CONNECTION_PARAMS", "EXIT_USAGE", "VERSIONS", "Resolved", "client_settings",
           "parse_user_properties", "stdin_closed"]  # fmt: skip
