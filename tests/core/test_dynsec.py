"""Dynamic security sans-IO: the file, the ACL evaluation, the commands, and BrokerCore's $CONTROL handling.

mosquitto's own answers to the same mosquitto_ctrl script are compared in tests/broker/test_dynsec_interop.py;
these check the rules one by one, fast and without processes.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from mqtt_cli.core.admin import AdminAccess, AdminUsers, admin_access, basic_credentials
from mqtt_cli.core.auth import AuthPolicy
from mqtt_cli.core.broker import BrokerConfig, BrokerCore
from mqtt_cli.core.config import translate_mosquitto
from mqtt_cli.core.dynsec import CONTROL_TOPIC, RESPONSE_TOPIC, Check, DynamicSecurity, matches_levels
from mqtt_cli.core.packets import (
    Connect,
    Disconnect,
    PubAck,
    Publish,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
)
from mqtt_cli.core.topics import matches
from tests.core.test_broker_auth import Conn

SALT = bytes(range(12))

# As mosquitto 2.0.11's `mosquitto_ctrl dynsec init` writes it (its "textName", cJSON's tabs, its key order),
# with the password "adminpw" hashed with SALT.
MOSQUITTO_FILE = """{
\t"clients":\t[{
\t\t\t"username":\t"admin",
\t\t\t"textName":\t"Dynsec admin user",
\t\t\t"password":\t"%s",
\t\t\t"salt":\t"%s",
\t\t\t"iterations":\t101,
\t\t\t"roles":\t[{
\t\t\t\t\t"rolename":\t"admin"
\t\t\t\t}]
\t\t}],
\t"roles":\t[{
\t\t\t"rolename":\t"admin",
\t\t\t"acls":\t[{
\t\t\t\t\t"acltype":\t"publishClientSend",
\t\t\t\t\t"topic":\t"$CONTROL/dynamic-security/#",
\t\t\t\t\t"allow":\ttrue
\t\t\t\t}, {
\t\t\t\t\t"acltype":\t"publishClientReceive",
\t\t\t\t\t"topic":\t"$CONTROL/dynamic-security/#",
\t\t\t\t\t"allow":\ttrue
\t\t\t\t}, {
\t\t\t\t\t"acltype":\t"subscribePattern",
\t\t\t\t\t"topic":\t"$CONTROL/dynamic-security/#",
\t\t\t\t\t"allow":\ttrue
\t\t\t\t}]
\t\t}],
\t"defaultACLAccess":\t{
\t\t"publishClientSend":\tfalse,
\t\t"publishClientReceive":\ttrue,
\t\t"subscribe":\tfalse,
\t\t"unsubscribe":\ttrue
\t}
}"""


def mosquitto_file() -> str:
    import hashlib

    digest = hashlib.pbkdf2_hmac("sha512", b"adminpw", SALT, 101, 64)
    return MOSQUITTO_FILE % (base64.b64encode(digest).decode(), base64.b64encode(SALT).decode())


def state() -> DynamicSecurity:
    return DynamicSecurity.from_json(mosquitto_file(), lambda n: SALT[:n])


def run(ds: DynamicSecurity, *commands: dict[str, Any]) -> list[dict[str, Any]]:
    result = ds.handle(json.dumps({"commands": list(commands)}).encode(), "ctl", "admin")
    responses: list[dict[str, Any]] = json.loads(result.response)["responses"]
    return responses


def test_a_file_from_mosquitto_is_read_and_written_back_in_its_format() -> None:
    ds = state()
    assert ds.authenticate("admin", b"adminpw", "any") and not ds.authenticate("admin", b"nope", "any")
    assert ds.clients["admin"].textname == "Dynsec admin user"  # "textName": keys are read as cJSON does
    tree = ds.to_json()
    assert list(tree) == ["defaultACLAccess", "clients", "groups", "roles"]
    (client,) = tree["clients"]
    assert client["password"] and client["salt"] == "AAECAwQFBgcICQoL" and client["iterations"] == 101
    again = DynamicSecurity.from_json(ds.dumps(), lambda n: SALT[:n])
    assert again.to_json() == tree


def test_acls_by_priority_roles_then_groups_then_the_default() -> None:
    ds = state()
    replies = run(
        ds,
        {"command": "createClient", "username": "u", "password": "p"},
        {"command": "createRole", "rolename": "low"},
        {"command": "createRole", "rolename": "high"},
        {"command": "addRoleACL", "rolename": "low", "acltype": "publishClientSend", "topic": "a/#", "allow": True},
        {"command": "addRoleACL", "rolename": "high", "acltype": "publishClientSend", "topic": "a/b", "priority": 1},
        {"command": "addClientRole", "username": "u", "rolename": "low", "priority": 1},
        {"command": "addClientRole", "username": "u", "rolename": "high", "priority": 2},
        {"command": "createGroup", "groupname": "g"},
        {"command": "createRole", "rolename": "grp"},
        {"command": "addRoleACL", "rolename": "grp", "acltype": "publishClientSend", "topic": "c/#", "allow": True},
        {"command": "addGroupRole", "groupname": "g", "rolename": "grp"},
        {"command": "addGroupClient", "groupname": "g", "username": "u"},
    )
    assert all("error" not in r for r in replies), replies
    assert ds.allows("u", Check.PUBLISH_SEND, "a/x")
    assert not ds.allows("u", Check.PUBLISH_SEND, "a/b")  # the higher-priority role's deny comes first
    assert ds.allows("u", Check.PUBLISH_SEND, "c/d")  # through the group
    assert not ds.allows("u", Check.PUBLISH_SEND, "z")  # default: publishClientSend false
    assert ds.allows("u", Check.PUBLISH_RECEIVE, "z")  # default: publishClientReceive true
    assert not ds.allows("u", Check.PUBLISH_RECEIVE, "$CONTROL/x")  # never by default
    assert not ds.allows("stranger", Check.PUBLISH_RECEIVE, "z")  # not a client: nothing
    assert not ds.allows(None, Check.PUBLISH_SEND, "c/d")
    run(ds, {"command": "setAnonymousGroup", "groupname": "g"})
    assert ds.allows(None, Check.PUBLISH_SEND, "c/d")  # anonymous clients get the anonymous group's roles
    assert run(ds, {"command": "deleteGroup", "groupname": "g"})[0]["error"] == (
        "Deleting the anonymous group is forbidden"
    )


def test_subscribe_literal_and_pattern() -> None:
    ds = state()
    run(
        ds,
        {"command": "createClient", "username": "u"},
        {"command": "createRole", "rolename": "r"},
        {"command": "addRoleACL", "rolename": "r", "acltype": "subscribeLiteral", "topic": "a/+", "allow": True},
        {"command": "addRoleACL", "rolename": "r", "acltype": "subscribePattern", "topic": "b/#", "allow": True},
        {"command": "addClientRole", "username": "u", "rolename": "r"},
    )
    assert ds.allows("u", Check.SUBSCRIBE, "a/+") and not ds.allows("u", Check.SUBSCRIBE, "a/x")
    assert ds.allows("u", Check.SUBSCRIBE, "b/x/+") and ds.allows("u", Check.SUBSCRIBE, "b")
    assert not ds.allows("u", Check.SUBSCRIBE, "#")


def test_lists_count_offset_errors_and_correlation() -> None:
    ds = state()
    for name in ("c", "a", "b"):
        run(ds, {"command": "createClient", "username": name})
    (listed,) = run(ds, {"command": "listClients", "count": 2, "offset": 1, "correlationData": "x1"})
    assert listed == {
        "command": "listClients",
        "data": {"totalCount": 4, "clients": ["admin", "b"]},  # sorted: a, admin, b, c
        "correlationData": "x1",
    }
    assert run(ds, {"command": "createClient", "username": "a"})[0] == {
        "command": "createClient",
        "error": "Client already exists",
    }
    assert run(ds, {"command": "nope"})[0] == {"command": "nope", "error": "Unknown command"}
    result = ds.handle(b"{not json", "ctl", "admin")
    assert json.loads(result.response) == {
        "responses": [{"command": "Unknown command", "error": "Payload not valid JSON"}]
    }


def test_changes_name_who_to_disconnect_and_are_logged() -> None:
    ds = state()
    run(ds, {"command": "createClient", "username": "u", "password": "p"}, {"command": "createRole", "rolename": "r"})
    run(ds, {"command": "addClientRole", "username": "u", "rolename": "r"})
    result = ds.handle(
        json.dumps(
            {"commands": [{"command": "addRoleACL", "rolename": "r", "acltype": "publishClientSend", "topic": "t"}]}
        ).encode(),
        "ctl",
        "admin",
    )
    assert result.changed and result.kick == {"u"}
    assert result.log == ("user 'admin' | addRoleACL | rolename=r | acltype=publishClientSend | topic=t | "
                          "priority=0 | allow=false",)  # fmt: skip


# --- BrokerCore: $CONTROL requests, kicks, unsubscribe ACLs ---------------------------------------------------


def broker() -> tuple[BrokerCore, AuthPolicy, DynamicSecurity]:
    ds = state()
    return BrokerCore(BrokerConfig(sys_interval=0)), AuthPolicy(allow_anonymous=False, dynsec=ds), ds


def login(core: BrokerCore, pol: AuthPolicy, user: str, password: str) -> Conn:
    c = Conn(core, pol)
    (ack,) = c.send(Connect(f"{user}-c", protocol_version=5, username=user, password=password.encode()))
    assert ack.reason_code == 0
    return c


def control(admin: Conn, *commands: dict[str, Any]) -> list[Any]:
    return admin.send(Publish(CONTROL_TOPIC, json.dumps({"commands": list(commands)}).encode(), 1, packet_id=7))


def test_control_requests_are_answered_not_routed_and_only_for_admins() -> None:
    core, pol, ds = broker()
    admin = login(core, pol, "admin", "adminpw")
    (ack,) = admin.send(Subscribe(1, (Subscription("$CONTROL/dynamic-security/#", 0),)))
    assert isinstance(ack, SubAck) and ack.reason_codes == (0,)
    answer, puback = control(admin, {"command": "createClient", "username": "u", "password": "p"})
    assert isinstance(answer, Publish) and answer.topic == RESPONSE_TOPIC  # not the request itself
    assert json.loads(answer.payload) == {"responses": [{"command": "createClient"}]}
    assert isinstance(puback, PubAck) and puback.reason_code == 0
    assert core.dynsec_changed is ds and [n.kind for n in core.out.notices][-1] == "dynsec"
    user = login(core, pol, "u", "p")
    (denied,) = control(user, {"command": "deleteClient", "username": "admin"})
    assert isinstance(denied, PubAck) and denied.reason_code == 0x87  # no role on $CONTROL
    assert "admin" in ds.clients


def test_a_client_whose_rights_change_is_disconnected_and_a_disabled_one_refused() -> None:
    core, pol, _ds = broker()
    admin = login(core, pol, "admin", "adminpw")
    control(admin, {"command": "createClient", "username": "u", "password": "p"})
    user = login(core, pol, "u", "p")
    control(admin, {"command": "disableClient", "username": "u"})
    assert user.conn.closed
    (gone,) = user.reader.feed(bytes(user.conn.out))
    assert isinstance(gone, Disconnect) and gone.reason_code == 0x98
    again = Conn(core, pol)
    (ack,) = again.send(Connect("u-c", protocol_version=5, username="u", password=b"p"))
    assert ack.reason_code == 0x87
    assert not admin.conn.closed


def test_unsubscribe_needs_the_unsubscribe_acl() -> None:
    core, pol, _ds = broker()
    admin = login(core, pol, "admin", "adminpw")
    control(
        admin,
        {"command": "createClient", "username": "u", "password": "p"},
        {"command": "createRole", "rolename": "r"},
        {"command": "addRoleACL", "rolename": "r", "acltype": "subscribePattern", "topic": "#", "allow": True},
        {"command": "addRoleACL", "rolename": "r", "acltype": "unsubscribeLiteral", "topic": "keep", "allow": False},
        {"command": "addClientRole", "username": "u", "rolename": "r"},
    )
    user = login(core, pol, "u", "p")
    user.send(Subscribe(1, (Subscription("keep", 0), Subscription("other", 0))))
    (ack,) = user.send(Unsubscribe(2, ("keep", "other")))
    assert isinstance(ack, UnsubAck) and ack.reason_codes == (0x87, 0)
    assert set(user.conn.session.subscriptions) == {"keep"}  # type: ignore[union-attr]


def test_mosquitto_conf_plugin_lines() -> None:
    conf = "plugin /usr/lib/x86_64-linux-gnu/mosquitto_dynamic_security.so\nplugin_opt_config_file /etc/d.json\n"
    t = translate_mosquitto(conf, "m.conf")
    assert t.settings.dynamic_security.config_file == "/etc/d.json" and not t.unsupported
    t = translate_mosquitto("plugin /usr/lib/x86_64-linux-gnu/mosquitto_dynamic_security.so\n", "m.conf")
    assert t.settings.dynamic_security.config_file is None
    assert [u.why for u in t.unsupported] == ["the plugin needs plugin_opt_config_file (left off)"]
    (other,) = translate_mosquitto("plugin /opt/auth.so\n", "m.conf").unsupported
    assert "only mosquitto's dynamic security plugin is built in" in other.why


def test_reload_keeps_clients_the_file_still_admits() -> None:
    core, pol, ds = broker()
    admin = login(core, pol, "admin", "adminpw")
    control(admin, {"command": "createClient", "username": "u", "password": "p"})
    user = login(core, pol, "u", "p")
    same = AuthPolicy(allow_anonymous=False, dynsec=DynamicSecurity.from_json(ds.dumps(), lambda n: SALT[:n]))
    core.admission.replace_policy(pol, same, 1.0)
    assert not user.conn.closed and not admin.conn.closed
    changed = DynamicSecurity.from_json(ds.dumps(), lambda n: SALT[:n])
    run(changed, {"command": "setClientPassword", "username": "u", "password": "new"})
    core.admission.replace_policy(same, AuthPolicy(allow_anonymous=False, dynsec=changed), 2.0)
    assert user.conn.closed and not admin.conn.closed


def test_admin_api_access_from_dynamic_security_roles() -> None:
    ds = state()
    run(
        ds,
        {"command": "createClient", "username": "mon", "password": "m"},
        {"command": "createRole", "rolename": "monitor"},
        {"command": "createGroup", "groupname": "ops", "roles": [{"rolename": "monitor"}]},
        {"command": "addGroupClient", "groupname": "ops", "username": "mon"},
    )
    pol = AuthPolicy(dynsec=ds)
    users = AdminUsers(readonly_role="monitor")
    assert admin_access(users, pol, "admin", b"adminpw") is AdminAccess.FULL  # the admin role
    assert admin_access(users, pol, "admin", b"wrong") is AdminAccess.NONE
    assert admin_access(users, pol, "mon", b"m") is AdminAccess.READ  # through its group
    run(ds, {"command": "disableClient", "username": "admin"})
    assert admin_access(users, pol, "admin", b"adminpw") is AdminAccess.NONE
    assert basic_credentials("Basic " + base64.b64encode(b"a:b:c").decode()) == ("a", b"b:c")
    assert basic_credentials("Bearer x") is None


ALLOW = {"allow": True}


def test_shared_subscriptions_are_checked_whole_as_mosquitto_does() -> None:
    ds = state()
    run(
        ds,
        {"command": "createClient", "username": "u"},
        {"command": "createRole", "rolename": "r"},
        {"command": "addRoleACL", "rolename": "r", "acltype": "subscribePattern", "topic": "a/#", "allow": True},
        {"command": "addRoleACL", "rolename": "r", "acltype": "subscribePattern", "topic": "$share/g/b/#"} | ALLOW,
        {"command": "addClientRole", "username": "u", "rolename": "r"},
    )
    view = ds.view("u", "u-c")
    assert view.may_subscribe("a/x") and not view.may_subscribe("$share/g/a/x")
    assert view.may_subscribe("$share/g/b/x") and not view.may_subscribe("b/x")


def test_publish_acl_matching_is_the_topic_engines() -> None:
    filters = ["#", "+", "a/#", "a/+", "a/b", "+/b", "$SYS/#", "+/+/c", "a/+/#", "/#", "a//b"]
    topics = ["a", "a/b", "a/b/c", "b/b", "$SYS/x", "$SYS", "/x", "a//b", "x/y/c", ""]
    for flt in filters:
        for topic in topics:
            assert matches_levels(tuple(flt.split("/")), topic.split("/")) == matches(flt, topic), (flt, topic)

