"""The typer application: global options and the table of commands.

Start-up time matters, so this module loads only typer and the standard library at import time, and a
command's module is imported (and its click command built) only when that command is run or listed: `mqtt pub`
builds pub alone. A command imports what it needs (trio, rich, mqtt_cli.net, ...) inside its function.
``tests/test_cli.py`` checks that importing this module loads none of them.
"""

import importlib
import sys
from collections.abc import Iterator, MutableMapping
from typing import Annotated, Any, NoReturn

import typer
import typer.completion
import typer.main
import typer.models
from typer._click import exceptions as click_exceptions

from mqtt_cli import COMPLETE_VAR, PROG_NAME, version_text
from mqtt_cli.commands import _coerce, _options, _usage, say
from mqtt_cli.exit_codes import EXIT_FAILURE, EXIT_OK

HELP = """\
One command for everything around MQTT.

Exit codes: 0 success, 1 runtime error, 2 usage error, 130 interrupted.
"""

# The command table, in the order `mqtt --help` lists them: name, function in mqtt_cli/commands/<module>.py,
# options of typer's app.command(). A command's module is imported and its click command (with its click
# parameters) built only when the command is looked up: `mqtt pub` builds pub only, `mqtt --help` all of them.
# Client commands: -h is --host there (as in mosquitto_pub/sub), so their help is --help only.
_CLIENT = {"help_option_names": ["--help"]}
COMMANDS: dict[str, tuple[str, dict[str, Any]]] = {
    "serve": ("serve:serve", {}),
    "pub": ("pub:pub", {"context_settings": _CLIENT}),
    "sub": ("sub:sub", {"context_settings": _CLIENT}),
    "rr": ("rr:rr", {"context_settings": _CLIENT}),
    "bridge": ("bridge:bridge", {"context_settings": _CLIENT}),
    "dump": ("dump:dump", {"no_args_is_help": True}),
    "analyze": ("analyze:app", {}),  # a typer app of its own: analyze ingest/report/record (pyspark, lazily)
    "bench": ("bench:bench", {"context_settings": _CLIENT}),
    "passwd": ("passwd:passwd", {"no_args_is_help": True}),
    "config": ("config:app", {}),  # a typer app of its own: config set/show/list
    "completions": ("completions:completions", {"no_args_is_help": True}),
}


def _load(name: str) -> Any:
    module, attr = COMMANDS[name][0].split(":")
    return getattr(importlib.import_module(f"mqtt_cli.commands.{module}"), attr)


def _build(name: str) -> Any:
    """The click command for ``name``, as typer builds it for app.command()/app.add_typer()."""
    target, options = _load(name), COMMANDS[name][1]
    if isinstance(target, typer.Typer):
        group = typer.main.get_group_from_info(
            typer.models.TyperInfo(target, name=name),
            pretty_exceptions_short=app.pretty_exceptions_short,
            rich_markup_mode=app.rich_markup_mode,
            suggest_commands=app.suggest_commands,
        )
        _usage.tidy_help(group)
        return group
    # _coerce.Command converts option values without pydantic (most of a one-shot `mqtt pub` otherwise).
    info = typer.models.CommandInfo(name=name, cls=_coerce.Command, callback=target, **options)
    command = typer.main.get_command_from_info(
        info, pretty_exceptions_short=app.pretty_exceptions_short, rich_markup_mode=app.rich_markup_mode
    )
    _usage.tidy_help(command)
    return command


class _LazyCommands(MutableMapping[str, Any]):
    """The group's ``commands``: every name of COMMANDS, each built on first access, then any command registered
    the usual way (app.command(), as tests do)."""

    def __init__(self, built: MutableMapping[str, Any]) -> None:
        self._built = dict(built)

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in COMMANDS:
                raise KeyError(name)
            self._built[name] = _build(name)
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        raise TypeError("commands cannot be removed")

    def __iter__(self) -> Iterator[str]:
        yield from COMMANDS
        yield from (name for name in self._built if name not in COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS) + sum(name not in COMMANDS for name in self._built)


class _Group(_coerce.Group):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.commands = _LazyCommands(self.commands)

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        """click's standalone mode, but a usage error is one line (mqtt_cli/commands/_usage.py), not a box."""
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except click_exceptions.NoArgsIsHelpError as err:
            err.show()  # the help itself
            sys.exit(err.exit_code)
        except click_exceptions.ClickException as err:
            argv = kwargs.get("args") or []
            command = argv[0] if argv and argv[0] in COMMANDS else None
            say(_usage.error_line(err, command))
            sys.exit(err.exit_code)
        except typer.Abort:
            say(f"{PROG_NAME}: aborted")
            sys.exit(EXIT_FAILURE)
        sys.exit(code if isinstance(code, int) else EXIT_OK)


app = typer.Typer(
    name=PROG_NAME,
    cls=_Group,
    help=HELP,
    no_args_is_help=True,
    add_completion=False,  # `mqtt completions SHELL` instead of typer's --install/--show-completion
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_show_locals=False,  # locals may hold passwords
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            help="Show the version and exit.",
            is_eager=True,
            callback=_version_callback,
        ),
    ] = False,
) -> None:
    """One command for everything around MQTT."""


def run(args: list[str]) -> NoReturn:
    """Run the app on ``args`` in click's standalone mode: always ends with ``SystemExit``."""
    # With add_completion=False typer does not register its completion classes (bash, zsh, fish) with
    # its click; the scripts from `mqtt completions` call back with _MQTT_COMPLETE=complete_<shell>.
    typer.completion.completion_init()
    # Through app() rather than its click command: typer then shows an unexpected exception as a short
    # rich traceback (without locals) before exiting with 1.
    app(args=_options.rewrite_optional_values(args), prog_name=PROG_NAME, complete_var=COMPLETE_VAR)
    raise SystemExit(EXIT_OK)  # not reached: standalone mode exits
