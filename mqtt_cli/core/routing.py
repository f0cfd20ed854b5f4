"""Routing: where a message goes. The subscriptions (a topic trie with a match cache), the retained messages, the
$share/ groups (sharing.py picks a group's member) and the ACL views that filter deliveries. A message is matched
here and handed to delivery.py per receiving session; a plain QoS 0 one is written as bytes when nothing about its
receivers needs more (`forward`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .acl import AclView
from .encoder import encode_topic_name, frame_publish
from .lifecycle import (
    ConnectionState,
)
from .outbox import Notice, NoticeKind
from .packets import SubAck, Subscribe, UnsubAck, Unsubscribe
from .persistence import (
    RetainedCleared,
    RetainedSet,
)
from .reasons import ReasonCode
from .retained import RetainedStore
from .server import ServerConnection
from .session import Message, SubscriptionOptions
from .sharing import SharedGroup, SharedGroups
from .topics import TopicTrie, TrieEntry, parse_shared, topic_filter_error

if TYPE_CHECKING:
    from .broker import BrokerCore

_CONNECTED: Final = ConnectionState.CONNECTED
_CLOSED: Final = ConnectionState.CLOSED

__all__ = ["MATCH_CACHE_TOPICS", "Router"]

_V3_SUBACK_FAILURE = 0x80  # 3.1.1 SUBACK return code: refused
MATCH_CACHE_TOPICS = 4096  # topics whose subscription matches are remembered (emptied when full)


class Router:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core
        self.out = core.out
        self.storage = core.storage
        self.delivery = core.delivery
        self.stats = core.stats
        self.sessions = core.sessions
        # Match results cached per topic: a publisher's topic recurs, and a hit is one dict lookup where a walk of
        # the trie was a tenth of a fan-in message's time. Any subscription change empties it.
        self.subscriptions: TopicTrie[str, SubscriptionOptions] = TopicTrie(cache_size=MATCH_CACHE_TOPICS)
        self.retained: RetainedStore[Message] = RetainedStore()
        self.shared = SharedGroups()  # the $share/ groups, kept as subscriptions change; their policy picks
        self.views: dict[str, AclView] = {}  # client id -> its ACL, while its session lasts (auth hook)

    # --- SUBSCRIBE / UNSUBSCRIBE --------------------------------------------------------------------------

    def on_subscribe(self, conn: ServerConnection, p: Subscribe, now: float) -> None:
        session = conn.session
        assert session is not None
        if self.core.topics.filters_problem(conn, (sub.topic_filter for sub in p.subscriptions), "SUBSCRIBE", now):
            return
        version = conn.version
        sid = p.properties.subscription_identifier if version == 5 else None
        codes = []
        retained: list[tuple[Message, int, bool, tuple[int, ...]]] = []
        notices = self.out.notices
        for sub in p.subscriptions:
            flt = sub.topic_filter
            if topic_filter_error(flt) is not None:
                code = ReasonCode.TOPIC_FILTER_INVALID if version == 5 else _V3_SUBACK_FAILURE
                codes.append(code)
                detail = f"SUBSCRIBE {flt!r} QoS {sub.qos}: refused, not a valid topic filter"
                notices.append(Notice(NoticeKind.REFUSED, conn.client_id, conn.peer, detail, code))
                continue
            if conn.acl is not None and not conn.acl.may_subscribe(flt):
                # Our one difference from mosquitto's acl_file (which grants and then filters every delivery).
                code = ReasonCode.NOT_AUTHORIZED if version == 5 else _V3_SUBACK_FAILURE
                detail = f"SUBSCRIBE {flt!r} QoS {sub.qos}: refused by the ACL"
                notices.append(Notice(NoticeKind.REFUSED, conn.client_id, conn.peer, detail, code))
                codes.append(code)
                continue
            if conn.bridge:
                # A 3.x bridge has no subscription options: the flag asks for what 5.0 bridges ask for (mosquitto).
                opts = SubscriptionOptions(sub.qos, True, True, sub.retain_handling, sid)
            else:
                opts = SubscriptionOptions(sub.qos, sub.no_local, sub.retain_as_published, sub.retain_handling, sid)
            is_new = self.subscribe(flt, session.client_id, opts)
            session.subscriptions[flt] = opts
            codes.append(sub.qos)
            replaced = "" if is_new else ", replacing the one it had"
            detail = f"SUBSCRIBE {flt!r} QoS {sub.qos}: granted QoS {sub.qos}{replaced}"
            notices.append(Notice(NoticeKind.SUBSCRIBE, conn.client_id, conn.peer, detail))
            group, real = parse_shared(flt)
            if group is not None or sub.retain_handling == 2 or (sub.retain_handling == 1 and not is_new):
                continue  # no retained messages for shared subscriptions (4.8.2) or when not asked for
            for message in self.retained.match(real):
                if conn.acl is not None and not conn.acl.can_read(message.topic):
                    continue
                retained.append((message, min(message.qos, sub.qos), True, (sid,) if sid else ()))
        self.storage.save_session(session)
        self.out.send(conn, SubAck(p.packet_id, tuple(codes)))
        for message, qos, retain, sids in retained:
            if message.expired(now):
                self.retained.discard(message.topic)
                self.stats.expired += 1
                continue
            self.delivery.deliver(session, message, qos, retain, sids, now)

    def on_unsubscribe(self, conn: ServerConnection, p: Unsubscribe, now: float) -> None:
        session = conn.session
        assert session is not None
        if self.core.topics.filters_problem(conn, p.topic_filters, "UNSUBSCRIBE", now):
            return
        codes: list[int] = []
        for flt in p.topic_filters:
            if conn.acl is not None and not conn.acl.may_unsubscribe(flt):
                # Dynamic security's unsubscribe ACLs (mosquitto): the subscription stays.
                codes.append(ReasonCode.NOT_AUTHORIZED)
                continue
            existed = session.subscriptions.pop(flt, None) is not None
            if existed:
                self.unsubscribe(flt, session.client_id)
            codes.append(0x00 if existed else 0x11)
            detail = f"UNSUBSCRIBE {flt!r}: {'removed' if existed else 'no such subscription (0x11)'}"
            self.out.notices.append(Notice(NoticeKind.UNSUBSCRIBE, conn.client_id, conn.peer, detail))
        self.storage.save_session(session)
        self.out.send(conn, UnsubAck(p.packet_id, tuple(codes) if conn.version == 5 else ()))

    def route(self, message: Message, now: float) -> bool:
        """Stores a retained message and delivers to every matching subscription; True when any matched."""
        topic = message.topic
        if message.retain:
            if message.payload:
                self.retained.set(topic, message)
            else:
                self.retained.discard(topic)
            if (
                self.storage.changes is not None and message.origin is not None
            ):  # $SYS figures (origin None) are not kept
                self.storage.changes.append(RetainedSet(message) if message.payload else RetainedCleared(topic))
        return self.route_to(self.subscriptions.match(topic), message, now)

    def forward(
        self, entries: list[TrieEntry[str, SubscriptionOptions]], topic: str, payload: bytes, origin: str | None
    ) -> bool:
        """_route_to for a plain QoS 0 message (no properties, not retained), written as bytes to each subscriber
        (one encoding per protocol family). False, with nothing done, when any subscription needs the general
        path: shared, under an ACL, several of one client (merged), a 5.0 subscription identifier; or when any
        receiver does: topic aliases, an in-process client, a full buffer, a packet over its maximum, offline."""
        if self.views:
            return False
        if len(entries) > 1 and len({entry[1] for entry in entries}) < len(entries):
            return False
        sessions = self.sessions
        buffered = self.core.config.max_buffered_bytes
        v3 = v5 = b""
        receivers: list[tuple[ServerConnection, bytes]] = []
        for entry in entries:
            client_id = entry[1]
            opts = entry[2]
            if entry[0][:7] == "$share/":
                return False
            session = sessions.get(client_id)
            if session is None or (opts.no_local and client_id == origin):
                continue  # nothing to send (as _route_to)
            conn = session.connection
            if (
                conn is None
                or conn.state is _CLOSED
                or conn.wants_drain
                or conn.sink is not None
                or conn.aliases_out is not None
            ):
                return False
            if len(conn.out) >= buffered:
                return False
            # What Message.wire frames for this variant (QoS 0, no retain flag, no properties).
            if conn.version == 5:
                if opts.subscription_identifier:
                    return False
                data = v5 = v5 or frame_publish(0x30, encode_topic_name(topic), b"", b"\x00", payload)
            else:
                data = v3 = v3 or frame_publish(0x30, encode_topic_name(topic), b"", b"", payload)
            limit = conn.client_max_packet_size
            if limit is not None and len(data) > limit:
                return False
            receivers.append((conn, data))
        stats = self.stats
        for conn, data in receivers:
            stats.publish_sent_qos[0] += 1
            stats.publish_sent_bytes_qos[0] += len(payload)
            self.out.write(conn, data)
        return True

    def route_to(self, entries: list[TrieEntry[str, SubscriptionOptions]], message: Message, now: float) -> bool:
        """Delivers `message` to the matched subscriptions `entries`; True when there are any."""
        if not entries:
            return False
        topic = message.topic
        origin = message.origin
        views = self.views  # empty unless an ACL is in force: then every delivery is checked for read access
        if len(entries) == 1 and entries[0][0][:7] != "$share/":
            # The common case: one subscription matches, nothing to merge.
            _, client_id, opts = entries[0]
            session = self.sessions.get(client_id)
            if views and not _may_read(views, client_id, topic):
                return True
            if session is not None and not (opts.no_local and client_id == origin):
                sid = (opts.subscription_identifier,) if opts.subscription_identifier else ()
                qos = message.qos if message.qos < opts.qos else opts.qos
                self.delivery.deliver(session, message, qos, message.retain and opts.retain_as_published, sid, now)
            return True
        targets: dict[str, tuple[int, bool, tuple[int, ...]]] = {}
        groups: dict[str, None] = {}  # the $share/ filters matched (one entry per member), each group once
        for flt, client_id, opts in entries:
            if flt[:7] == "$share/":
                groups[flt] = None
                continue
            if opts.no_local and client_id == origin:
                continue
            if views and not _may_read(views, client_id, topic):
                continue
            if client_id in targets:  # overlapping subscriptions of one client
                _merge(targets, client_id, opts)
            else:  # what _merge does for a client's first one, without the call (fan-out's hot loop)
                ident = opts.subscription_identifier
                targets[client_id] = (opts.qos, opts.retain_as_published, (ident,) if ident else ())
        for flt in groups:
            # Shared subscriptions: one member per group, the policy's pick.
            group = self.shared.groups[flt]
            chosen = self.shared_member(group, topic, views)
            if chosen:
                _merge(targets, chosen, group.options[chosen])
        sessions = self.sessions
        mqos = message.qos
        mretain = message.retain
        for client_id, (sub_qos, rap, sids) in targets.items():
            session = sessions.get(client_id)
            if session is None:
                continue
            self.delivery.deliver(session, message, mqos if mqos < sub_qos else sub_qos, mretain and rap, sids, now)
        return True

    def shared_member(self, group: SharedGroup, topic: str, views: dict[str, AclView]) -> str:
        """The member of a shared group `topic` goes to: the policy's pick among those allowed to read it, the
        connected ones when there are any; "" when none may read it."""
        sessions = self.sessions
        members = group.members
        if views:
            members = [c for c in members if _may_read(views, c, topic)]
            if not members:
                return ""
        online: list[str] = []
        for client_id in members:
            session = sessions.get(client_id)
            if session is not None and session.connection is not None:
                online.append(client_id)
        # All offline: one of them still takes it, queued in its session for when it is back.
        return self.shared.policy.pick(group, online if online else members)

    def subscribe(self, flt: str, client_id: str, opts: SubscriptionOptions) -> bool:
        """Indexes a subscription (True when new): the trie matches it, a $share/ one joins its group too."""
        is_new = self.subscriptions.add(flt, client_id, opts)
        if flt[:7] == "$share/":
            self.shared.add(flt, client_id, opts)
        return is_new

    def unsubscribe(self, flt: str, client_id: str) -> None:
        self.subscriptions.remove(flt, client_id)
        if flt[:7] == "$share/":
            self.shared.remove(flt, client_id)


def _merge(targets: dict[str, tuple[int, bool, tuple[int, ...]]], client_id: str, opts: SubscriptionOptions) -> None:
    """Adds one matching subscription to a client's delivery: overlapping subscriptions deliver once, at the
    highest QoS, with every subscription identifier (3.3.4)."""
    sid = (opts.subscription_identifier,) if opts.subscription_identifier else ()
    prev = targets.get(client_id)
    if prev is None:
        targets[client_id] = (opts.qos, opts.retain_as_published, sid)
    else:
        sids = prev[2] + sid if sid and sid[0] not in prev[2] else prev[2]  # one SUBSCRIBE's filters share one id
        targets[client_id] = (max(prev[0], opts.qos), prev[1] or opts.retain_as_published, sids)


def _may_read(views: dict[str, AclView], client_id: str, topic: str) -> bool:
    view = views.get(client_id)
    return view is None or view.can_read(topic)
