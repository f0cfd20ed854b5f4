"""Authentication and authorisation on the wire: `mqtt serve --password-file --acl-file` and mosquitto on the
same files (5.0 MQTT-3.1.4-2, 3.2.2-6, 3.2.2-7; 3.1.1 MQTT-3.2.2-4, 3.2.2-5, 3.1.4-5, 3.3.5-2)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.conftest import start_ours
from tests.brokers import Broker, start_mosquitto
from tests.conformance.wire import VERSIONS, Conn, P, T, client, connect, publish, spec, subscribe, uid

pytestmark = pytest.mark.interop

ACL = "user alice\ntopic readwrite alice/#\n"
LOGIN_WAIT = 5.0  # ours answers a failed login after a delay of about 1 s


@pytest.fixture(scope="module")
def auth_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("auth")
    subprocess.run(["mosquitto_passwd", "-c", "-b", str(work / "pw"), "alice", "al1ce"], check=True)
    (work / "acl").write_text(ACL)
    return {"pw": work / "pw", "acl": work / "acl"}


@pytest.fixture(scope="module")
def ours_auth(tmp_path_factory: pytest.TempPathFactory, auth_files: dict[str, Path]) -> Iterator[Broker]:
    args = ("--password-file", str(auth_files["pw"]), "--acl-file", str(auth_files["acl"]))
    broker = start_ours(tmp_path_factory.mktemp("ours-auth"), *args)
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def mosq_auth(tmp_path_factory: pytest.TempPathFactory, auth_files: dict[str, Path]) -> Iterator[Broker]:
    conf = f"allow_anonymous false\npassword_file {auth_files['pw']}"
    broker = start_mosquitto(tmp_path_factory.mktemp("mosq-auth"), acl=ACL, extra_conf=conf)
    yield broker
    broker.stop()


@pytest.fixture(params=["ours", "mosquitto"])
def broker(request: pytest.FixtureRequest) -> Broker:
    return request.getfixturevalue("ours_auth" if request.param == "ours" else "mosq_auth")  # type: ignore[no-any-return]


@spec(v311=("3.2.2-4", "3.2.2-5", "3.1.4-5"), v5=("3.1.4-2", "3.2.2-6", "3.2.2-7"))
@VERSIONS
def test_MQTT_3_1_4_2_failed_authentication_refused_and_closed(broker: Broker, version: int) -> None:
    """A wrong password, an unknown user, no user name: CONNACK 5 / 0x87 (both brokers say "not authorized" where
    "bad user name or password", 4 / 0x86, is allowed too), Session Present 0 although the client id has a kept
    session, nothing after the CONNECT processed, the connection closed."""
    v5 = version == 5
    keep = [(P.SESSION_EXPIRY, 300)] if v5 else None
    client_id = uid("auth")
    with client(broker, client_id, version, clean=False, username="alice", password=b"al1ce", properties=keep):
        pass  # a session is kept for client_id
    for username, password in (("alice", b"wrong"), ("nobody", b"x"), (None, None)):
        c = Conn(broker, v5=v5, timeout=LOGIN_WAIT)
        hello = connect(client_id, version, clean=False, username=username, password=password, properties=keep)
        c.send(hello + subscribe(1, ("alice/#", 1), v5=v5))  # pipelined: must not be processed
        got = c.connack(LOGIN_WAIT)
        assert got.reason == (0x87 if v5 else 5), got
        assert not got.session_present
        assert c.closed() == []  # no SUBACK
        c.close()


@spec(v311=("3.3.5-2",))
@pytest.mark.parametrize("qos", [1, 2])
@VERSIONS
def test_MQTT_3_3_5_2_acl_denied_publish(broker: Broker, version: int, qos: int) -> None:
    """A PUBLISH the ACL does not allow: acknowledged (5.0: 0x87), not delivered. `mqtt serve` goes on (the next,
    allowed PUBLISH is the first delivered); mosquitto 2.0.11 closes the connection after the acknowledgement."""
    v5 = version == 5
    login = {"username": "alice", "password": b"al1ce"}
    with client(broker, uid(), version, **login) as sub, client(broker, uid(), version, **login) as pub:
        sub.send(subscribe(1, ("#", 1), v5=v5))
        sub.expect(T.SUBACK)
        pub.send(publish("bob/x", b"no", qos=qos, pid=3, v5=v5))
        got = pub.expect(T.PUBACK if qos == 1 else T.PUBREC)
        assert got.pid == 3 and got.reason == (0x87 if v5 else 0)
        if broker.kind == "mosquitto":
            pub.closed()
            sub.quiet()
            return
        pub.send(publish("alice/x", b"yes", v5=v5))
        delivered = sub.expect(T.PUBLISH)
        assert (delivered.topic, delivered.payload) == ("alice/x", b"yes")
