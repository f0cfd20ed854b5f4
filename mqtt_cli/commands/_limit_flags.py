"""`mqtt serve`'s limit flags, one per field of core/limits.py's `Limits`: `--max-keepalive SECONDS`, ...

Made from the fields (name, unit, default, help) as `with_connection` adds the client commands' connection options:
a new limit gets its flag without an edit here. Errors about a value name the flag (core.config.override).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any

import typer

from mqtt_cli.core.limits import LimitInfo, limit_infos

__all__ = ["LIMITS_PANEL", "limit_parameters", "with_limits"]

LIMITS_PANEL = "Limits (over the file's limits section)"


def _help(info: LimitInfo) -> str:
    default = ("on" if info.default else "off") if info.kind is bool else str(info.default)
    return f"{info.help[0].upper()}{info.help[1:]}. Default {default}."


def _parameter(info: LimitInfo) -> inspect.Parameter:
    if info.kind is bool:  # --reason-strings/--no-reason-strings: either way over the file's
        decls = f"{info.flag}/--no-{info.flag.removeprefix('--')}"
        option: Any = Annotated[bool | None, typer.Option(decls, help=_help(info), rich_help_panel=LIMITS_PANEL)]
    else:
        option = Annotated[
            info.kind | None,
            typer.Option(info.flag, metavar=info.unit.upper(), help=_help(info), rich_help_panel=LIMITS_PANEL),
        ]
    return inspect.Parameter(info.name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=option)


def limit_parameters() -> list[inspect.Parameter]:
    """The flags' parameters, in the order of `Limits` (tests check there is one per limit)."""
    return [_parameter(info) for info in limit_infos()]


def with_limits(command: Callable[..., None]) -> Callable[..., None]:
    """A command with the limit flags: typer sees them in the signature (after the command's own), and the command
    receives them as one dict, `limits` (key: value, None for a flag not given), for core.config.override."""
    signature = inspect.signature(command)
    own = [p for p in signature.parameters.values() if p.name != "limits"]
    added = limit_parameters()

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> None:
        limits = {p.name: kwargs.pop(p.name) for p in added}
        command(*args, limits=limits, **kwargs)

    run.__signature__ = signature.replace(parameters=[*own, *added])  # type: ignore[attr-defined]
    run.__annotations__ = {**{k: v for k, v in command.__annotations__.items() if k != "limits"},
                           **{p.name: p.annotation for p in added}}  # fmt: skip
    return run
