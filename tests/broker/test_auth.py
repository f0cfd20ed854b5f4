"""Authentication and ACLs: our broker and Debian's mosquitto 2.0.11 run on the same password and ACL files, and
the same clients (paho-mqtt, mosquitto_sub) must see the same thing, except where we differ on purpose (SUBSCRIBE
refused for a filter the client can read nothing under). Then the security set: what a client must never get,
and start-up errors."""

from __future__ import annotations

import json
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.properties import Properties as PahoProperties

from tests.brokers import HOST, Broker, free_port, start_mosquitto, wait_for_port

from .conftest import start_ours

pytestmark = pytest.mark.interop

DEADLINE = 15.0
V311, V5 = paho.MQTTv311, paho.MQTTv5

ACL = """\
# admin: everything, $SYS included
user admin
topic readwrite #
topic read $SYS/#

user alice
topic readwrite alice/#
topic read public/#
topic deny public/secret/#
topic write inbox/#

user bob
topic read public/#

# every client: its own devices/<client id> tree, and users/<user name> to read
pattern readwrite devices/%c/#
pattern read users/%u/#
"""

PASSWORDS = {"admin": "adm1n", "alice": "al1ce", "bob": "b0b", "carol": "car0l", "dave": "dav3"}


def mqtt(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "mqtt_cli", *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        stdin=subprocess.DEVNULL,
    )
    if check:
        assert done.returncode == 0, done.stderr
    return done


def make_password_file(path: Path) -> None:
    """Written in turn by Debian's mosquitto_passwd and by `mqtt passwd`, each updating the other's file, with both
    hash kinds from each: whichever broker reads it, every user's hash comes from both tools."""
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)  # noqa: E731
    run("mosquitto_passwd", "-c", "-b", str(path), "admin", PASSWORDS["admin"])  # $7$
    run("mosquitto_passwd", "-H", "sha512", "-b", str(path), "alice", PASSWORDS["alice"])  # $6$
    mqtt("passwd", "-b", str(path), "bob", PASSWORDS["bob"])  # $7$, ours
    mqtt("passwd", "-H", "sha512", "-b", str(path), "carol", PASSWORDS["carol"])  # $6$, ours
    run("mosquitto_passwd", "-b", str(path), "dave", PASSWORDS["dave"])  # mosquitto_passwd updating our file
    kinds = {line.split("$")[1] for line in path.read_text().splitlines()}
    assert kinds == {"6", "7"}


