"""BrokerCore against the rules of MQTT 3.1.1 and 5.0, and mosquitto's choices where the rules allow several.

A test that checks a normative statement has its id in its name: `MQTT_3_1_2_8` is [MQTT-3.1.2-8] (several ids:
several in the name). tests/broker/test_conformance.py runs the same kind of sequences over sockets against
`mqtt serve` and Debian's mosquitto side by side.
"""

from __future__ import annotations

import pytest

from mqtt_cli.core.broker import BrokerConfig, BrokerCore
from mqtt_cli.core.packets import ConnAck, Connect, Disconnect
from tests.core.test_broker import Client, client


@pytest.fixture
def broker() -> BrokerCore:
    return BrokerCore(BrokerConfig(sys_interval=0))


def _frame(first: int, body: bytes) -> bytes:
    from mqtt_cli.core.wire import encode_vbi

    return bytes((first,)) + encode_vbi(len(body)) + body


def _s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return len(raw).to_bytes(2, "big") + raw


# --- Reason Strings: none by default (mosquitto), on with reason_strings -------------------------------------


def test_no_reason_string_in_server_disconnect_by_default(broker: BrokerCore) -> None:
    c = client(broker, "c", 5)
    assert c.send(Connect("c", protocol_version=5)) == [Disconnect(0x82)]
    assert c.closed


def test_reason_strings_option_says_why(tmp_path: object) -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0, reason_strings=True))
    c = client(broker, "c", 5)
    (d,) = c.send(Connect("c", protocol_version=5))
    assert isinstance(d, Disconnect) and d.reason_code == 0x82 and d.properties.reason_string == "second CONNECT"


def test_malformed_v5_connect_closes_without_connack_by_default_MQTT_3_1_4_1(broker: BrokerCore) -> None:
    """A CONNECT breaking a rule: closed; the refusing CONNACK is a MAY (4.13), which mosquitto does not send."""
    c = Client(broker, 5)
    bad = _frame(0x10, _s("MQTT") + bytes((5, 0x03, 0, 60, 0)) + _s("c"))  # reserved flag set
    assert c.send_raw(bad) == []
    assert c.closed
    loud = BrokerCore(BrokerConfig(sys_interval=0, reason_strings=True))
    c = Client(loud, 5)
    (ack,) = c.send_raw(bad)
    assert isinstance(ack, ConnAck) and ack.reason_code == 0x81 and ack.properties.reason_string
    assert c.closed

