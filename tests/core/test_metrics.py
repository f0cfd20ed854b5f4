"""core/metrics.py's exposition text and core/load.py's averages, worked out by hand."""

from __future__ import annotations

import math

from mqtt_cli.core.broker import BrokerCore, refusal_name
from mqtt_cli.core.limits import Limits
from mqtt_cli.core.load import LoadAverages
from mqtt_cli.core.metrics import (
    Family,
    MetricType,
    Sample,
    broker_families,
    log_families,
    render,
    wants_openmetrics,
)


def test_text_and_openmetrics() -> None:
    families = [
        Family(
            "x_sent_bytes", MetricType.COUNTER, "Bytes\nsent \\ here.", (Sample(3, (("l", 'a"b\\c\nd'),)),), "bytes"
        ),
        Family("x_up_seconds", MetricType.GAUGE, "Up.", (Sample(1.5),), "seconds"),
    ]
    assert render(families) == (
        "# HELP x_sent_bytes_total Bytes\\nsent \\\\ here.\n"
        "# TYPE x_sent_bytes_total counter\n"
        'x_sent_bytes_total{l="a\\"b\\\\c\\nd"} 3\n'
        "# HELP x_up_seconds Up.\n"
        "# TYPE x_up_seconds gauge\n"
        "x_up_seconds 1.5\n"
    )
    assert render(families, openmetrics=True) == (
        "# HELP x_sent_bytes Bytes\\nsent \\\\ here.\n"
        "# TYPE x_sent_bytes counter\n"
        "# UNIT x_sent_bytes bytes\n"
        'x_sent_bytes_total{l="a\\"b\\\\c\\nd"} 3\n'
        "# HELP x_up_seconds Up.\n"
        "# TYPE x_up_seconds gauge\n"
        "# UNIT x_up_seconds seconds\n"
        "x_up_seconds 1.5\n"
        "# EOF\n"
    )


def test_accept_header() -> None:
    assert wants_openmetrics("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
    assert not wants_openmetrics("text/plain;version=0.0.4")
    assert not wants_openmetrics("")


def test_every_family_is_named_by_the_rules() -> None:
    for fam in [*broker_families(BrokerCore(), [], 5.0), *log_families(0)]:
        assert fam.name.startswith("mqtt_broker_") and fam.name == fam.name.lower()
        assert not fam.name.endswith("_total"), "render adds _total to counters"
        assert fam.help.endswith(".") or fam.help.endswith(")")
        if fam.unit:
            assert fam.name.endswith("_" + fam.unit)


def test_refusal_labels() -> None:
    assert refusal_name(0x86) == "bad_user_name_or_password"
    assert refusal_name(0x87) == "not_authorized"
    assert refusal_name(0x84) == "unsupported_protocol_version"


def test_load_averages_as_mosquitto_computes_them() -> None:
    load = LoadAverages(100.0)
    load.update({"messages/received": 30}, 110.0)  # 30 in 10 s: 180 a minute
    one = 180 * (1 - math.exp(-10 / 60))
    assert load.topics()["$SYS/broker/load/messages/received/1min"] == f"{one:.2f}"
    load.update({"messages/received": 30}, 120.0)  # nothing since: decays
    assert load.topics()["$SYS/broker/load/messages/received/1min"] == f"{one * math.exp(-10 / 60):.2f}"
    fifteen = 180 * (1 - math.exp(-10 / 900)) * math.exp(-10 / 900)
    assert load.topics()["$SYS/broker/load/messages/received/15min"] == f"{fifteen:.2f}"


# --- the counters, driven through BrokerCore (tests/core/test_broker.py's client speaking packets) ------------


def test_counters_by_qos_and_drop_reason() -> None:
    from mqtt_cli.core.broker import BrokerConfig
    from mqtt_cli.core.packets import Connect, Publish, Subscription
    from mqtt_cli.core.properties import Properties

    from .test_broker import Client, client

    broker = BrokerCore(BrokerConfig(sys_interval=0, max_buffered_bytes=64, limits=Limits(max_queued_messages=1)))
    offline = client(broker, "off", clean_start=False)
    offline.subscribe(Subscription("q/#", 1))
    offline.lose()
    small = Client(broker, 5)
    small.connect("small", properties=Properties(maximum_packet_size=30))
    small.subscribe(Subscription("big/#", 0))
    pub = client(broker, "p")
    for i in range(3):
        pub.send(Publish("q/x", b"abc", 1, packet_id=i + 1))  # 1 queued, 2 over the queue limit
    pub.send(Publish("big/x", b"x" * 100, 0))  # over the subscriber's maximum packet size
    pub.send(Publish("none/x", b"12", 0))  # no subscriber
    pub.send(Publish("none/y", b"12", 2, packet_id=9))  # no subscriber, but QoS 2: not a drop
    s = broker.stats
    assert s.publish_received_qos == [2, 3, 1]
    assert s.publish_received_bytes_qos == [102, 9, 2]
    assert (s.dropped_queue_full, s.dropped_too_large, s.dropped_no_subscriber, s.dropped_buffer_full) == (2, 1, 1, 0)
    assert s.publish_dropped == 3  # $SYS's figure: queue + buffer + too large, as mosquitto
    text = render(broker_families(broker, [], 1.0))
    assert 'mqtt_broker_messages_dropped_total{reason="queue_full"} 2\n' in text
    assert 'mqtt_broker_publish_received_total{qos="1"} 3\n' in text
    assert "mqtt_broker_messages_queued 1\n" in text and "mqtt_broker_queued_payload_bytes 3\n" in text
    assert broker.sys.sys_figures(1.0)["$SYS/broker/store/messages/bytes"] == "3"
    empty = Client(broker, 4)  # 3.1.1: an empty client id without clean session is refused (0x02)
    assert empty.send(Connect("", protocol_version=4, clean_start=False))[0].reason_code == 2
    refused = Client(broker, 5)  # protocol level 6: answered in the 5.0 format
    refused.send_raw(bytes.fromhex("10 0d 00 04 4d 51 54 54 06 02 00 3c 00 01 63"))
    assert s.refused == {"client_identifier_not_valid": 1, "unsupported_protocol_version": 1}
    assert (s.sockets_total, s.clients_total) == (5, 3)
    text = render(broker_families(broker, [], 1.0))
    assert 'mqtt_broker_connects_refused_total{reason="client_identifier_not_valid"} 1\n' in text
    assert "mqtt_broker_connections_total 5\n" in text and "mqtt_broker_connects_accepted_total 3\n" in text
