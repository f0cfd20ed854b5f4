"""Bridge topic rules: mosquitto's `topic` grammar and the remapping it implies."""

from __future__ import annotations

import pytest

from mqtt_cli.core.bridge import BridgeRule, BridgeRuleError, parse_rule


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("sensors/#", BridgeRule("sensors/#", "out", 0)),
        ("sensors/# in", BridgeRule("sensors/#", "in", 0)),
        ("sensors/# both 2", BridgeRule("sensors/#", "both", 2)),
        ("# out 1 site/ cloud/site1/", BridgeRule("#", "out", 1, "site/", "cloud/site1/")),
        ('# in 1 "" remote/', BridgeRule("#", "in", 1, "", "remote/")),
        ('"" out 0 local/one remote/other', BridgeRule("", "out", 0, "local/one", "remote/other")),
    ],
)
def test_parse(text: str, rule: BridgeRule) -> None:
    assert parse_rule(text) == rule
    assert parse_rule(str(rule)) == rule  # printed back in the same grammar


def test_out_remap() -> None:
    rule = parse_rule("# out 1 site/ cloud/site1/")
    assert rule.local_filter == "site/#"
    assert rule.to_remote("site/a/b") == "cloud/site1/a/b"
    assert rule.to_remote("other/a") is None
    assert rule.to_local("cloud/site1/a") is None  # out only


def test_in_remap_with_empty_local_prefix() -> None:
    rule = parse_rule('# in 0 "" remote/')
    assert rule.remote_filter == "remote/#"
    assert rule.to_local("remote/x/y") == "x/y"


def test_both_without_prefixes() -> None:
    rule = parse_rule("a/+ both 2")
    assert rule.to_remote("a/b") == "a/b" and rule.to_local("a/b") == "a/b"
    assert rule.to_remote("a/b/c") is None


def test_single_topic_remap() -> None:
    rule = parse_rule('"" both 1 local/one remote/other')
    assert rule.local_filter == "local/one" and rule.remote_filter == "remote/other"
    assert rule.to_remote("local/one") == "remote/other"
    assert rule.to_local("remote/other") == "local/one"
    assert rule.to_remote("local/one/x") is None


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("", "expected PATTERN"),
        ("a sideways", "direction"),
        ("a out 3", "QoS"),
        ("a out 1 only-local", "expected PATTERN"),
        ("a out 1 lo/+/ remote/", "wildcards"),
        ('"" out 1 "" remote', "empty pattern"),
        ("a/#/b", "not a valid filter"),
        # mosquitto refuses these at start-up too: the filter a side would subscribe to is not valid.
        ('# in 1 "" pre', "the remote prefix and pattern 'pre#' is not a valid filter"),
        ('# out 1 pre ""', "the local prefix and pattern 'pre#' is not a valid filter"),
        ("'unclosed", "No closing quotation"),
    ],
)
def test_bad_rules_name_the_bad_part(text: str, what: str) -> None:
    with pytest.raises(BridgeRuleError) as info:
        parse_rule(text)
    assert what in str(info.value)


def test_parent_of_a_prefix_keeps_its_name_as_in_mosquitto() -> None:
    # `k/l/#` matches `k/l` itself, which does not start with the prefix `k/l/`: mosquitto keeps the whole topic
    # and adds the other prefix (bridge__remap_topic_in / send__publish compare with strncmp).
    out = parse_rule("# out 1 k/l/ k/r/")
    assert out.to_remote("k/l") == "k/r/k/l"
    assert out.to_remote("k/l/x") == "k/r/x"
    inward = parse_rule("# in 1 k/l/ k/r/")
    assert inward.to_local("k/r") == "k/l/k/r"
    assert inward.to_local("k/r/y") == "k/l/y"
