"""`-D/--property COMMAND NAME VALUE`: MQTT 5.0 properties as mosquitto_pub, mosquitto_sub and mosquitto_rr take
them, so that their scripts run unchanged.

    mqtt pub -t a -m x -D PUBLISH user-property k v -D CONNECT session-expiry-interval 60

COMMAND is CONNECT, PUBLISH, SUBSCRIBE, UNSUBSCRIBE, DISCONNECT, WILL (or AUTH, which mosquitto refuses too), in
any case; NAME is mosquitto's (the spec's name in lowercase with hyphens); user-property takes a KEY and a VALUE.
Numbers are decimal, binary values (correlation-data, authentication-data) the argument's bytes. A property the
spec does not allow in COMMAND is refused, as is a subscription identifier in PUBLISH (a client may not send one).

One -D is several arguments, which no click option takes: :func:`gather` joins the arguments of each -D into one
value with NUL, which no argument can hold, before either parser (typer's or the fast path's) reads them;
:func:`parse_properties` turns the values into a :class:`DProperties`, one Properties per COMMAND, exiting 2 (a
usage error) on a bad one, before anything is sent. The commands use what they send: pub CONNECT, PUBLISH, WILL,
DISCONNECT; sub CONNECT, SUBSCRIBE, UNSUBSCRIBE, WILL, DISCONNECT; rr CONNECT, PUBLISH, SUBSCRIBE, WILL,
DISCONNECT. The others are accepted and not used, as mosquitto's clients do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from mqtt_cli.core.records import record
from mqtt_cli.exit_codes import EXIT_USAGE

from . import fail

if TYPE_CHECKING:
    from mqtt_cli.core.properties import Properties
    from mqtt_cli.net.settings import ClientSettings

#: The option's names (mosquitto's).
NAMES = ("-D", "--property")
#: Joins the arguments of one -D into one value (no argument of a command line can hold a NUL).
SEP = "\0"
USAGE = "-D COMMAND NAME VALUE (user-property: -D COMMAND user-property KEY VALUE)"

# mosquitto's command names (case does not matter) -> the packet type in core.properties (WILL: the will's).
_COMMANDS = {"connect": 1, "publish": 3, "subscribe": 8, "unsubscribe": 10, "disconnect": 14, "auth": 15, "will": 16}
_ACKS = ("puback", "pubrec", "pubrel", "pubcomp", "suback", "unsuback")  # named by mosquitto, refused by it too


@record
class DProperties:
    """The properties of each kind of packet -D gave (empty when none)."""

    connect: Properties
    publish: Properties
    subscribe: Properties
    unsubscribe: Properties
    disconnect: Properties
    will: Properties

    def __bool__(self) -> bool:
        return any((self.connect, self.publish, self.subscribe, self.unsubscribe, self.disconnect, self.will))


def gather(args: list[str], takes_value: Callable[[str], bool]) -> list[str]:
    """`args` with the arguments of each -D joined into one (see the module's docstring). `takes_value(token)`:
    the option `token` takes the next argument as its value (so a value `-D` is not taken for the option)."""
    if not any(a in NAMES for a in args):
        return args
    out: list[str] = []
    i, n = 0, len(args)
    while i < n:
        token = args[i]
        i += 1
        if token == "--":
            out += args[i - 1 :]
            break
        if token in NAMES:
            count = 4 if i + 1 < n and args[i + 1].lower() == "user-property" else 3
            if i + count > n:
                fail(f"{' '.join([token, *args[i:]])}: too few arguments; use {USAGE}", EXIT_USAGE)
            out += [token, SEP.join(args[i : i + count])]
            i += count
            continue
        out.append(token)
        if i < n and "=" not in token and takes_value(token):
            out.append(args[i])
            i += 1
    return out


def _said(value: str) -> str:
    return "-D " + " ".join(value.split(SEP))


def parse_properties(values: list[str] | None) -> DProperties:
    """The -D values (as :func:`gather` joined them) as properties per COMMAND; exits 2 on a bad one."""
    from mqtt_cli.core.properties import EMPTY_PROPERTIES, PROPERTY_BY_NAME, Properties, WireType

    found: dict[int, list[tuple[int, object]]] = {}
    for value in values or ():
        parts = value.split(SEP)
        if len(parts) < 3:
            fail(f"{_said(value)}: too few arguments; use {USAGE}", EXIT_USAGE)
        command, name, *rest = parts
        kind = _COMMANDS.get(command.lower())
        if kind is None:
            known = "CONNECT, PUBLISH, SUBSCRIBE, UNSUBSCRIBE, DISCONNECT or WILL"
            what = "properties cannot be given for it" if command.lower() in _ACKS else f"use {known}"
            fail(f"{_said(value)}: no command {command!r} to give properties to: {what}", EXIT_USAGE)
        spec = PROPERTY_BY_NAME.get(name.lower().replace("-", "_"))
        if spec is None:
            import difflib

            names = sorted(n.replace("_", "-") for n in PROPERTY_BY_NAME)
            close = difflib.get_close_matches(name.lower(), names, n=1, cutoff=0.8)
            hint = f" (did you mean {close[0]}?)" if close else ""
            fail(f"{_said(value)}: no MQTT 5.0 property {name!r}{hint}", EXIT_USAGE)
        if kind == 15:
            fail(f"{_said(value)}: AUTH properties are not supported (nor by mosquitto's clients)", EXIT_USAGE)
        if kind not in spec.packets or (kind == 3 and spec.name == "subscription_identifier"):
            fail(f"{_said(value)}: {command.upper()} cannot carry {spec.name.replace('_', '-')}", EXIT_USAGE)
        if len(rest) != (2 if spec.wire_type is WireType.UTF8_PAIR else 1):
            fail(f"{_said(value)}: use {USAGE}", EXIT_USAGE)
        item: object
        if spec.wire_type is WireType.UTF8_PAIR:
            item = (rest[0], rest[1])
        elif spec.wire_type is WireType.UTF8_STRING:
            item = rest[0]
        elif spec.wire_type is WireType.BINARY:
            item = rest[0].encode()
        else:
            text = rest[0]
            if not (text.isascii() and text.isdigit()):
                fail(f"{_said(value)}: {text!r} is not a number (a decimal integer)", EXIT_USAGE)
            item = int(text)
        found.setdefault(kind, []).append((spec.id, item))
    out: dict[int, Properties] = {}
    for kind, items in found.items():
        try:
            out[kind] = Properties(items)
        except (TypeError, ValueError) as err:  # a value out of range, one given twice that may be given once
            said = " ".join(_said(v) for v in values or () if _COMMANDS.get(v.split(SEP)[0].lower()) == kind)
            fail(f"{said}: {err}", EXIT_USAGE)
    e = EMPTY_PROPERTIES
    return DProperties(out.get(1, e), out.get(3, e), out.get(8, e), out.get(10, e), out.get(14, e), out.get(16, e))


def merged(base: Properties, extra: Properties) -> Properties:
    """`base` with `extra` added: a property that may be given once is `extra`'s when both give it."""
    if not extra:
        return base
    from mqtt_cli.core.properties import PROPERTY_TABLE, Properties

    replaced = {pid for pid, _ in extra if PROPERTY_TABLE[pid].name != "user_property"}
    return Properties([*((pid, v) for pid, v in base if pid not in replaced), *extra])


def apply_to_settings(settings: ClientSettings, props: DProperties) -> None:
    """CONNECT, WILL and DISCONNECT properties into the connection's settings (session expiry, receive maximum,
    topic alias maximum and maximum packet size where the client keeps them, to honour them too)."""
    if not (props.connect or props.will or props.disconnect):
        return
    if settings.version in (3, 4):
        fail("-D: MQTT 5.0 properties need MQTT 5.0 (-V 5)", EXIT_USAGE)
    from mqtt_cli.core.packets import Will
    from mqtt_cli.core.properties import PROPERTY_TABLE, Properties

    rest = []
    for pid, value in props.connect:
        name = PROPERTY_TABLE[pid].name
        if name == "session_expiry_interval":
            settings.session_expiry = value  # type: ignore[assignment]
        elif name == "receive_maximum":
            settings.receive_maximum = value  # type: ignore[assignment]
        elif name == "topic_alias_maximum":
            settings.topic_alias_maximum = value  # type: ignore[assignment]
        elif name == "maximum_packet_size":
            settings.maximum_packet_size = value  # type: ignore[assignment]
        else:
            rest.append((pid, value))
    settings.properties = merged(settings.properties, Properties(rest))
    if props.will:
        will = settings.will
        if will is None:
            fail("-D WILL: will properties need --will-topic", EXIT_USAGE)
        settings.will = Will(will.topic, will.payload, will.qos, will.retain, merged(will.properties, props.will))
    settings.disconnect_properties = merged(settings.disconnect_properties, props.disconnect)
