"""Option values without pydantic: the command classes the app's commands are built with.

typer 0.29 converts every parameter value, given or not, through a pydantic ``TypeAdapter`` built on first
use: for a client command (about 50 options) that is importing pydantic (about 45 ms) and building 45
adapters (about 1 ms each) before the command starts, most of a one-shot ``mqtt pub``'s run time.

:class:`Command` (and :class:`Group`, for the app's own options) gives each parameter a
:class:`PlainRuntimeParam` instead. It converts the values it can convert exactly as typer's adapter would
(absent values; ``str``; ``bool``; ``int`` and ``float`` written plainly and inside the option's
``min``/``max``; lists of those) and hands everything else (a value out of range or badly written, a path, a
choice, ...) to typer's own adapter, built then: results and error messages stay typer's.
``tests/commands/test_coerce.py`` checks that the two agree.

This uses typer's private ``_coercion`` module and ``_TyperParameter._runtime_param``; typer is pinned to
0.29.x in pyproject.toml, and the tests notice if a new typer moves them.
"""

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer.core
from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param

_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_FLOAT = re.compile(r"-?[0-9]{1,15}(?:\.[0-9]{1,15})?")
_MISS = object()


def _number(kind: type, value: Any, lo: Any, hi: Any) -> Any:
    """``value`` as ``kind`` (int or float), or _MISS when typer's adapter must decide."""
    if type(value) is str:
        if kind is int and _INT.fullmatch(value):
            number: Any = int(value)
        elif kind is float and _FLOAT.fullmatch(value):
            number = float(value)
        else:
            return _MISS
    elif type(value) is kind:
        number = value
    else:
        return _MISS
    if (lo is not None and number < lo) or (hi is not None and number > hi):
        return _MISS
    return number


def _leaf(kind: Any, value: Any, lo: Any, hi: Any) -> Any:
    if kind is str or kind is bool:
        return value if type(value) is kind else _MISS
    if kind is Path and type(value) is str and "\0" not in value:
        # Not checked for readability here: the command opens the file and says why it cannot, in one line
        # and with the exit code its documentation gives (typer's check would be a usage error, exit 2).
        return Path(value)
    if kind is int or kind is float:
        return _number(kind, value, lo, hi)
    return _MISS


@dataclass(frozen=True)
class PlainRuntimeParam(RuntimeParam):
    """Converts plain values itself; anything else goes to typer's runtime parameter (pydantic)."""

    descriptor: TypeDescriptor
    _typer: list[RuntimeParam] = field(default_factory=list, compare=False, repr=False)

    def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
        info = self.parameter_info
        plain_path = (
            info.file_okay
            and info.dir_okay
            and not (info.exists or info.writable or info.resolve_path or info.allow_dash or info.path_type)
        )
        if info.parser is None and not info.clamp and self.descriptor.file_annotation is None and plain_path:
            annotation = self.annotation
            if self.descriptor.is_list:
                (kind,) = getattr(annotation, "__args__", (None,))
                if isinstance(value, (list, tuple)):
                    items = [_leaf(kind, item, info.min, info.max) for item in value]
                    if _MISS not in items:
                        return items
            else:
                result = _leaf(annotation, value, info.min, info.max)
                if result is not _MISS:
                    return result
        if not self._typer:
            self._typer.append(build_runtime_param(self.descriptor))
        return self._typer[0]._coerce_value(value, param=param, ctx=ctx)


def plain_runtime_param(descriptor: TypeDescriptor) -> PlainRuntimeParam:
    return PlainRuntimeParam(
        parameter_info=descriptor.parameter_info, annotation=descriptor.annotation, descriptor=descriptor
    )


def _use_plain(params: list[Any]) -> None:
    for param in params:
        if isinstance(param, typer.core._TyperParameter) and param._runtime_param is None:
            param._runtime_param = plain_runtime_param(param.type_descriptor)
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""  # an on/off flag (--help included) takes no value: no <bool> in the help


class Command(typer.core.TyperCommand):
    """typer's command, converting plain option values without pydantic (see the module's docstring)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        params = self.get_params(ctx)
        _use_plain(params)  # with --help, which typer adds here
        names = {name for p in params for name in (*p.opts, *p.secondary_opts)}
        if "--property" in names and ("-D" in args or "--property" in args):  # pub, sub, rr (passwd: -D deletes)
            from ._dprops import gather

            takes_value = {n for p in params if not (getattr(p, "is_flag", False) or getattr(p, "count", False))
                           for n in p.opts}  # fmt: skip
            args = gather(args, takes_value.__contains__)
        return super().parse_args(ctx, args)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """typer's rich help, but the options laid out by _help.py (nothing cut at 80 columns)."""
        if self.rich_markup_mode is None:
            super().format_help(ctx, formatter)
            return
        options = [p for p in self.get_params(ctx) if isinstance(p, typer.core.TyperOption) and not p.hidden]
        for param in options:  # typer prints everything else: usage, text, arguments
            param.hidden = True
        try:
            super().format_help(ctx, formatter)
        finally:
            for param in options:
                param.hidden = False
        from ._help import print_options

        print_options(self, ctx, options)


class Group(typer.core.TyperGroup):
    """typer's group (the app's global options), converting option values as :class:`Command` does."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        _use_plain(self.get_params(ctx))
        return super().parse_args(ctx, args)
