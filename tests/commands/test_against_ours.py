"""The clients against our own broker (`mqtt serve`, a real process), and options only a broker's log shows."""

import json
import re
from collections.abc import Iterator

import pytest

from ..broker.conftest import start_ours
from ..brokers import Broker
from .conftest import Mqtt, rr_answered_live

BINARY = bytes(range(256)) * 4


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    # Unbounded offline queues: the tests count every message queued for a persistent session.
    broker = start_ours(tmp_path_factory.mktemp("ours-for-clients"), "--max-queued-messages", "0")
    yield broker
    broker.stop()


def at(broker: Broker) -> list[str]:
    return ["-h", broker.host, "-p", str(broker.port)]


@pytest.mark.parametrize("version", ["31", "311", "5"])
def test_round_trip_every_version(mqtt: Mqtt, ours: Broker, topic: str, version: str) -> None:
    session = ["-q", "2", "-c", "-i", f"{topic}-{version}", "-V", version]
    assert mqtt("sub", *at(ours), "-t", f"{topic}/#", *session, "-E").returncode == 0
    for qos in ("1", "2"):
        r = mqtt("pub", *at(ours), "-V", version, "-t", f"{topic}/q{qos}", "-q", qos, "-s", input=BINARY)
        assert (r.returncode, r.stderr) == (0, "")
    out = mqtt("sub", *at(ours), "-t", f"{topic}/#", *session, "-C", "2", "-F", "%t %x", "-W", "20")
    assert out.returncode == 0, out.stderr
    assert out.text.splitlines() == [f"{topic}/q1 {BINARY.hex()}", f"{topic}/q2 {BINARY.hex()}"]


def test_lines_retained_json(mqtt: Mqtt, ours: Broker, topic: str) -> None:
    lines = "".join(json.dumps({"topic": f"{topic}/{i}", "payload": str(i), "retain": True}) + "\n" for i in range(500))
    assert mqtt("pub", *at(ours), "--json-lines", "-q", "1", input=lines.encode()).returncode == 0
    out = mqtt("sub", *at(ours), "-t", f"{topic}/#", "--retained-only", "--json")
    assert out.returncode == 0, out.stderr
    got = sorted(int(json.loads(line)["payload"]) for line in out.text.splitlines())
    assert got == list(range(500))
    persistent = ["-t", f"{topic}/l/#", "-q", "1", "-c", "-i", f"{topic}-l"]
    assert mqtt("sub", *at(ours), *persistent, "-E").returncode == 0
    numbers = "".join(f"{i}\n" for i in range(10_000)).encode()
    assert mqtt("pub", *at(ours), "-t", f"{topic}/l/x", "-l", "-q", "1", input=numbers).returncode == 0
    out = mqtt("sub", *at(ours), *persistent, "-C", "10000", "-W", "30")
    assert sorted(map(int, out.text.split())) == list(range(10_000))


def test_rr_against_ours(mqtt: Mqtt, ours: Broker, topic: str) -> None:
    # 3.1.1: a retained message on the response topic is older than the request, not its answer.
    mqtt("pub", *at(ours), "-t", f"{topic}/resp", "-m", "stale", "-r")
    rr = ["rr", *at(ours), "-V", "311", "-t", f"{topic}/req", "-e", f"{topic}/resp", "-m", "q"]
    out = mqtt(*rr, "-W", "1")
    assert (out.returncode, out.text) == (27, ""), out.stderr
    assert rr_answered_live(mqtt, rr, at(ours), f"{topic}/resp", "ready") == (0, b"ready\n")


def test_client_id_prefix_keepalive_and_will_reach_the_broker(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    r = mqtt("pub", *at(mosquitto), "-I", f"{topic}-", "-k", "17", "-x", "30", "-t", "x", "-m", "y",
             "--will-topic", f"{topic}/w", "--will-payload", "w", "--will-delay", "5", "--will-content-type", "t",
             "--will-user-property", "a=b", "--will-message-expiry", "60")  # fmt: skip
    assert r.returncode == 0, r.stderr
    log = (mosquitto.workdir / "mosquitto.log").read_text()
    found = re.search(rf"as {topic}-\w+ \(p5, c1, k17\)", log)
    assert found, log[-1000:]
