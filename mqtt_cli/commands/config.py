"""``mqtt config``: connection profiles in $XDG_CONFIG_HOME/mqtt-cli/config.toml (see mqtt_cli/profiles.py)."""

from typing import Annotated, Any

import typer

from mqtt_cli.exit_codes import EXIT_FAILURE, EXIT_USAGE

from . import fail
from ._client_options import PROFILE_ENV, PROFILE_FLAG

app = typer.Typer(
    name="config",
    help="Connection profiles: defaults for pub, sub and rr (--profile NAME; 'default' when none is given).",
    no_args_is_help=True,
)
_SECRET = ("password",)


def _parse(key: str, raw: str, profile: str) -> Any:
    """The value of `raw` for `key`, checked as a profile's values are when loaded (type, range)."""
    from mqtt_cli.profiles import ProfileError, check_value

    try:
        return check_value(key, _convert(key, raw), f"profile {profile!r}")
    except ProfileError as err:
        fail(str(err), EXIT_USAGE)


def _convert(key: str, raw: str) -> Any:
    from mqtt_cli.profiles import PROFILE_KEYS

    kind = PROFILE_KEYS.get(key)
    if kind is None:
        fail(f"unknown key {key!r}; {_hint(key, PROFILE_KEYS)}known: {', '.join(PROFILE_KEYS)}", EXIT_USAGE)
    if kind is bool:
        if raw.lower() in ("true", "yes", "1", "on"):
            return True
        if raw.lower() in ("false", "no", "0", "off"):
            return False
        fail(f"{key} must be true or false, not {raw!r}", EXIT_USAGE)
    if kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            fail(f"{key} must be a number, not {raw!r}", EXIT_USAGE)
    return raw


def _hint(key: str, names: Any) -> str:
    """`did you mean 'host'? ` or ""."""
    from mqtt_cli.core.suggest import did_you_mean

    return f"{hint} " if (hint := did_you_mean(key, names)) else ""


# ignore_unknown_options: a VALUE that looks like an option (`config set keepalive -5`, a password starting
# with '-') is taken as the value, not refused as "No such option".
@app.command("set", context_settings={"ignore_unknown_options": True})
def set_(
    key: Annotated[str, typer.Argument(help="host, port, username, password_file, cafile, ... (see `config list`).")],
    value: Annotated[str | None, typer.Argument(help="The value; leave out with --unset.")] = None,
    profile: Annotated[
        str, typer.Option(PROFILE_FLAG, envvar=PROFILE_ENV, metavar="NAME", help="Profile to edit.")
    ] = "default",
    unset: Annotated[bool, typer.Option("--unset", help="Remove the key.")] = False,
) -> None:
    """Set (or --unset) one key of a profile."""
    from mqtt_cli.profiles import ProfileError, load_config, save_config

    if (value is None) != unset:
        fail("give a VALUE, or --unset without one", EXIT_USAGE)
    try:
        data = load_config()
    except ProfileError as err:
        fail(str(err))
    profiles = data.setdefault("profiles", {})
    section = profiles.setdefault(profile, {})
    if unset:
        if key not in section:
            has = f"it has {', '.join(section)}" if section else "it has none"
            fail(f"profile {profile!r} has no key {key!r}; {_hint(key, section)}{has}", EXIT_USAGE)
        del section[key]
    else:
        assert value is not None
        section[key] = _parse(key, value, profile)
    path = save_config(data)
    typer.echo(f"{path}: profile {profile!r}: {key} {'removed' if unset else 'set'}")


@app.command("show")
def show(
    profile: Annotated[
        str | None,
        typer.Option(PROFILE_FLAG, envvar=PROFILE_ENV, metavar="NAME", help="Profile to show (default: default)."),
    ] = None,
    reveal: Annotated[bool, typer.Option("--reveal", help="Show passwords instead of ****.")] = False,
) -> None:
    """Print a profile's keys and values."""
    from mqtt_cli.profiles import ProfileError, load_profile

    try:
        values = load_profile(profile)
    except ProfileError as err:
        fail(str(err), EXIT_USAGE if "no profile" in str(err) else EXIT_FAILURE)
    for key, value in values.items():
        shown = "****" if key in _SECRET and not reveal else value
        typer.echo(f"{key} = {shown!r}" if isinstance(shown, str) else f"{key} = {str(shown).lower()}")


@app.command("list")
def list_() -> None:
    """List the profiles, and where the file is."""
    from mqtt_cli.profiles import PROFILE_KEYS, ProfileError, config_path, load_config

    try:
        profiles = load_config().get("profiles", {})
    except ProfileError as err:
        fail(str(err))
    typer.echo(f"# {config_path()}")
    for name in sorted(profiles):
        typer.echo(name)
    if not profiles:
        typer.echo(f"# no profiles yet; keys: {', '.join(PROFILE_KEYS)}")
