"""Admission: a CONNECT, in steps (the checks that may refuse it, authentication, the session it gets, the
CONNACK), the ACL a connection works under, a reload's new policy for connected clients, and dynamic security's
$CONTROL requests (core/auth.py, core/acl.py, core/dynsec.py hold the rules).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .acl import AclView
from .aliases import OutgoingAliases
from .auth import AuthPolicy, authenticate
from .closing import NEVER_EXPIRES
from .dynsec import CONTROL_TOPIC, RESPONSE_TOPIC, DynamicSecurity
from .errors import MalformedPacket, RemoteProtocolError
from .flows import FlowState
from .lifecycle import (
    DEFAULT_RECEIVE_MAXIMUM,
    LifecycleEvent,
)
from .outbox import Notice, NoticeKind
from .packets import (
    ConnAck,
    Connect,
    Publish,
)
from .persistence import (
    DeliveryDone,
    SessionRemoved,
)
from .properties import EMPTY_PROPERTIES, Properties
from .reasons import ReasonCode, reason_name, v3_connack_code
from .server import ServerConnection
from .session import Delivery, Message, Session
from .wire import control_character

if TYPE_CHECKING:
    from .broker import BrokerCore


__all__ = ["Admission", "PolicyEffect", "refusal_name"]


@dataclass(slots=True)
class PolicyEffect:
    """What a reload's new authentication policy did to the connections under the old one."""

    disconnected: int = 0  # clients it no longer admits
    unsubscribed: int = 0  # subscriptions its ACL no longer allows


class _Checked:
    """What the checks of a CONNECT found (Admission._check)."""

    __slots__ = ("assigned", "client_id", "keepalive", "server_keepalive")

    def __init__(self, client_id: str, assigned: str | None, keepalive: int, server_keepalive: int | None) -> None:
        self.client_id = client_id  # as given, or assigned
        self.assigned = assigned  # told to a 5.0 client in its CONNACK
        self.keepalive = keepalive
        self.server_keepalive = server_keepalive  # 5.0: the maximum, when the client asked for more