class Client:
    """A paho-mqtt client, connected (or refused: `rc`) when the constructor returns."""

    def __init__(
        self,
        broker: Broker,
        user: str | None = None,
        password: str | None = None,
        *,
        client_id: str | None = None,
        protocol: int = V311,
        will: tuple[str, bytes] | None = None,
        port: int | None = None,
        tls: dict[str, str] | None = None,
    ) -> None:
        self.client_id = client_id or f"t-{uuid.uuid4().hex[:8]}"
        self.messages: queue.Queue[paho.MQTTMessage] = queue.Queue()
        self.acks: queue.Queue[tuple[str, int, Any]] = queue.Queue()
        c = self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=self.client_id, protocol=protocol)
        c.on_message = lambda _c, _u, m: self.messages.put(m)
        c.on_subscribe = lambda _c, _u, mid, codes, _p: self.acks.put(("sub", mid, [x.value for x in codes]))
        c.on_publish = lambda _c, _u, mid, rc, _p: self.acks.put(("pub", mid, rc.value))
        answered: queue.Queue[int] = queue.Queue()
        c.on_connect = lambda _c, _u, _f, rc, _p: answered.put(rc.value)
        c.on_connect_fail = lambda _c, _u: answered.put(-1)
        if user is not None:
            c.username_pw_set(user, password)
        if will is not None:
            c.will_set(will[0], will[1], qos=1)
        if tls is not None:
            c.tls_set(ca_certs=tls["ca"], certfile=tls.get("cert"), keyfile=tls.get("key"))
        c.reconnect_delay_set(60, 60)  # a refused client must not try again within the test
        started = time.monotonic()
        c.connect(broker.host, port or broker.port)
        c.loop_start()
        self.rc = answered.get(timeout=DEADLINE)
        self.connect_time = time.monotonic() - started
        if self.rc != 0:
            self.close()

    def subscribe(self, *filters: str, qos: int = 1) -> list[int]:
        self.client.subscribe([(f, qos) for f in filters])
        kind, _, codes = self.acks.get(timeout=DEADLINE)
        assert kind == "sub"
        return codes

    def publish(self, topic: str, payload: bytes = b"x", qos: int = 1, retain: bool = False) -> int:
        """The PUBACK's reason code (0 for 3.1.1, which has none)."""
        info = self.client.publish(topic, payload, qos, retain=retain)
        if qos == 0:
            info.wait_for_publish(DEADLINE)
            return 0
        kind, mid, rc = self.acks.get(timeout=DEADLINE)
        assert (kind, mid) == ("pub", info.mid)
        return int(rc)

    def collect(self, until: str, timeout: float = DEADLINE) -> list[paho.MQTTMessage]:
        """Messages until one on topic `until` (which is not included)."""
        got = []
        deadline = time.monotonic() + timeout
        while True:
            m = self.messages.get(timeout=max(0.01, deadline - time.monotonic()))
            if m.topic == until:
                return got
            got.append(m)

    def drain(self, seconds: float) -> list[paho.MQTTMessage]:
        time.sleep(seconds)
        got = []
        while not self.messages.empty():
            got.append(self.messages.get())
        return got

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("auth-files")
    make_password_file(work / "passwords")
    (work / "acl").write_text(ACL)
    return {"passwords": work / "passwords", "acl": work / "acl"}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, files: dict[str, Path]) -> Iterator[dict[str, Broker]]:
    """Ours and mosquitto on the same password file and ACL, anonymous clients refused by both."""
    pw, acl = str(files["passwords"]), str(files["acl"])
    ours = start_ours(tmp_path_factory.mktemp("ours"), "--password-file", pw, "--acl-file", acl, "--sys-interval", "1")
    mosq = start_mosquitto(
        tmp_path_factory.mktemp("mosq"),
        acl=ACL,
        extra_conf=f"allow_anonymous false\npassword_file {pw}\nsys_interval 1",
    )
    yield {"ours": ours, "mosquitto": mosq}
    ours.stop()
    mosq.stop()


@pytest.fixture(params=["ours", "mosquitto"])
def broker(request: pytest.FixtureRequest, pair: dict[str, Broker]) -> Broker:
    return pair[request.param]


# --- logging in: the same answers from both ---------------------------------------------------------------------


@pytest.mark.parametrize("protocol", [V311, V5], ids=["3.1.1", "5.0"])
def test_passwords_from_both_tools(broker: Broker, protocol: int) -> None:
    not_authorized = 135  # paho names 3.1.1's return code 5 by its 5.0 reason code too
    for user, password in PASSWORDS.items():
        ok = Client(broker, user, password, protocol=protocol)
        assert ok.rc == 0, user
        ok.close()
    for user, password in [("alice", "wrong"), ("nobody", "x"), ("alice", None), (None, None), ("bob", "al1ce")]:
        refused = Client(broker, user, password, protocol=protocol)
        assert refused.rc == not_authorized, (user, password)
        if broker.kind == "ours":
            assert refused.connect_time >= 0.9  # the failed-login delay


def test_failed_login_delays_that_client_only_and_logs_no_password(pair: dict[str, Broker]) -> None:
    ours = pair["ours"]
    result: dict[str, Client] = {}
    bad = threading.Thread(
        target=lambda: result.setdefault("bad", Client(ours, "alice", "Sup3rWrong!", client_id="bad-1"))
    )
    bad.start()
    time.sleep(0.2)
    good = Client(ours, "alice", PASSWORDS["alice"])
    assert good.rc == 0 and good.connect_time < 0.5  # while the other waits for its CONNACK
    good.close()
    bad.join(DEADLINE)
    assert result["bad"].rc == 135 and result["bad"].connect_time >= 0.9
    log = (ours.workdir / "serve.log").read_text()
    line = next(x for x in log.splitlines() if "bad-1" in x)
    assert "refused" in line and "127.0.0.1:" in line and "login failed (user 'alice'): wrong password" in line
    assert "Sup3rWrong!" not in log


# --- what a client may read and write: compared with mosquitto --------------------------------------------------

