"""The typer application: global options and the table of commands.

Start-up time matters, so this module and the command modules it imports load only typer and the
standard library at import time. A command imports what it needs (trio, rich, mqtt_cli.net, ...)
inside its function. ``tests/test_cli.py`` checks that importing this module loads none of them.
"""

from typing import Annotated, NoReturn

import typer
import typer.completion

from mqtt_cli import COMPLETE_VAR, PROG_NAME, version_text
from mqtt_cli.commands import _options, completions, config, dump, pub, rr, serve, sub

HELP = """\
One command for everything around MQTT.

Exit codes: 0 success, 1 runtime error, 2 usage error, 130 interrupted.
"""

app = typer.Typer(
    name=PROG_NAME,
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


# The command table: one line per command, implemented in mqtt_cli/commands/<name>.py.
app.command("completions", no_args_is_help=True)(completions.completions)
app.command("dump", no_args_is_help=True)(dump.dump)
app.command("serve")(serve.serve)
# Client commands: -h is --host there (as in mosquitto_pub/sub), so their help is --help only.
_CLIENT = {"help_option_names": ["--help"]}
app.command("pub", context_settings=_CLIENT)(pub.pub)
app.command("sub", context_settings=_CLIENT)(sub.sub)
app.command("rr", context_settings=_CLIENT)(rr.rr)
app.add_typer(config.app, name="config")


def run(args: list[str]) -> NoReturn:
    """Run the app on ``args`` in click's standalone mode: always ends with ``SystemExit``."""
    # With add_completion=False typer does not register its completion classes (bash, zsh, fish) with
    # its click; the scripts from `mqtt completions` call back with _MQTT_COMPLETE=complete_<shell>.
    typer.completion.completion_init()
    # Through app() rather than its click command: typer then shows an unexpected exception as a short
    # rich traceback (without locals) before exiting with 1.
    app(args=_options.rewrite_optional_values(args), prog_name=PROG_NAME, complete_var=COMPLETE_VAR)
    raise SystemExit(0)  # not reached: standalone mode exits
