"""Where auth, persistence, reload and the conformance rules meet in BrokerCore (sans-IO): each case a defect a
review of the merged broker found, with the behaviour now expected."""

from __future__ import annotations

from mqtt_cli.core.acl import parse_acl_file
from mqtt_cli.core.auth import AuthPolicy
from mqtt_cli.core.broker import BrokerConfig, BrokerCore
from mqtt_cli.core.encoder import encode
from mqtt_cli.core.limits import Limits
from mqtt_cli.core.packets import ConnAck, Connect, Disconnect, PubAck, Publish, PubRec, Subscribe, Subscription
from mqtt_cli.core.persistence import SessionRemoved, SessionSaved, StoredSession
from mqtt_cli.core.properties import Properties
from mqtt_cli.core.reader import PacketReader
from mqtt_cli.core.server import ServerConnection

ACL = "user alice\ntopic read a/#\ntopic deny a/secret\nuser bob\ntopic write a/#\nuser eve\ntopic read eve/#\n"
POLICY = AuthPolicy(allow_anonymous=True, acl=parse_acl_file(ACL))


def connect(core: BrokerCore, user: str, client_id: str, now: float, clean: bool = False,
            version: int = 4) -> ServerConnection:  # fmt: skip
    conn = core.open("peer", now, POLICY)
    core.receive(conn, encode(Connect(client_id, clean, 60, user, protocol_version=version), version), now)
    return conn


def taken(conn: ServerConnection, version: int = 4) -> list[object]:
    data = bytes(conn.out)
    conn.out.clear()
    return PacketReader(version).feed(data)


def restart(core: BrokerCore, now: float) -> BrokerCore:
    """A new core given back what the store would hold of `core`'s sessions."""
    assert core.storage.changes is not None
    saved: dict[str, SessionSaved] = {}
    for change in core.storage.changes:
        if isinstance(change, SessionSaved):
            saved[change.client_id] = change
        elif isinstance(change, SessionRemoved):
            saved.pop(change.client_id, None)
    stored = [
        StoredSession(s.client_id, s.version, s.expiry_interval, s.expires_at, s.subscriptions, (), s.username)
        for s in saved.values()
    ]
    again = BrokerCore(now=now)
    again.storage.restore(stored, [], now)
    again.storage.enable_persistence()
    return again


def test_a_restored_session_is_not_handed_to_another_user_nor_given_what_its_acl_denies() -> None:
    core = BrokerCore()
    core.storage.enable_persistence()
    alice = connect(core, "alice", "alice-client", 0)
    core.receive(alice, encode(Subscribe(1, (Subscription("a/#", 1),))), 0)
    core.receive(alice, encode(Disconnect()), 0)
    core = restart(core, 10)
    bob = connect(core, "bob", "bob-client", 11, clean=True)
    core.receive(bob, encode(Publish("a/secret", b"SECRET", 1, packet_id=1)), 11)
    core.receive(bob, encode(Publish("a/open", b"open", 1, packet_id=2)), 11)
    eve = connect(core, "eve", "alice-client", 12)
    assert taken(eve)[0] == ConnAck(False, 0)  # not alice's session: eve starts afresh
    core.receive(eve, encode(Disconnect()), 12)
    core = restart(core, 20)  # eve's own session replaced alice's, and is kept as eve's
    session = core.sessions["alice-client"]
    assert session.username == "eve" and session.subscriptions == {} and not session.queue


def test_queued_messages_are_checked_against_the_acl_when_a_restored_client_comes_back() -> None:
    core = BrokerCore()
    core.storage.enable_persistence()
    alice = connect(core, "alice", "alice-client", 0)
    core.receive(alice, encode(Subscribe(1, (Subscription("a/#", 1),))), 0)
    core.receive(alice, encode(Disconnect()), 0)
    core = restart(core, 10)  # no ACL view for alice's session until she comes back
    bob = connect(core, "bob", "bob-client", 11, clean=True)
    core.receive(bob, encode(Publish("a/secret", b"SECRET", 1, packet_id=1)), 11)
    core.receive(bob, encode(Publish("a/open", b"open", 1, packet_id=2)), 11)
    alice = connect(core, "alice", "alice-client", 12)
    packets = taken(alice)
    assert packets[0] == ConnAck(True, 0)
    assert [p.payload for p in packets if isinstance(p, Publish)] == [b"open"]
    assert core.stats.dropped_not_authorized == 1


