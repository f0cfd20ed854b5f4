"""BrokerCore's auth hooks driven directly: a reload (replace_policy), offline queues and delayed wills, which the
process-level tests (tests/broker/test_auth.py) cannot time as precisely."""

from __future__ import annotations

import dataclasses
from typing import Any

from mqtt_cli.core.acl import parse_acl_file
from mqtt_cli.core.auth import AuthPolicy
from mqtt_cli.core.broker import BrokerConfig, BrokerCore
from mqtt_cli.core.changes import effect_changes, policy_changes
from mqtt_cli.core.encoder import encode
from mqtt_cli.core.packets import (
    ConnAck,
    Connect,
    Disconnect,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    Will,
)
from mqtt_cli.core.passwords import hash_password
from mqtt_cli.core.properties import Properties
from mqtt_cli.core.reader import PacketReader

SALT = bytes(12)
ACL = "user alice\ntopic readwrite a/#\ntopic read b/#\n\nuser bob\ntopic readwrite #\n"


def policy(acl: str = ACL, users: tuple[str, ...] = ("alice", "bob")) -> AuthPolicy:
    table = {u: hash_password(u, u + "-pw", SALT) for u in users}
    return AuthPolicy(allow_anonymous=False, passwords=table, acl=parse_acl_file(acl))


class Conn:
    def __init__(self, core: BrokerCore, pol: AuthPolicy, version: int = 5) -> None:
        self.core, self.version = core, version
        self.conn = core.open("127.0.0.1:9", 0.0, pol)
        self.reader = PacketReader(version)

    def send(self, packet: Any, now: float = 0.0) -> list[Any]:
        self.core.receive(self.conn, encode(packet, self.version), now)
        data = bytes(self.conn.out)
        self.conn.out.clear()
        return self.reader.feed(data)

    def connect(self, user: str, **kw: Any) -> ConnAck:
        pw = (user + "-pw").encode()
        (ack, *_) = self.send(Connect(user + "-c", protocol_version=self.version, username=user, password=pw, **kw))
        assert isinstance(ack, ConnAck)
        return ack


def test_reload_drops_removed_users_and_unreadable_subscriptions() -> None:
    core = BrokerCore(BrokerConfig(sys_interval=0))
    old = policy()
    alice, bob = Conn(core, old), Conn(core, old)
    assert alice.connect("alice").reason_code == 0 and bob.connect("bob").reason_code == 0
    (ack,) = alice.send(Subscribe(1, (Subscription("a/#", 1), Subscription("b/#", 1))))
    assert isinstance(ack, SubAck) and ack.reason_codes == (1, 1)
    new = policy("user alice\ntopic readwrite a/#\n", users=("alice",))
    effect = core.admission.replace_policy(old, new, 1.0)
    assert (effect.disconnected, effect.unsubscribed) == (1, 1)  # what the reload's log line counts
    assert policy_changes(old, new) == ["password file: bob removed", "ACL file: 2 lines removed"]
    assert effect_changes(effect) == ["1 client disconnected, 1 subscription removed"]
    assert bob.conn.closed and not alice.conn.closed  # bob is gone from the password file
    assert bob.reader.feed(bytes(bob.conn.out))[0].reason_code == 0x98  # administrative action, as mosquitto
    assert set(alice.conn.session.subscriptions) == {"a/#"}  # type: ignore[union-attr]
    assert [n.kind for n in core.out.notices if n.client_id == "alice-c"][-1] == "unsubscribed"
    rehashed = policy("user alice\ntopic readwrite a/#\n", users=("alice",))
    passwords = {"alice": hash_password("alice", "x", SALT)}
    core.admission.replace_policy(new, dataclasses.replace(rehashed, passwords=passwords), 2)
    assert alice.conn.closed  # another password: logged out