class Admission:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core
        self.out = core.out
        self.storage = core.storage
        self.delivery = core.delivery
        self.router = core.router
        self.closing = core.closing
        self.topics = core.topics
        self.stats = core.stats
        self.sessions = core.sessions
        self.assigned = 0  # client identifiers assigned

    # --- CONNECT ------------------------------------------------------------------------------------------

    def on_connect(self, conn: ServerConnection, p: Connect, now: float) -> None:
        """A CONNECT, in steps: the checks that may refuse it, authentication, the session it gets, the CONNACK."""
        try:
            conn.advance(LifecycleEvent.CONNECT)
        except RemoteProtocolError:
            self.closing.close(conn, now, reason=ReasonCode.PROTOCOL_ERROR, detail="second CONNECT")
            return
        conn.version = version = p.protocol_version
        conn.bridge = p.bridge and version != 5
        checked = self._check(conn, p, now)
        if checked is None:
            return
        client_id = checked.client_id
        if conn.policy is not None and not self.admit(conn, p, client_id, now):
            return
        if self.core.config.use_username_as_clientid:
            # After authentication, as mosquitto: the user name it logged in with (or its certificate's identity).
            username = conn.username if conn.policy is not None else p.username
            if not username:
                conn.client_id = client_id or None  # for the log line
                self.refuse(conn, ReasonCode.NOT_AUTHORIZED, "no user name to use as the client id "
                            "(use_username_as_clientid)", now)  # fmt: skip
                return
            client_id = username
        conn.client_id = client_id
        conn.keepalive = checked.keepalive
        self.stats.clients_total += 1
        session, session_present = self._session_for(conn, p, client_id, now)
        self.attach_acl(conn, client_id)
        self.core.connected += 1
        conn.session = session
        self._agree(conn, p, session)
        conn.advance(LifecycleEvent.CONNACK_ACCEPTED)
        ack_props = self._connack_properties(p, client_id, checked) if version == 5 else EMPTY_PROPERTIES
        self.out.send(conn, ConnAck(session_present and version > 3, 0, ack_props))  # 3.1 has no such flag
        if conn.closed:  # not even the CONNACK fits the client's Maximum Packet Size
            return
        self.stats.clients_maximum = max(self.stats.clients_maximum, self.core.connected)
        self.out.notices.append(Notice(NoticeKind.CONNECTED, client_id, conn.peer, f"MQTT level {version}"))
        if session_present:
            self.expire_inflight(session, version, now)
            for packet in session.outgoing.resend():
                self.out.send(conn, _strip(packet) if version < 5 and isinstance(packet, Publish) else packet)
        self.delivery.pump(session, now)

    def _check(self, conn: ServerConnection, p: Connect, now: float) -> _Checked | None:
        """What refuses a CONNECT before its credentials are looked at (refused and closed: None): the protocol
        level, the identifiers, the client's maximum packet size, an authentication method, the keep alive."""
        c = self.core.config
        version = p.protocol_version
        if conn.versions is not None and version not in conn.versions:
            why = f"MQTT level {version} is not allowed on this listener"
            self.refuse(conn, ReasonCode.UNSUPPORTED_PROTOCOL_VERSION, why, now)
            return None
        props = p.properties
        client_id = p.client_id
        problem = _text_problem(client_id, "client identifier") or _text_problem(p.username, "user name")
        if problem is None and p.will is not None:
            why_topic = self.topics.problem(p.will.topic)
            problem = f"will topic: {why_topic[1]}" if why_topic is not None else None
        if problem is not None:
            self.core.protocol_error(conn, MalformedPacket(f"CONNECT {problem}", packet=p, packet_type=1), now)
            return None
        assigned = None
        if not client_id and not c.use_username_as_clientid:
            if version == 3 or (version == 4 and not p.clean_start):
                # 3.1 has no empty ids; 3.1.1 allows one only with a clean session [MQTT-3.1.3-8].
                why = "empty client identifier without a clean session"
                self.refuse(conn, ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, why, now)
                return None
            if not c.allow_zero_length_clientid:
                why = "empty client identifier (allow_zero_length_clientid is false)"
                self.refuse(conn, ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, why, now)
                return None
            self.assigned += 1
            client_id = f"{c.auto_id_prefix}{c.instance}-{self.assigned}"
            if version == 5:
                assigned = client_id
        if version == 5 and (props.maximum_packet_size or 5) < 5:
            # Not even a CONNACK (5 bytes) or a PUBACK fits in it, and nothing may go over it [MQTT-3.1.2-24]:
            # refused, the CONNACK tried within it (so not sent), and closed.
            conn.client_max_packet_size = props.maximum_packet_size
            why = f"maximum packet size {props.maximum_packet_size} fits no answer"
            self.refuse(conn, ReasonCode.PACKET_TOO_LARGE, why, now)
            return None
        if version == 5 and props.authentication_method is not None:
            why = f"authentication method {props.authentication_method!r} not supported"
            self.refuse(conn, ReasonCode.BAD_AUTHENTICATION_METHOD, why, now)
            return None
        keepalive = p.keepalive
        server_keepalive = None
        max_keepalive = c.limits.max_keepalive
        if max_keepalive and (keepalive > max_keepalive or (keepalive == 0 and max_keepalive < 65535)):
            if version < 5:
                why = f"keep alive {keepalive} s is over the maximum {c.limits.max_keepalive} s"
                self.refuse(conn, ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, why, now)
                return None
            keepalive = server_keepalive = c.limits.max_keepalive
        return _Checked(client_id, assigned, keepalive, server_keepalive)

    def _session_for(self, conn: ServerConnection, p: Connect, client_id: str, now: float) -> tuple[Session, bool]:
        """The session an accepted CONNECT gets: the one it resumes (taken over from another connection, its
        delayed will cancelled) or a new one; and whether it resumed one (the CONNACK's Session Present)."""
        version = p.protocol_version
        # Session take-over (3.1.4-3): the old connection goes, its will according to its delay.
        session = self.sessions.get(client_id)
        if session is not None and session.connection is not None:
            if not p.clean_start and session.expiry_interval:
                # The session goes on with the new connection: the old will is replaced, not published; it is
                # published when the take-over ends the session (5.0 3.1.2.5; mosquitto).
                session.will = None
            self.closing.close(
                session.connection, now, reason=ReasonCode.SESSION_TAKEN_OVER, detail="session taken over"
            )
            session = self.sessions.get(client_id)  # gone if it was to end with its connection
        elif session is not None and session.will_at is not None:
            # A new connection before the will delay passed: the will is not published, whether or not this
            # connection starts clean [MQTT-3.1.3-9] (5.0 3.1.2.5 [MQTT-3.1.2-8]).
            session.will = None
            session.will_at = None
        if session is not None and (p.clean_start or self.other_user(client_id, conn)):
            self.closing.end_session(session, now)
            session = None
        session_present = session is not None
        if session is None:
            session = Session(client_id, version)
            self.sessions[client_id] = session
        else:
            # A reconnection in time cancels a delayed will (3.1.3.2.2).
            session.will_at = None
            session.expires_at = None
        session.version = version
        if version == 5:
            expiry = p.properties.session_expiry_interval or 0
        else:
            expiry = 0 if p.clean_start else NEVER_EXPIRES
        session.expiry_interval = expiry
        session.will = p.will
        session.connection = conn
        session.username = conn.username
        if self.storage.changes is not None:
            if expiry or p.will is not None:
                self.storage.save_session(session)
            elif session_present:
                self.storage.changes.append(SessionRemoved(client_id))  # kept no longer than this connection
        return session, session_present

    def _agree(self, conn: ServerConnection, p: Connect, session: Session) -> None:
        """What holds for this connection from its CONNACK on, whatever a reload changes later: windows, topic
        aliases, maximum packet sizes, retain."""
        c = self.core.config
        props = p.properties
        version = p.protocol_version
        receive_maximum = props.receive_maximum if version == 5 else None
        # No limit still means 65,535: past that every packet identifier is in flight (2.2.1).
        session.outgoing.receive_maximum = receive_maximum or c.limits.max_inflight or DEFAULT_RECEIVE_MAXIMUM
        conn.receive_maximum_announced = c.limits.max_inflight if 0 < c.limits.max_inflight < 65535 else 0
        conn.retain_available = c.limits.retain_available
        if version == 5:
            conn.client_max_packet_size = props.maximum_packet_size
            conn.topic_alias_maximum = c.limits.max_topic_alias
            if props.topic_alias_maximum:
                conn.aliases_out = OutgoingAliases(props.topic_alias_maximum)
            conn.reader.version = 5

    def _connack_properties(self, p: Connect, client_id: str, checked: _Checked) -> Properties:
        """A 5.0 CONNACK's properties, in mosquitto's order (for those who compare packets byte by byte)."""
        c = self.core.config
        named: dict[str, Any] = {}
        if c.limits.max_topic_alias:
            named["topic_alias_maximum"] = c.limits.max_topic_alias
        if checked.server_keepalive is not None:
            named["server_keep_alive"] = checked.server_keepalive
        if checked.assigned is not None:
            named["assigned_client_identifier"] = checked.assigned
        if not c.limits.retain_available:
            named["retain_available"] = 0
        if c.limits.max_packet_size:
            named["maximum_packet_size"] = c.limits.max_packet_size
        if 0 < c.limits.max_inflight < 65535:
            named["receive_maximum"] = c.limits.max_inflight
        if p.properties.request_response_information == 1 and c.response_information_prefix:
            # 4.10: a topic tree of the client's own for its response topics.
            named["response_information"] = f"{c.response_information_prefix}{client_id}/"
        return Properties(**named)

    # --- authentication and ACL (core/auth.py, core/acl.py) ----------------------------------------------------

    def admit(self, conn: ServerConnection, p: Connect, client_id: str, now: float) -> bool:
        """Checks the CONNECT's credentials against the listener's policy; refuses it (not authorized) if wrong."""
        assert conn.policy is not None
        result = authenticate(conn.policy, p.username, p.password, conn.certificate, client_id)
        if result.refusal is None:
            conn.username = result.username
            return True
        conn.client_id = client_id  # for the log line
        conn.login_failed = True  # the network layer makes the client wait for its CONNACK
        who = f"user {result.username!r}" if result.username is not None else "no user name"
        self.refuse(conn, ReasonCode.NOT_AUTHORIZED, f"login failed ({who}): {result.refusal.value}", now)
        return False

    def other_user(self, client_id: str, conn: ServerConnection) -> bool:
        """Whether a session kept under an ACL was another user's: it is not handed over (its subscriptions and
        queued messages were granted to that user), the client starts afresh as with a clean start."""
        view = self.router.views.get(client_id)
        if view is not None:
            return view.username != conn.username
        # No view: a session restored from the store, or kept from before an ACL was configured. Under an ACL it
        # goes only to the user it was granted to.
        session = self.sessions.get(client_id)
        checked = conn.policy is not None and conn.policy.controls_access
        return checked and session is not None and session.username != conn.username

    def attach_acl(self, conn: ServerConnection, client_id: str) -> None:
        policy = conn.policy
        view = policy.view(conn.username, client_id) if policy is not None else None
        if view is None:
            conn.acl = None
            self.router.views.pop(client_id, None)
        else:
            conn.acl = self.router.views[client_id] = view
            session = self.sessions.get(client_id)
            if session is not None:
                self.apply_view(session, view, conn)

    def apply_view(self, session: Session, view: AclView, conn: ServerConnection) -> None:
        """A session resumed under an ACL: what it kept that the ACL does not let its user read goes. Messages
        queued while no view or an older ACL applied (restored from the store, queued before a reload) are checked
        here, before any is sent; so are its subscriptions, as a reload checks a connected client's."""
        queue = session.queue
        if queue:
            kept: deque[Delivery] = deque()
            for d in queue:
                if view.can_read(d.message.topic):
                    kept.append(d)
                    continue
                session.queued_bytes -= d.message.size
                self.stats.dropped_not_authorized += 1
                if d.row and self.storage.changes is not None:
                    self.storage.changes.append(DeliveryDone(session.client_id, d.row))
            session.queue = kept
        gone = [f for f in session.subscriptions if not view.may_subscribe(f)]
        for flt in gone:
            del session.subscriptions[flt]
            self.router.unsubscribe(flt, session.client_id)
            why = f"{flt!r}: not allowed by the ACL"
            self.out.notices.append(Notice(NoticeKind.UNSUBSCRIBED, conn.client_id, conn.peer, why))
        if gone:
            self.storage.save_session(session)

    def replace_policy(
        self, old: AuthPolicy, new: AuthPolicy, now: float, effect: PolicyEffect | None = None
    ) -> PolicyEffect:
        """A reload: every connection under `old` goes on under `new` (see apply_policy); what that did, added to
        `effect` when given (a reload of several listeners counts once)."""
        effect = effect if effect is not None else PolicyEffect()
        for conn in [c for c in self.core.connections if c.policy is old]:
            self.apply_policy(conn, new, now, effect)
        return effect

    def apply_policy(
        self, conn: ServerConnection, new: AuthPolicy, now: float, effect: PolicyEffect | None = None
    ) -> None:
        """A reload, for one connection. A client the new policy would not admit (its user gone from the password
        file or given another password hash, anonymous access now refused) is disconnected (5.0: 0x98
        administrative action, as mosquitto); otherwise it gets the new ACL at once, and loses the subscriptions
        the new ACL no longer lets it read from (the filters SUBSCRIBE would now refuse). Counted in `effect`."""
        old = conn.policy
        conn.policy = new
        if old is None or not conn.connected or conn.closed or conn.client_id is None:
            return
        if not _still_admitted(old, new, conn):
            self.closing.close(
                conn, now, reason=ReasonCode.ADMINISTRATIVE_ACTION, detail="no longer authorized after a reload"
            )
            if effect is not None:
                effect.disconnected += 1
            return
        session = conn.session
        had = len(session.subscriptions) if session is not None else 0
        self.attach_acl(conn, conn.client_id)
        view = conn.acl
        if session is None or view is None:
            return
        for flt in [f for f in session.subscriptions if not view.may_subscribe(f)]:
            del session.subscriptions[flt]
            self.router.unsubscribe(flt, session.client_id)
            why = f"{flt!r}: ACL after a reload"
            self.out.notices.append(Notice(NoticeKind.UNSUBSCRIBED, conn.client_id, conn.peer, why))
            self.storage.save_session(session)
        if effect is not None:
            effect.unsubscribed += had - len(session.subscriptions)  # here or by _attach_acl's _apply_view

    def control(self, conn: ServerConnection, dynsec: DynamicSecurity, topic: str, payload: bytes, now: float) -> None:
        """A request on a $CONTROL topic: dynamic security's are answered on its response topic (QoS 0, as
        mosquitto), then the clients whose rights changed are disconnected (5.0: 0x98 administrative action), as
        mosquitto kicks them; other $CONTROL topics are taken and dropped."""
        if topic != CONTROL_TOPIC:
            return
        result = dynsec.handle(payload, conn.client_id or "", conn.username)
        for line in result.log:
            self.out.notices.append(Notice(NoticeKind.DYNSEC, conn.client_id, conn.peer, line))
        if result.changed:
            self.core.dynsec_changed = dynsec
        self.router.route(Message(RESPONSE_TOPIC, result.response, 0, False, EMPTY_PROPERTIES, None, now), now)
        if result.kick or result.kick_anonymous:
            self.kick(dynsec, result.kick, result.kick_anonymous, now)

    def kick(self, dynsec: DynamicSecurity, usernames: frozenset[str], anonymous: bool, now: float) -> None:
        """Disconnects the clients under `dynsec` logged in as one of `usernames` (or without a user name, when
        `anonymous`), without their wills (mosquitto_kick_client_by_username): they log in again under the new
        rules."""
        for other in list(self.core.connections):
            policy = other.policy
            if policy is None or policy.dynsec is not dynsec or not other.connected or other.closed:
                continue
            if (other.username is None and anonymous) or (other.username is not None and other.username in usernames):
                if other.session is not None:
                    other.session.will = None
                self.closing.close(
                    other, now, reason=ReasonCode.ADMINISTRATIVE_ACTION, detail="dynamic security changed its rights"
                )

    def expire_inflight(self, session: Session, version: int, now: float) -> None:
        """Before re-sending after a reconnect (5.0 3.3.2.3.3): a PUBLISH carries the expiry interval it has left,
        not the one it had at its first send [MQTT-3.3.2-6]. An expired QoS 1 message is dropped, as mosquitto
        does; an expired QoS 2 one goes with 0 (the client may hold its packet identifier already, and a new
        message under that identifier would look like a duplicate)."""
        outgoing = session.outgoing
        for entry in outgoing.entries():
            message = entry.context
            if type(message) is not Message or message.expires_at is None or entry.state is FlowState.AWAIT_PUBCOMP:
                continue
            p = entry.publish
            if p.qos == 1 and message.expired(now):
                assert p.packet_id is not None  # in flight: it has one
                outgoing.discard(p.packet_id)
                self.storage.delivery_done(session, p.packet_id)
                self.stats.expired += 1
            elif version == 5:
                remaining = max(0, int(message.expires_at - now + 0.999999))
                props = p.properties.replace(message_expiry_interval=remaining)
                entry.publish = Publish(p.topic, p.payload, p.qos, p.retain, p.dup, p.packet_id, props)

    def refuse(self, conn: ServerConnection, reason_v5: int, detail: str, now: float) -> None:
        code = reason_v5 if conn.version == 5 else v3_connack_code(reason_v5)
        self.out.send(conn, ConnAck(False, code))
        self.closing.close(
            conn, now, reason=None, detail=detail, refused=refusal_name(reason_v5), event=LifecycleEvent.CONNACK_REFUSED
        )