PROBE_TOPICS = [
    "alice/a", "public/news", "public/secret/x", "inbox/alice", "secret/x", "devices/dev-1/t", "devices/dev-2/t",
    "users/alice/x", "users/bob/x", "bob/x",
]  # fmt: skip


def readable(broker: Broker, user: str, client_id: str, sync: str) -> list[str]:
    """Topics the client receives when admin publishes to each of PROBE_TOPICS (subscribed one filter each, and
    refused filters counted as not received)."""
    reader = Client(broker, user, PASSWORDS[user], client_id=client_id)
    reader.subscribe(*PROBE_TOPICS, sync)
    admin = Client(broker, "admin", PASSWORDS["admin"])
    for topic in PROBE_TOPICS:
        admin.publish(topic, topic.encode())
    admin.publish(sync)
    got = [m.topic for m in reader.collect(until=sync)]
    reader.close()
    admin.close()
    return got


def writable(broker: Broker, user: str, client_id: str, sync: str, protocol: int) -> tuple[list[str], list[int]]:
    """Topics of PROBE_TOPICS the client's QoS 1 PUBLISH reaches admin through, and the PUBACK reason codes."""
    admin = Client(broker, "admin", PASSWORDS["admin"])
    admin.subscribe("#")
    codes = []
    for topic in [*PROBE_TOPICS, sync]:
        # One connection per PUBLISH: mosquitto 2.0.11 drops a 3.1.1 client at its second denied QoS 1 PUBLISH.
        writer = Client(broker, user, PASSWORDS[user], client_id=client_id, protocol=protocol)
        codes.append(writer.publish(topic))
        writer.close()
    got = [m.topic for m in admin.collect(until=sync)]
    admin.close()
    return got, codes[:-1]


@pytest.mark.parametrize(("user", "client_id"), [("alice", "dev-1"), ("bob", "dev-2"), ("carol", "c-1")])
def test_read_access_same_as_mosquitto(pair: dict[str, Broker], user: str, client_id: str) -> None:
    sync = f"devices/{client_id}/sync"
    ours, theirs = (readable(pair[k], user, client_id, sync) for k in ("ours", "mosquitto"))
    assert ours == theirs
    expected = {
        "alice": ["alice/a", "public/news", "devices/dev-1/t", "users/alice/x"],
        "bob": ["public/news", "public/secret/x", "devices/dev-2/t", "users/bob/x"],
        "carol": [],
    }
    assert ours == expected[user]


@pytest.mark.parametrize("protocol", [V311, V5], ids=["3.1.1", "5.0"])
@pytest.mark.parametrize(("user", "client_id"), [("alice", "dev-1"), ("bob", "dev-2")])
def test_write_access_same_as_mosquitto(pair: dict[str, Broker], user: str, client_id: str, protocol: int) -> None:
    sync = f"devices/{client_id}/sync"
    ours, theirs = (writable(pair[k], user, client_id, sync, protocol) for k in ("ours", "mosquitto"))
    assert ours == theirs
    allowed = {"alice": ["alice/a", "inbox/alice", "devices/dev-1/t"], "bob": ["devices/dev-2/t"]}[user]
    assert ours[0] == allowed
    denied = 0x87 if protocol == V5 else 0  # 5.0: PUBACK 0x87; 3.1.1: acknowledged and dropped
    assert ours[1] == [0 if t in allowed else denied for t in PROBE_TOPICS]


@pytest.mark.parametrize("protocol", [V311, V5], ids=["3.1.1", "5.0"])
def test_subscribe_refused_where_nothing_is_readable(pair: dict[str, Broker], protocol: int) -> None:
    """Our deliberate difference: mosquitto 2.0 grants every filter (and delivers nothing); we refuse a filter
    under which the ACL lets the client read no topic."""
    filters = ["public/#", "secret/#", "public/secret/#", "#", "$share/g/public/#", "$share/g/secret/#", "$SYS/#"]
    refused = 0x87 if protocol == V5 else 0x80
    for kind, broker in pair.items():
        alice = Client(broker, "alice", PASSWORDS["alice"], client_id="a-1", protocol=protocol)
        codes = alice.subscribe(*filters)
        alice.close()
        if kind == "mosquitto":
            assert codes == [1] * len(filters)
        else:
            assert codes == [1, refused, refused, 1, 1, refused, refused]


