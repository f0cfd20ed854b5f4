"""How the command line talks about itself: usage errors in one line, and readable help placeholders.

click (inside typer) would print a usage error as a usage line, a hint and a boxed message, name an option's
environment variable even when the value came from the flag, and suggest any option that shares two letters
with a mistyped one. :func:`error_line` says it in one line instead: where the bad value came from (the flag,
or the environment variable and its value), what is wrong, and a suggestion only when one is close.

:func:`tidy_help` gives each option a placeholder a user can read (``PORT 1..65535``, ``0|1|2``, nothing for an
on/off flag) in place of typer's type names (``<int range> [1<=x<=65535]``, ``<bool>``, ``<list[str]>``).
Only typer and the standard library are imported (error_line is imported when an error is shown).
"""

import os
from typing import Any

import typer.core
from typer._click import exceptions as click_exceptions

from mqtt_cli import PROG_NAME

#: How close a mistyped option or command must be to a real one to be suggested (difflib's ratio, stricter than
#: core/suggest.py's for keys: click's own 0.6 suggests --host and --qos for --bogus).
SUGGEST_CUTOFF = 0.8


def _hint(param: Any, ctx: Any) -> str:
    """The option as the user gave it: `-p/--port`, or `MQTT_PORT=70000` when the value came from there."""
    name = getattr(param, "name", None)
    source = ctx.get_parameter_source(name) if ctx is not None and name else None
    envvar = getattr(param, "envvar", None)
    if source is not None and source.name == "ENVIRONMENT" and isinstance(envvar, str):
        return f"{envvar}={os.environ.get(envvar, '')}"
    opts = list(getattr(param, "opts", []) or [])
    if isinstance(param, typer.core.TyperArgument) or not opts:
        return str(getattr(param, "human_readable_name", name or "")).upper()
    return "/".join(sorted(opts, key=lambda o: (o.startswith("--"), o)))


def _close(word: str, choices: list[str]) -> list[str]:
    from mqtt_cli.core.suggest import close_to  # only when there is an error to show

    return close_to(word, choices, n=3, cutoff=SUGGEST_CUTOFF)


def _sentence(text: str) -> str:
    text = text.strip().rstrip(".")
    return text[:1].lower() + text[1:] if text[:2] != text[:2].upper() else text


def error_line(err: Any, command: str | None = None) -> str:
    """One line for a click usage error: `mqtt: error: WHAT (see 'mqtt pub --help')`; `command` names the
    command for errors the parser raises without a context."""
    ctx = getattr(err, "ctx", None)
    if isinstance(err, click_exceptions.NoSuchOption):
        names = sorted({o for p in (ctx.command.get_params(ctx) if ctx else []) for o in getattr(p, "opts", [])
                        if o.startswith("--") and not getattr(p, "hidden", False)})  # fmt: skip
        what = f"no such option {err.option_name}"
        close = _close(err.option_name, names)
    elif type(err).__name__ == "NoSuchCommand" or str(err.message).startswith("No such command"):
        name = str(err.message).split("'")[1] if "'" in str(err.message) else ""
        commands = list(getattr(ctx.command, "commands", {})) if ctx is not None else []
        what = f"no such command {name!r}"
        close = _close(name, commands)
    elif isinstance(err, click_exceptions.MissingParameter) and getattr(err, "param", None) is not None:
        kind = "argument" if isinstance(err.param, typer.core.TyperArgument) else "option"
        what = f"missing {kind} {_hint(err.param, None)}"
        close = []
    elif isinstance(err, click_exceptions.BadParameter) and getattr(err, "param", None) is not None:
        what = f"{_hint(err.param, ctx)}: {_sentence(str(err.message))}"
        close = []
    else:
        what = _sentence(err.format_message())
        close = []
    if close:
        what += f" (did you mean {' or '.join(close)}?)"
    if ctx is not None:
        where, help_name = ctx.command_path, (ctx.help_option_names or ["--help"])[0]
    else:
        where = f"{PROG_NAME} {command}" if command else PROG_NAME
        help_name = "--help"
    return f"{PROG_NAME}: error: {what} (see '{where} {help_name}')"


