"""The JSON form of Properties read back (core.properties.properties_from_json), the one reader of `pub
--json-lines` and the Spark data source's writer: every property kind both ways, nulls, and bad input."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mqtt_cli.core.properties import (
    PROPERTY_TABLE,
    Properties,
    PropertiesJsonError,
    WireType,
    properties_from_json,
)

# One value of each wire type (within the narrowest range any property of that type has).
_VALUES: dict[WireType, Any] = {
    WireType.BYTE: 1,
    WireType.TWO_BYTE_INT: 300,
    WireType.FOUR_BYTE_INT: 70_000,
    WireType.VARIABLE_BYTE_INT: 268_435_455,
    WireType.UTF8_STRING: "ünï/cøde",
    WireType.BINARY: b"\x00\xffid",
    WireType.UTF8_PAIR: ("k", "v"),
}

# Every property once, in one Properties (the repeatable ones in the cases below too).
_EVERY = Properties([(spec.id, _VALUES[spec.wire_type]) for spec in PROPERTY_TABLE.values()])

ROUND_TRIPS = [
    pytest.param(_EVERY, id="every-property"),
    pytest.param(Properties(), id="none"),
    pytest.param(Properties(user_properties=[("k", "v"), ("k", "w"), ("", "")]), id="user-properties-repeated"),
    pytest.param(Properties(subscription_identifiers=[9, 1, 9]), id="subscription-identifiers"),
    pytest.param(Properties(correlation_data=b""), id="empty-binary"),
    pytest.param(Properties(content_type="", payload_format_indicator=0), id="empty-and-zero"),
]


@pytest.mark.parametrize("props", ROUND_TRIPS)
def test_as_json_read_back_is_equal(props: Properties) -> None:
    assert properties_from_json(props.as_json()) == props
    assert properties_from_json(json.loads(json.dumps(props.as_json()))) == props  # through JSON text
    assert properties_from_json(json.loads(json.dumps(props.as_list()))) == props  # the list of before 0.1.0


def test_every_wire_type_is_in_the_table() -> None:
    assert {spec.wire_type for spec in PROPERTY_TABLE.values()} == set(_VALUES)
    assert len(_EVERY) == len(PROPERTY_TABLE)


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (None, Properties()),
        ({"content_type": None, "correlation_data": None, "user_properties": None}, Properties()),
        ({"content_type": "a", "message_expiry_interval": None}, Properties(content_type="a")),
        ([["content_type", None], ["response_topic", "r"]], Properties(response_topic="r")),
    ],
    ids=["whole", "every-member", "one-member", "in-the-list-form"],
)
def test_null_is_absent(obj: Any, expected: Properties) -> None:
    assert properties_from_json(obj) == expected


def test_to_publish_leaves_out_a_connection_s_and_a_delivery_s_own() -> None:
    obj = {"content_type": "a", "topic_alias": 3, "subscription_identifiers": [4], "subscription_identifier": 5}
    assert properties_from_json(obj, to_publish=True) == Properties(content_type="a")
    assert properties_from_json(obj) == Properties(content_type="a", topic_alias=3, subscription_identifiers=[4, 5])


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ("content_type", "properties must be a JSON object, not a string"),
        (7, "properties must be a JSON object, not a number"),
        ([["content_type"]], r"properties must be a JSON object \(or a list of \[name, value\] pairs\)"),
        ({"no_such_thing": 1}, "unknown MQTT 5.0 property 'no_such_thing'"),
        ({"unknown_0x7f": "00"}, "unknown MQTT 5.0 property 'unknown_0x7f'"),
        ({"correlation_data": "zz"}, "property 'correlation_data' must be hex text"),
        ({"correlation_data": 12}, "property 'correlation_data' must be hex text"),
        ({"user_properties": [["k"]]}, r"property 'user_properties' must be \[key, value\] string pairs"),
        ({"user_properties": [["k", 1]]}, r"property 'user_properties' must be \[key, value\] string pairs"),
        ({"user_properties": {"k": "v"}}, "property 'user_properties' must be a list"),
        ({"subscription_identifiers": 3}, "property 'subscription_identifiers' must be a list"),
        ({"content_type": 5}, "property content_type must be a str, not int"),
        ({"message_expiry_interval": "60"}, "property message_expiry_interval must be an int, not str"),
        ({"payload_format_indicator": True}, "property payload_format_indicator must be an int, not bool"),
        ({"payload_format_indicator": 2}, r"property payload_format_indicator = 2 is outside 0\.\.1"),
        ({"subscription_identifiers": [0]}, r"property subscription_identifier = 0 is outside 1\.\.268435455"),
        ({"response_topic": "a/+"}, "property response_topic: "),
    ],
)
def test_bad_input_raises_one_error_saying_what(obj: Any, message: str) -> None:
    with pytest.raises(PropertiesJsonError, match=message):
        properties_from_json(obj)


def test_to_publish_refuses_a_property_publish_cannot_carry() -> None:
    with pytest.raises(PropertiesJsonError, match="property 'session_expiry_interval' cannot be published"):
        properties_from_json({"session_expiry_interval": 10}, to_publish=True)
    assert properties_from_json({"session_expiry_interval": 10}) == Properties(session_expiry_interval=10)


def test_the_error_is_a_value_error() -> None:
    # Callers that knew only ValueError (the data source's rows) still catch it.
    assert issubclass(PropertiesJsonError, ValueError)
