"""The broker's limits, each described once: its default, unit, meaning, and mosquitto.conf option.

`Limits` is the `[limits]` section of broker.toml (a field's name is its key), what BrokerCore reads
(`BrokerConfig.limits`), and the source of everything else that names a limit: `mqtt serve`'s flags
(`--max-keepalive`, made from the fields by commands/_limit_flags.py), `--print-config`, the mosquitto.conf
options translated (core/config.py) and the reload's change line (core/changes.py). A new limit is one field here
(and what the broker does with it).

Sans-IO and light: `mqtt serve` imports it to build its flags.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["LimitInfo", "Limits", "limit_infos"]


def _limit(
    default: Any, help: str, unit: str = "", *, hi: int | None = None, mosquitto: str | None = None,
    mosquitto_period: bool = False,
) -> Any:  # fmt: skip
    """A field of `Limits`: `help` says what it means (lower case, as the docs' key tables), `unit` what its number
    counts (the flag's metavar), `hi` its largest value (every limit is >= 0), `mosquitto` the mosquitto.conf option
    that sets it (`mosquitto_period`: given there as a period, `14d`)."""
    meta = {"help": help, "lo": 0, "hi": hi, "unit": unit, "mosquitto": mosquitto, "mosquitto_period": mosquitto_period}
    return field(default=default, metadata=meta)


@dataclass(frozen=True, slots=True)
class Limits:
    """`[limits]`: the broker's limits, with mosquitto's defaults and meaning (0: unlimited where it says so)."""

    max_keepalive: int = _limit(
        65535, "longest keep alive (5.0: announced as Server Keep Alive; 3.x: refused above it); 0: no limit, keep "
        "alive 0 allowed", "seconds", hi=65535, mosquitto="max_keepalive",
    )  # fmt: skip
    max_topic_alias: int = _limit(10, "topic aliases a 5.0 client may set", "aliases", hi=65535,
                                  mosquitto="max_topic_alias")  # fmt: skip
    # Our outgoing QoS 1/2 window for clients that state no Receive Maximum, and the Receive Maximum announced to
    # 5.0 clients (QoS 2 they may have unreleased towards us; beyond it: 0x93).
    max_inflight: int = _limit(
        20, "QoS 1/2 messages in flight to a client that states no Receive Maximum (0: 65,535, all identifiers)",
        "messages", hi=65535, mosquitto="max_inflight_messages",
    )  # fmt: skip
    max_queued_messages: int = _limit(
        1000, "QoS 1/2 messages queued per client beyond its in-flight window (0: unlimited)", "messages",
        mosquitto="max_queued_messages",
    )  # fmt: skip
    max_queued_bytes: int = _limit(0, "bytes of queued messages per client (0: unlimited)", "bytes",
                                   mosquitto="max_queued_bytes")  # fmt: skip
    queue_drop_oldest: bool = _limit(False, "a full queue drops its oldest message instead of the new one")
    max_packet_size: int = _limit(0, "largest packet accepted (0: the protocol's maximum)", "bytes", hi=268435460,
                                  mosquitto="max_packet_size")  # fmt: skip
    message_size_limit: int = _limit(
        0, "largest payload; a bigger message is acknowledged and dropped, the client stays (0: no limit)", "bytes",
        hi=268435455, mosquitto="message_size_limit",
    )  # fmt: skip
    # mosquitto's max_connections is a listener's (listener[].max_connections), so it is not translated to this one.
    max_connections: int = _limit(0, "connections at once, all listeners together (0: unlimited)", "connections")
    retain_available: bool = _limit(True, "retained messages are kept (5.0: Retain Available)",
                                    mosquitto="retain_available")  # fmt: skip
    # Both are optional in 5.0 (3.14.2.2.3, 3.1.4): off by default, as mosquitto.
    reason_strings: bool = _limit(False, "5.0 DISCONNECT and refusing CONNACK say why (Reason String), for debugging")
    max_topic_levels: int = _limit(
        200, "levels a topic name or filter may have; more are refused, as mosquitto (0: no limit)", "levels",
        hi=65535,
    )  # fmt: skip
    persistent_client_expiration: int = _limit(
        0, "seconds a disconnected session that would never expire (3.1.1 persistent, 5.0 expiry 0xFFFFFFFF) is "
        "kept (0: for ever)", "seconds", mosquitto="persistent_client_expiration", mosquitto_period=True,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class LimitInfo:
    """One limit as the places that name it need it: its key, type, default and description."""

    name: str  # the [limits] key; the flag is --name-with-dashes
    kind: type  # its field's type: int, float or bool
    default: Any
    help: str
    unit: str  # what the number counts ("" for a switch)
    hi: int | None
    mosquitto: str | None  # the mosquitto.conf option that sets it
    mosquitto_period: bool

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def limit_infos() -> list[LimitInfo]:
    """Every limit, in the order of `Limits`."""
    kinds = typing.get_type_hints(Limits)
    return [
        LimitInfo(f.name, kinds[f.name], f.default, f.metadata["help"], f.metadata["unit"], f.metadata["hi"],
                  f.metadata["mosquitto"], f.metadata["mosquitto_period"])
        for f in fields(Limits)
    ]  # fmt: skip