def test_an_offline_client_comes_back_under_the_acl_of_a_reload() -> None:
    core = BrokerCore()
    alice = connect(core, "alice", "alice-client", 0)
    core.receive(alice, encode(Subscribe(1, (Subscription("a/#", 1),))), 0)
    core.receive(alice, encode(Disconnect()), 0)
    bob = connect(core, "bob", "bob-client", 1, clean=True)
    core.receive(bob, encode(Publish("a/x", b"REVOKED", 1, packet_id=1)), 1)
    stricter = AuthPolicy(allow_anonymous=True, acl=parse_acl_file("user alice\ntopic read b/#\n"))
    conn = core.open("peer", 2, stricter)
    core.receive(conn, encode(Connect("alice-client", False, 60, "alice")), 2)
    packets = taken(conn)
    assert not [p for p in packets if isinstance(p, Publish)]
    assert core.sessions["alice-client"].subscriptions == {}


def test_with_persistence_acknowledgements_keep_the_order_of_their_publishes() -> None:
    core = BrokerCore(BrokerConfig(limits=Limits(message_size_limit=10)))
    core.storage.enable_persistence()
    bob = connect(core, "bob", "bob-client", 0, clean=True, version=5)
    taken(bob, 5)
    ok = encode(Publish("a/ok", b"x", 1, packet_id=1), 5)
    denied = encode(Publish("b/no", b"x", 1, packet_id=2), 5)  # bob may not write there
    too_large = encode(Publish("a/big", b"x" * 100, 1, packet_id=3), 5)
    core.receive(bob, ok + denied + too_large, 1)
    assert bytes(bob.out) == b""  # all three wait for the commit
    core.storage.release(core.storage.held)
    core.storage.held.clear()
    assert [p.packet_id for p in taken(bob, 5) if isinstance(p, PubAck)] == [1, 2, 3]


def test_with_persistence_a_resent_qos2_publish_is_answered_after_the_commit() -> None:
    core = BrokerCore()
    core.storage.enable_persistence()
    first = connect(core, "bob", "bob-client", 0)
    taken(first)
    publish = Publish("a/x", b"x", 2, packet_id=7)
    core.receive(first, encode(publish), 1)
    again = connect(core, "bob", "bob-client", 2)  # takes the session over before the commit
    taken(again)
    core.receive(again, encode(Publish("a/x", b"x", 2, dup=True, packet_id=7)), 3)
    assert bytes(again.out) == b""
    core.storage.release(core.storage.held)
    core.storage.held.clear()
    assert taken(again) == [PubRec(7)]


def test_a_reload_keeps_the_receive_maximum_and_retain_available_a_connack_announced() -> None:
    core = BrokerCore()  # announces Receive Maximum 20 and retain available
    conn = core.open("peer", 0)
    core.receive(conn, encode(Connect("c", True, 60, protocol_version=5), 5), 0)
    assert taken(conn, 5)[0] == ConnAck(False, 0, Properties(topic_alias_maximum=10, receive_maximum=20))
    core.reconfigure(BrokerConfig(limits=Limits(max_inflight=2, retain_available=False)), 1)
    for pid in (1, 2, 3):
        core.receive(conn, encode(Publish("t", b"x", 2, packet_id=pid), 5), 2)
    core.receive(conn, encode(Publish("t", b"x", 0, retain=True), 5), 2)
    assert not conn.closed


def test_a_reload_checks_topics_seen_before_against_new_level_limits() -> None:
    core = BrokerCore()
    conn = core.open("peer", 0)
    core.receive(conn, encode(Connect("c", True, 60, protocol_version=5), 5), 0)
    core.receive(conn, encode(Publish("a/b/c/d", b"x", 0), 5), 0)
    core.reconfigure(BrokerConfig(limits=Limits(max_topic_levels=2)), 1)
    core.receive(conn, encode(Publish("a/b/c/d", b"x", 0), 5), 2)
    assert conn.closed