def test_reload_keeps_a_user_whose_hash_is_unchanged() -> None:
    core = BrokerCore(BrokerConfig(sys_interval=0))
    old = policy()
    alice = Conn(core, old)
    alice.connect("alice")
    effect = core.admission.replace_policy(old, policy(), 1.0)  # the same files read again (equal tables)
    assert not alice.conn.closed
    assert policy_changes(old, policy()) == effect_changes(effect) == []  # "no change"


def test_offline_queue_and_delayed_will_are_checked() -> None:
    core = BrokerCore(BrokerConfig(sys_interval=0))
    pol = policy("user alice\ntopic read x/#\ntopic write will/ok\n\nuser bob\ntopic readwrite #\n")
    alice = Conn(core, pol)
    will = Will("will/denied", b"w", 1, False, Properties(will_delay_interval=5))
    alice.connect("alice", clean_start=False, properties=Properties(session_expiry_interval=100), will=will)
    alice.send(Subscribe(1, (Subscription("x/#", 1),)))
    bob = Conn(core, pol)
    bob.connect("bob")
    bob.send(Subscribe(1, (Subscription("#", 1),)))
    core.connection_lost(alice.conn, 1.0)  # offline: the will is due in 5 s
    got = bob.send(Publish("x/1", b"ok", 1, packet_id=1))
    core.tick(10.0)  # the delayed will goes out now, and is denied
    delivered = [p for p in got + bob.reader.feed(bytes(bob.conn.out)) if isinstance(p, Publish)]
    assert [p.topic for p in delivered] == ["x/1"]  # no will
    assert len(core.sessions["alice-c"].queue) == 1  # the readable message is queued for alice
    assert any(n.kind == "dropped" and "will" in n.detail for n in core.out.notices)
    bob.send(Disconnect())


def test_denied_qos2_publish_ends_its_flow() -> None:
    """5.0: PUBREC 0x87 ends it; 3.1.1: PUBREC, then PUBREL -> PUBCOMP, as mosquitto (and nothing delivered)."""
    core = BrokerCore(BrokerConfig(sys_interval=0))
    pol = policy()
    bob = Conn(core, pol)
    bob.connect("bob")
    bob.send(Subscribe(1, (Subscription("#", 2),)))
    for version in (5, 4):
        alice = Conn(core, pol, version)
        alice.connect("alice")
        (rec,) = alice.send(Publish("z/1", b"no", 2, packet_id=7))
        assert isinstance(rec, PubRec) and rec.packet_id == 7
        if version == 5:
            assert rec.reason_code == 0x87
        else:
            (comp,) = alice.send(PubRel(7))
            assert isinstance(comp, PubComp) and comp.packet_id == 7
        alice.send(Disconnect())
    assert not [p for p in bob.reader.feed(bytes(bob.conn.out)) if isinstance(p, Publish)]


def test_another_user_does_not_inherit_a_session() -> None:
    """A kept session's subscriptions and queue were granted to its user: a client of another user with the same
    client id starts afresh (session present 0); the same user resumes it."""
    core = BrokerCore(BrokerConfig(sys_interval=0))
    pol = policy("user alice\ntopic a/#\nuser bob\ntopic #\n")
    expiry = Properties(session_expiry_interval=100)
    alice = Conn(core, pol)
    alice.send(
        Connect("shared-id", False, protocol_version=5, username="alice", password=b"alice-pw", properties=expiry)
    )
    alice.send(Subscribe(1, (Subscription("a/#", 1),)))
    core.connection_lost(alice.conn, 1.0)
    bob = Conn(core, pol)
    (ack,) = bob.send(
        Connect("shared-id", False, protocol_version=5, username="bob", password=b"bob-pw", properties=expiry)
    )
    assert ack.reason_code == 0 and not ack.session_present
    assert core.sessions["shared-id"].subscriptions == {}
    core.connection_lost(bob.conn, 2.0)
    again = Conn(core, pol)
    (ack,) = again.send(
        Connect("shared-id", False, protocol_version=5, username="bob", password=b"bob-pw", properties=expiry)
    )
    assert ack.session_present