# --- the security set: what a client without read access never gets ----------------------------------------------


def test_no_read_access_live_retained_shared_and_hash(broker: Broker) -> None:
    tag = uuid.uuid4().hex[:6]
    admin = Client(broker, "admin", PASSWORDS["admin"])
    admin.publish(f"public/secret/r{tag}", b"retained secret", retain=True)
    admin.publish(f"public/r{tag}", b"retained public", retain=True)
    alice = Client(broker, "alice", PASSWORDS["alice"], client_id=f"dev-{tag}")
    alice.subscribe("#", f"$share/g{tag}/public/#", "public/+/+", f"devices/dev-{tag}/sync")
    for topic in (f"public/secret/l{tag}", f"secret/l{tag}", f"bob/l{tag}", f"public/l{tag}"):
        admin.publish(topic, b"live")
    admin.publish(f"devices/dev-{tag}/sync")
    got = alice.collect(until=f"devices/dev-{tag}/sync")
    topics = {m.topic for m in got}
    assert not any("secret" in t or t.startswith("bob/") for t in topics), topics
    assert {f"public/r{tag}", f"public/l{tag}"} <= topics
    admin.publish(f"public/secret/r{tag}", b"", retain=True)
    admin.publish(f"public/r{tag}", b"", retain=True)
    alice.close()
    admin.close()


def test_no_read_access_to_sys(broker: Broker) -> None:
    admin = Client(broker, "admin", PASSWORDS["admin"])
    alice = Client(broker, "alice", PASSWORDS["alice"])
    admin.subscribe("$SYS/#")
    alice.subscribe("$SYS/#", "#")
    assert admin.messages.get(timeout=5).topic.startswith("$SYS/")  # $SYS is published (retained, then every 1 s)
    assert [m.topic for m in alice.drain(1.5) if m.topic.startswith("$SYS")] == []
    admin.close()
    alice.close()