def refusal_name(code: int) -> str:
    """A CONNACK reason code's name as a metric label: "Bad User Name or Password" -> bad_user_name_or_password."""
    return "_".join("".join(c if c.isalnum() else " " for c in reason_name(code, 2).lower()).split())


def _text_problem(text: str | None, what: str) -> str | None:
    if text is None:
        return None
    at = control_character(text)
    return None if at < 0 else f"{what} holds control character U+{ord(text[at]):04X} at character {at}"


def _still_admitted(old: AuthPolicy, new: AuthPolicy, conn: ServerConnection) -> bool:
    """Whether `new` would admit a client `old` admitted. Passwords are not kept: a user whose hash changed (a new
    password, or the same one hashed again) must log in again."""
    if new.uses_certificates:
        return conn.certificate is not None
    if new.dynsec is not None and conn.username is not None:
        before = old.dynsec.password_of(conn.username) if old.dynsec is not None else None
        if before is None or new.dynsec.password_of(conn.username) != before:
            return False
        return new.dynsec.still_admitted(conn.username, conn.client_id or "")
    if conn.username is None or new.passwords is None:
        return new.allow_anonymous is not False
    entry = new.passwords.get(conn.username)
    return entry is not None and old.passwords is not None and old.passwords.get(conn.username) == entry


def _strip(publish: Publish) -> Publish:
    """3.x has no properties: what is kept for re-sending must encode at 3.x."""
    if not publish.properties.items:
        return publish
    p = publish
    return Publish(p.topic, p.payload, p.qos, p.retain, p.dup, p.packet_id)
