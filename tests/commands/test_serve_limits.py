"""Each limit is described once (core/limits.py) and every place that names one is made from that description:
`mqtt serve`'s flag, the `[limits]` key, its `--print-config` line, the mosquitto.conf option, the reload's line."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import tomllib
from typing import Any

import pytest

from mqtt_cli.core.broker import BrokerConfig
from mqtt_cli.core.changes import field_changes
from mqtt_cli.core.config import BrokerSettings, ConfigError, load_config, override, translate_mosquitto
from mqtt_cli.core.limits import LimitInfo, Limits, limit_infos
from mqtt_cli.net.config import toml_text

INFOS = limit_infos()


def _other(info: LimitInfo) -> Any:
    """A valid value that is not the default."""
    if info.kind is bool:
        return not info.default
    return info.default + 1 if info.hi is None or info.default < info.hi else info.default - 1


def test_the_record_is_every_limit() -> None:
    assert [i.name for i in INFOS] == [f.name for f in dataclasses.fields(Limits)]
    assert BrokerSettings().limits == BrokerConfig().limits == Limits()
    assert all(i.help and (i.kind is bool) == (i.unit == "") for i in INFOS)  # a number says what it counts


def test_every_limit_has_a_serve_flag() -> None:
    from mqtt_cli.app import _build

    options = {name: param for param in _build("serve").params for name in param.opts}
    for info in INFOS:
        assert info.flag in options, info.flag
        if info.kind is bool:
            assert f"--no-{info.name.replace('_', '-')}" in options[info.flag].secondary_opts
        else:
            assert options[info.flag].metavar == info.unit.upper()


@pytest.mark.parametrize("info", INFOS, ids=lambda i: i.name)
def test_every_limit_has_a_toml_key_a_print_config_line_and_a_reload_line(info: LimitInfo) -> None:
    value = _other(info)
    settings = load_config({"limits": {info.name: value}}, "broker.toml")
    assert getattr(settings.limits, info.name) == value
    text = toml_text(settings)
    assert tomllib.loads(text)["limits"][info.name] == value
    assert f"\n# {info.name} = " in toml_text(BrokerSettings())  # at its default: commented out, still listed
    changed = BrokerConfig(limits=settings.limits)
    assert field_changes(BrokerConfig(), changed) == [f"{info.name} {info.default} -> {value}"]
    # The flag's value is checked as the file's is, and an error names the flag.
    assert override(BrokerSettings(), "limits", {info.name: value}).limits == settings.limits
    if info.kind is int:
        with pytest.raises(ConfigError, match=f"command line: {info.flag}: must be an integer"):
            override(BrokerSettings(), "limits", {info.name: -1})


@pytest.mark.parametrize("info", [i for i in INFOS if i.mosquitto], ids=lambda i: i.name)
def test_every_limit_mosquitto_has_is_translated(info: LimitInfo) -> None:
    value = _other(info)
    text = "2h" if info.mosquitto_period else str(value).lower()
    result = translate_mosquitto(f"{info.mosquitto} {text}\n", "m.conf")
    assert result.unsupported == ()
    assert getattr(result.settings.limits, info.name) == (7200 if info.mosquitto_period else value)
    if info.hi is not None:  # its range holds there too
        bad = translate_mosquitto(f"{info.mosquitto} {info.hi + 1}\n", "m.conf").unsupported
        assert [u.why for u in bad] == [f"{info.mosquitto} must be an integer from 0 to {info.hi}, not '{info.hi + 1}'"]


def test_a_new_limit_flag_reaches_the_broker() -> None:
    """Flags that came with the record (a limit that had only a key): set from the command line, printed."""
    args = ["--message-size-limit", "100", "--no-retain-available", "--persistent-client-expiration", "60"]
    result = subprocess.run([sys.executable, "-m", "mqtt_cli", "serve", "--port", "0", *args, "--print-config"],
                            capture_output=True, text=True, timeout=30)  # fmt: skip
    assert result.returncode == 0, result.stderr
    limits = tomllib.loads(result.stdout)["limits"]
    assert (limits["message_size_limit"], limits["retain_available"], limits["persistent_client_expiration"]) == (
        100, False, 60,
    )  # fmt: skip
