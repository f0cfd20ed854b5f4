"""core/metrics.py's exposition text and core/load.py's averages, worked out by hand."""

from __future__ import annotations

import math

from mqtt_cli.core.broker import BrokerCore, refusal_name
from mqtt_cli.core.load import LoadAverages
from mqtt_cli.core.metrics import Family, MetricType, Sample, broker_families, render, wants_openmetrics


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
    for fam in broker_families(BrokerCore(), [], 5.0):
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