@pytest.mark.parametrize("protocol", [V311, V5], ids=["3.1.1", "5.0"])
def test_no_write_access_no_retained_message_no_will(broker: Broker, protocol: int) -> None:
    tag = uuid.uuid4().hex[:6]
    for topic, payload in [(f"public/ret{tag}", b"forged"), (f"devices/dev-{tag}/ret", b"own")]:
        # A connection each: mosquitto 2.0.11 drops the connection at the PUBLISH after a denied one.
        bob = Client(broker, "bob", PASSWORDS["bob"], client_id=f"dev-{tag}", protocol=protocol)
        bob.publish(topic, payload, retain=True)
        bob.close()
    admin = Client(broker, "admin", PASSWORDS["admin"])
    admin.subscribe(f"public/ret{tag}", f"devices/dev-{tag}/ret")
    assert [(m.topic, m.payload) for m in admin.drain(0.5)] == [(f"devices/dev-{tag}/ret", b"own")]
    admin.publish(f"devices/dev-{tag}/ret", b"", retain=True)
    admin.subscribe("#")
    # Wills: one where bob may write, one where he may not. Killed (no DISCONNECT): a will is due.
    wills = []
    for topic in (f"public/will{tag}", f"devices/dev-{tag}/will"):
        proc = subprocess.Popen(
            ["mosquitto_sub", "-h", broker.host, "-p", str(broker.port), "-u", "bob", "-P", PASSWORDS["bob"],
             "-i", f"dev-{tag}", "-t", f"devices/dev-{tag}/x", "--will-topic", topic, "--will-payload", "gone",
             "-V", "5" if protocol == V5 else "311"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        time.sleep(0.7)
        proc.send_signal(signal.SIGKILL)
        proc.wait(5)
        wills.append(proc)
    got = [(m.topic, m.payload) for m in admin.drain(1.0) if "will" in m.topic]
    assert got == [(f"devices/dev-{tag}/will", b"gone")]
    admin.close()


# --- certificates as identity (the same ACL, the same answers) ----------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    import trustme

    work = tmp_path_factory.mktemp("certs")
    ca = trustme.CA()
    server = ca.issue_cert("localhost", HOST)
    client = ca.issue_cert("alice.example", common_name="alice", organization_name="Example, Inc.")
    ca.cert_pem.write_to_path(str(work / "ca.pem"))
    server.cert_chain_pems[0].write_to_path(str(work / "server.pem"))
    server.private_key_pem.write_to_path(str(work / "server.key"))
    client.cert_chain_pems[0].write_to_path(str(work / "client.pem"))
    client.private_key_pem.write_to_path(str(work / "client.key"))
    return {k: str(work / f"{k}.{ext}") for k, ext in [("ca", "pem"), ("server", "pem"), ("client", "pem")]} | {
        "server_key": str(work / "server.key"),
        "client_key": str(work / "client.key"),
    }


def _subject(cert_path: str) -> str:
    """The subject as `openssl x509 -nameopt RFC2253` prints it: what mosquitto uses as the user name."""
    out = subprocess.run(
        ["openssl", "x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in", cert_path],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return out.strip().removeprefix("subject=")


@pytest.mark.parametrize("option", ["use_identity_as_username", "use_subject_as_username"])
def test_certificate_identity_same_as_mosquitto(tmp_path: Path, certs: dict[str, str], option: str) -> None:
    subject = _subject(certs["client"])
    assert subject.startswith("CN=alice,") and "O=Example\\, Inc." in subject
    name = "alice" if option == "use_identity_as_username" else subject
    acl = tmp_path / "acl"
    acl.write_text(f"user {name}\ntopic readwrite own/#\n")
    tls_port = free_port()
    mosq = start_mosquitto(
        tmp_path / "mosq",
        acl=acl.read_text(),
        extra_conf=(
            f"listener {tls_port} {HOST}\ncafile {certs['ca']}\ncertfile {certs['server']}\n"
            f"keyfile {certs['server_key']}\nrequire_certificate true\n{option} true"
        ),
    )
    wait_for_port(tls_port, mosq.proc, 10)  # type: ignore[arg-type]
    mosq.extra["tls_port"] = tls_port
    ours = start_ours(
        tmp_path / "ours",
        "--acl-file", str(acl), "--" + option.replace("_", "-"),
        tls_args=("--tls-cert", certs["server"], "--tls-key", certs["server_key"], "--tls-cafile", certs["ca"]),
    )  # fmt: skip
    tls = {"ca": certs["ca"], "cert": certs["client"], "key": certs["client_key"]}
    try:
        for broker in (ours, mosq):
            port = broker.extra["tls_port"]
            c = Client(broker, "mallory", "ignored", port=port, tls=tls)  # the certificate decides, not the CONNECT
            assert c.rc == 0
            c.subscribe("own/#", "other/#")
            c.publish("own/x", b"yes")
            assert c.publish("other/x", b"no") == 0  # 3.1.1: acknowledged and dropped (last: see writable())
            assert [(m.topic, m.payload) for m in c.drain(0.5)] == [("own/x", b"yes")], broker.kind
            c.close()
        # Our plain listener shares the policy: no certificate there, so no user name: refused.
        assert Client(ours, "alice", "x").rc == 135
    finally:
        ours.stop()
        mosq.stop()


# --- start-up: a bad file or an open listener is one line, exit 2, nothing listening -----------------------------


def _refused_start(tmp_path: Path, *args: str) -> str:
    port = free_port()
    done = subprocess.run(
        [sys.executable, "-m", "mqtt_cli", "serve", "--port", str(port), *args],
        capture_output=True, text=True, timeout=DEADLINE, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("mqtt: error: "), done.stderr
    with pytest.raises(OSError), socket.create_connection((HOST, port), timeout=1):
        pass
    return done.stderr


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("alice:$7$101$uBOarvHYfK48mlEA$2PrYXD6Z7et1MR1VNyQ6QgH0\n", "the hash is 18 bytes, not 64 (truncated?)"),
        ("\x00\x01garbage\xff\n", "line 1: not UTF-8 text"),
        ("alice:secret\n", "line 1: user 'alice' has a plain-text password"),
        ("# ok\nthis is not a password file\n", "line 2: not USER:HASH"),
    ],
)
def test_bad_password_file(tmp_path: Path, content: str, words: str) -> None:
    path = tmp_path / "pw"
    path.write_bytes(content.encode("latin-1"))
    assert words in _refused_start(tmp_path, "--password-file", str(path))


def test_missing_and_bad_acl_file(tmp_path: Path) -> None:
    message = _refused_start(tmp_path, "--acl-file", str(tmp_path / "nope"))
    assert f"ACL file {tmp_path / 'nope'} does not exist" in message
    (tmp_path / "acl").write_text("user a\ntopic reed x\n")
    assert "line 2: unknown access 'reed'" in _refused_start(tmp_path, "--acl-file", str(tmp_path / "acl"))


def test_open_listener_without_authentication_refuses_to_start(tmp_path: Path) -> None:
    message = _refused_start(tmp_path, "--host", "0.0.0.0")
    assert "reachable from other hosts and has no authentication" in message and "--allow-anonymous" in message


def test_anonymous_default_is_loopback_only(tmp_path: Path, files: dict[str, Path]) -> None:
    """With no options, loopback: anonymous allowed. With a password file: refused unless --allow-anonymous."""
    plain = start_ours(tmp_path / "plain")
    with_pw = start_ours(tmp_path / "pw", "--password-file", str(files["passwords"]))
    explicit = start_ours(tmp_path / "explicit", "--password-file", str(files["passwords"]), "--allow-anonymous")
    try:
        assert Client(plain).rc == 0
        assert Client(with_pw).rc == 135
        assert Client(explicit).rc == 0
        assert Client(explicit, "alice", "wrong").rc == 135  # a user name is still checked
    finally:
        for b in (plain, with_pw, explicit):
            b.stop()


def test_v5_properties_untouched_by_auth(pair: dict[str, Broker]) -> None:
    """A 5.0 message through the ACL keeps its properties (the checks add nothing to what is delivered)."""
    ours = pair["ours"]
    alice = Client(ours, "alice", PASSWORDS["alice"], protocol=V5)
    alice.subscribe("alice/props")
    props = PahoProperties(paho.PacketTypes.PUBLISH)
    props.UserProperty = [("k", "v")]
    alice.client.publish("alice/props", b"p", 1, properties=props)
    m = alice.messages.get(timeout=DEADLINE)
    assert m.properties.UserProperty == [("k", "v")]
    alice.close()


def test_json_log_of_a_refusal(tmp_path: Path, files: dict[str, Path]) -> None:
    broker = start_ours(tmp_path, "--password-file", str(files["passwords"]), "--log-format", "json")
    try:
        assert Client(broker, "alice", "nope", client_id="j-1").rc == 135
    finally:
        broker.stop()
    records = [json.loads(x) for x in (tmp_path / "serve.log").read_text().splitlines() if x.startswith("{")]
    refusal = next(r for r in records if r["client_id"] == "j-1")
    assert refusal["event"] == "refused" and refusal["peer"].startswith("127.0.0.1:") and "nope" not in str(records)


ANONYMOUS_ACL = """\
topic read open/#
topic write drop/#
user admin
topic readwrite #
pattern readwrite own/%c/#
"""


def test_anonymous_section_same_as_mosquitto(tmp_path: Path) -> None:
    """The rules before any `user` line are for clients without a user name (both brokers allow them here; with no
    password file, admin's name is taken as given)."""
    acl = tmp_path / "acl"
    acl.write_text(ANONYMOUS_ACL)
    ours = start_ours(tmp_path / "ours", "--allow-anonymous", "--acl-file", str(acl))
    mosq = start_mosquitto(tmp_path / "mosq", acl=ANONYMOUS_ACL)
    topics = ["open/a", "drop/a", "own/anon-1/a", "own/other/a", "x/a"]
    results = {}
    try:
        for broker in (ours, mosq):
            anon = Client(broker, client_id="anon-1")
            anon.subscribe(*[t.rsplit("/", 1)[0] + "/#" for t in topics], "open/sync")
            admin = Client(broker, "admin")
            for topic in [*topics, "open/sync"]:
                admin.publish(topic)
            read = [m.topic for m in anon.collect(until="open/sync")]
            anon.close()
            admin.subscribe("#")
            for topic in [*topics, "drop/sync"]:
                writer = Client(broker, client_id="anon-1")  # one PUBLISH per connection (see writable())
                writer.publish(topic)
                writer.close()
            written = [m.topic for m in admin.collect(until="drop/sync")]
            admin.close()
            results[broker.kind] = (read, written)
    finally:
        ours.stop()
        mosq.stop()
    assert results["ours"] == results["mosquitto"] == (["open/a", "own/anon-1/a"], ["drop/a", "own/anon-1/a"])