#: Placeholders for option names that do not say what the value is.
_OPTIONS = {"--filter-out": "FILTER", "--unsubscribe": "FILTER", "--out": "DIR", "--local": "URL", "--remote": "URL",
            "--linger": "MS", "--interval": "MS", "--interval-of-msg": "MS", "--rate": "MSG/S", "--subs": "N",
            "--limit": "N", "--startnumber": "N", "--workers": "N", "--parallel": "N", "--ifaddr": "ADDRS",
            "--json": "FILE", "--expect": "CONDITIONS"}  # fmt: skip
_WORDS = {"CAFILE": "FILE", "CERT": "FILE", "KEY": "FILE", "CAPATH": "DIR", "UNIX": "PATH", "PROPERTY": "KEY=VALUE",
          "COUNT": "N", "REPEAT": "N", "IDENTIFIER": "N", "EXPIRY": "SECONDS", "DELAY": "SECONDS",
          "KEEPALIVE": "SECONDS", "ALPN": "PROTOCOL", "INFLIGHT": "N", "CONNECTIONS": "N", "MESSAGES": "N",
          "ALIAS": "N", "SIZE": "BYTES"}  # fmt: skip


def _metavar(param: Any) -> str:
    """NAME from the option's long name (`--will-topic` -> TOPIC), or the values it takes (0|1|2)."""
    desc = param.type_descriptor
    if desc.is_choice:
        return "|".join(str(getattr(c, "value", c)) for c in desc.choices or ())
    info = desc.parameter_info
    lo, hi = info.min, info.max
    if isinstance(lo, int) and isinstance(hi, int) and 0 < hi - lo + 1 <= 3:
        return "|".join(str(v) for v in range(lo, hi + 1))
    longs = [o for o in param.opts if o.startswith("--")]
    name = longs[0] if longs else param.opts[0]
    word = name.lstrip("-").split("-")[-1].upper()
    if name in _OPTIONS:
        word = _OPTIONS[name]
    elif desc.annotation is float or getattr(desc.annotation, "__args__", (None,))[0] is float:
        word = "SECONDS"  # the float options are durations (those that are not are in _OPTIONS)
    else:
        word = _WORDS.get(word, word)
    if isinstance(lo, int) and isinstance(hi, int) and hi <= 65535:
        return f"{word} {lo}..{hi}"
    return word


def flowing(text: str) -> str:
    """Help text whose paragraphs flow: the line breaks of the source (a docstring's) joined into spaces, so that
    the terminal wraps each sentence at its own width (typer keeps them after the first paragraph: "7 a message
    was" then "refused" on a line of its own). A paragraph starting with \\b, or whose lines are indented or a list
    ("- ", "* "), keeps its lines."""
    import inspect

    paragraphs = inspect.cleandoc(text).split("\n\n")
    out = []
    for para in paragraphs:
        lines = para.split("\n")
        kept = para.startswith("\b") or any(line[:1] == " " or line[:2] in ("- ", "* ") for line in lines)
        out.append(para if kept else " ".join(line.strip() for line in lines))
    return "\n\n".join(out)


def tidy_help(command: Any) -> None:
    """Readable placeholders for every option of ``command`` (and of its subcommands, for a group), and help
    text that flows (:func:`flowing`)."""
    from . import _coerce

    if getattr(command, "help", None):
        command.help = flowing(command.help)
    if getattr(command, "epilog", None):
        command.epilog = flowing(command.epilog)

    # A typer app of its own (config, analyze) builds typer's classes: ours also convert without pydantic and
    # give --help, which click adds when parsing, no placeholder (_coerce.tidy_flags).
    if type(command) is typer.core.TyperCommand:
        command.__class__ = _coerce.Command
    elif type(command) is typer.core.TyperGroup:
        command.__class__ = _coerce.Group
    for param in getattr(command, "params", ()):
        if not isinstance(param, typer.core.TyperOption) or param.metavar is not None:
            continue
        if param.is_flag or param.count:
            param.metavar = ""
        else:
            param.metavar = _metavar(param)
        # the range is in the placeholder now (help only: the values are checked by the parameter's converter)
        param.min = param.max = None
    for sub in getattr(command, "commands", {}).values():
        tidy_help(sub)
