"""``mqtt completions SHELL``: print the shell completion script for the ``mqtt`` command."""

from enum import StrEnum
from typing import Annotated

import typer


class Shell(StrEnum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


def completion_script(shell: Shell | str) -> str:
    """The completion script for ``shell``, generated from the app by typer's completion classes.

    The script calls ``mqtt`` back with ``_MQTT_COMPLETE=complete_<shell>`` in its environment; typer
    answers those calls through the same classes, so script and answers always match.
    """
    from typer._click.shell_completion import get_completion_class
    from typer.completion import completion_init

    from mqtt_cli import COMPLETE_VAR, PROG_NAME
    from mqtt_cli.app import app

    completion_init()  # registers typer's bash/zsh/fish classes with its click
    cls = get_completion_class(str(shell))
    if cls is None:  # pragma: no cover - Shell only lists supported shells
        raise ValueError(f"unsupported shell: {shell}")
    command = typer.main.get_command(app)
    # strip: zsh wants `#compdef mqtt` on the first line of the file
    return cls(command, {}, PROG_NAME, COMPLETE_VAR).source().strip()


def completions(
    shell: Annotated[Shell, typer.Argument(help="The shell to print the script for.", show_default=False)],
) -> None:
    """Print a shell completion script.

    For this shell session: source <(mqtt completions bash)

    For good: mqtt completions bash > ~/.local/share/bash-completion/completions/mqtt

    zsh: mqtt completions zsh > ~/.zfunc/_mqtt (a directory on $fpath, before compinit runs)

    fish: mqtt completions fish > ~/.config/fish/completions/mqtt.fish
    """
    typer.echo(completion_script(shell))
