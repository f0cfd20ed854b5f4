"""aliases.OutgoingAliases: our topic aliases towards a peer, as the client applies them and as a sender that
builds its own bytes (the broker's deliveries) uses the map."""

from __future__ import annotations

from mqtt_cli.core.aliases import OutgoingAliases
from mqtt_cli.core.packets import Publish
from mqtt_cli.core.properties import Properties


def test_the_map_for_a_sender_of_its_own_bytes() -> None:
    aliases = OutgoingAliases(2)
    assert aliases.alias_of("a") == 0 and aliases.free() == 1
    aliases.point(1, "a")
    assert aliases.alias_of("a") == 1 and aliases.free() == 2
    aliases.point(2, "b")
    assert aliases.free() == 0  # all taken: topics go in full
    aliases.point(1, "c")  # re-pointed: "a" has none any more
    assert (aliases.alias_of("a"), aliases.alias_of("c"), aliases.topic_of(1)) == (0, 1, "c")
    aliases.reset(1)  # a new connection
    assert (aliases.alias_of("c"), aliases.free()) == (0, 1)


def test_apply_sets_an_alias_once_then_sends_it_alone() -> None:
    aliases = OutgoingAliases(1)
    first = aliases.apply(Publish("x/y", b"1"), auto=True)
    second = aliases.apply(Publish("x/y", b"2"), auto=True)
    third = aliases.apply(Publish("other", b"3"), auto=True)  # no alias left
    assert (first.topic, first.properties.topic_alias) == ("x/y", 1)
    assert (second.topic, second.properties.topic_alias) == ("", 1)
    assert (third.topic, third.properties.topic_alias) == ("other", None)
    assert aliases.apply(Publish("x/y", b"4"), auto=False).topic == "x/y"  # without auto: untouched
    own = Publish("z", b"5", properties=Properties(topic_alias=1))  # the owner's alias, pointed elsewhere
    assert aliases.apply(own, auto=True) is own and aliases.topic_of(1) == "z" and aliases.alias_of("x/y") == 0


def test_prepare_points_nothing_until_told() -> None:
    aliases = OutgoingAliases(1)
    wire, alias = aliases.prepare(Publish("x/y", b"1"), auto=True)
    assert (wire.topic, wire.properties.topic_alias, alias) == ("x/y", 1, 1)
    assert aliases.alias_of("x/y") == 0 and aliases.free() == 1  # not sent (too large, say): nothing set
    aliases.point(alias, "x/y")
    wire, alias = aliases.prepare(Publish("x/y", b"2"), auto=True)
    assert (wire.topic, wire.properties.topic_alias, alias) == ("", 1, 0)
