"""The metrics endpoint against real parts: promtool validates /metrics, a real Prometheus server (Debian's)
scrapes it and gives back what the broker counted; and our $SYS tree against mosquitto 2.0's, topic for topic."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.brokers import HOST, Broker, free_port, start_mosquitto

from .conftest import start_ours

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def prometheus_tool(name: str) -> str:
    """promtool or prometheus; a missing one fails the test (never a skip counted as a pass)."""
    path = shutil.which(name)
    if path is None:
        pytest.fail("Debian's prometheus package is not installed (scripts/install-system-deps.sh installs it)")
    return path


# mosquitto 2.0 has them only when built with memory tracking; Python has no such figure (docs/broker.md).
NO_COUNTERPART = {"$SYS/broker/heap/current", "$SYS/broker/heap/maximum"}


@pytest.fixture(scope="module")
def ours_metrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    workdir = tmp_path_factory.mktemp("ours-metrics")
    broker = start_ours(workdir, "--sys-interval", "1", "--metrics-listen", f"{HOST}:0",
                        "--persistence", str(workdir / "broker.db"))  # fmt: skip
    yield broker
    broker.stop()


def metrics_url(broker: Broker) -> str:
    ready = json.loads((broker.workdir / "ready.json").read_text())
    return ready["metrics"]["url"]


def fetch(url: str, accept: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def publish(broker: Broker, topic: str, count: int, qos: int) -> None:
    """`count` messages with Debian's mosquitto_pub, one connection (-l: a line a message)."""
    lines = "".join(f"m{i}\n" for i in range(count))
    subprocess.run(["mosquitto_pub", "-h", broker.host, "-p", str(broker.port), "-t", topic, "-q", str(qos), "-l"],
                   input=lines.encode(), check=True, timeout=30)  # fmt: skip


def value(text: str, name: str, labels: str = "") -> float:
    pattern = re.escape(name) + (r"\{" + re.escape(labels) + r"\}" if labels else "") + r" (\S+)$"
    found = re.search("(?m)^" + pattern, text)
    assert found is not None, f"no {name}{{{labels}}}"
    return float(found.group(1))


def test_promtool_accepts_the_metrics(ours_metrics: Broker) -> None:
    promtool = prometheus_tool("promtool")
    publish(ours_metrics, "promtool/check", 3, 1)
    status, text = fetch(metrics_url(ours_metrics) + "/metrics")
    assert status == 200
    check = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=30)
    # promtool lints as well as parses: any line it prints (a missing HELP, a bad unit suffix...) is a failure.
    assert check.returncode == 0 and check.stdout == b"" and check.stderr == b"", check.stdout + check.stderr
    assert value(text, "mqtt_broker_publish_received_total", 'qos="1"') >= 3
    # Persistence on: the commits that held those PUBACKs were timed (promtool checked the histogram above).
    assert value(text, "mqtt_broker_persistence_commit_seconds_count") >= 1
    assert value(text, "mqtt_broker_persistence_commit_seconds_bucket", 'le="+Inf"') >= 1
    assert fetch(metrics_url(ours_metrics) + "/healthz") == (200, "ok\n")
    assert fetch(metrics_url(ours_metrics) + "/readyz") == (200, "ready\n")


def test_prometheus_scrapes_what_the_broker_counted(ours_metrics: Broker, tmp_path: Path) -> None:
    prometheus = prometheus_tool("prometheus")
    target = urllib.parse.urlsplit(metrics_url(ours_metrics)).netloc
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        f"scrape_configs:\n  - job_name: mqtt\n    static_configs:\n      - targets: ['{target}']\n"
    )
    port = free_port()
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address={HOST}:{port}"],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        topic = "prom/count"
        text = fetch(metrics_url(ours_metrics) + "/metrics")[1]
        before = value(text, "mqtt_broker_publish_received_total", 'qos="2"')
        sent = 40
        publish(ours_metrics, topic, sent, 2)
        expected = before + sent
        query = urllib.parse.quote('mqtt_broker_publish_received_total{job="mqtt",qos="2"}')
        seen = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
            try:
                status, body = fetch(f"http://{HOST}:{port}/api/v1/query?query={query}")
            except OSError:  # not listening yet
                time.sleep(0.5)
                continue
            if status == 200:
                result = json.loads(body)["data"]["result"]
                if result:
                    seen = float(result[0]["value"][1])
                    if seen == expected:
                        break
            time.sleep(0.5)
        assert seen == expected, f"Prometheus has {seen}, the broker counted {expected}"
        # Prometheus scraped in OpenMetrics (it asks for it first) and saw the target up.
        status, body = fetch(f"http://{HOST}:{port}/api/v1/query?query=up")
        assert [r["value"][1] for r in json.loads(body)["data"]["result"]] == ["1"]
        here = fetch(metrics_url(ours_metrics) + "/metrics")[1]
        assert value(here, "mqtt_broker_publish_received_total", 'qos="2"') == expected
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        log.close()


def sys_tree(broker: Broker, seconds: float = 3.5) -> dict[str, str]:
    """Every $SYS topic and its last value, as mosquitto_sub sees them over `seconds`."""
    out = subprocess.run(
        ["mosquitto_sub", "-h", broker.host, "-p", str(broker.port), "-t", "$SYS/#", "-F", r"%t\t%p",
         "-W", str(int(seconds))],
        capture_output=True, timeout=30,
    )  # fmt: skip
    tree: dict[str, str] = {}
    for line in out.stdout.decode().splitlines():
        topic, _, payload = line.partition("\t")  # topics ("retained messages/count") and values hold spaces
        tree[topic] = payload
    return tree


def test_sys_topics_as_mosquitto_publishes_them(ours_metrics: Broker, tmp_path: Path) -> None:
    mosq = start_mosquitto(tmp_path / "mosq", extra_conf="sys_interval 1")
    try:
        for broker in (mosq, ours_metrics):
            publish(broker, "sys/compare", 5, 1)
        theirs = sys_tree(mosq)
        ours = sys_tree(ours_metrics)
    finally:
        mosq.stop()
    assert "$SYS/broker/load/messages/received/1min" in theirs  # the test sees what it means to compare
    missing = sorted(set(theirs) - set(ours) - NO_COUNTERPART)
    assert missing == [], f"mosquitto publishes, we do not: {missing}"
    for topic in theirs.keys() & ours.keys():
        if "/load/" in topic:  # the same format: a number with two decimals
            assert re.fullmatch(r"\d+\.\d\d", ours[topic]), (topic, ours[topic])
        elif topic not in ("$SYS/broker/version", "$SYS/broker/uptime"):
            assert ours[topic].isdigit(), (topic, ours[topic])
    assert ours["$SYS/broker/uptime"].endswith(" seconds")
    assert float(ours["$SYS/broker/load/publish/received/1min"]) > 0, {k: v for k, v in ours.items() if "load" in k}
    assert int(ours["$SYS/broker/publish/bytes/received"]) >= 10  # "m0".."m4"


def test_refused_logins_are_counted_by_reason(tmp_path: Path) -> None:
    passwords = tmp_path / "passwords"
    subprocess.run(["mosquitto_passwd", "-b", "-c", str(passwords), "alice", "right"], check=True, timeout=30)
    broker = start_ours(tmp_path / "ours", "--password-file", str(passwords), "--metrics-listen", f"{HOST}:0")
    try:
        for version in ("mqttv311", "mqttv5"):
            wrong = subprocess.run(
                ["mosquitto_pub", "-h", HOST, "-p", str(broker.port), "-V", version, "-u", "alice", "-P", "wrong",
                 "-t", "t", "-m", "x"],
                capture_output=True, timeout=30,
            )  # fmt: skip
            assert wrong.returncode != 0
        anonymous = subprocess.run(["mosquitto_pub", "-h", HOST, "-p", str(broker.port), "-t", "t", "-m", "x"],
                                   capture_output=True, timeout=30)  # fmt: skip
        assert anonymous.returncode != 0
        publish_ok = subprocess.run(
            ["mosquitto_pub", "-h", HOST, "-p", str(broker.port), "-u", "alice", "-P", "right", "-t", "t", "-m", "x"],
            capture_output=True, timeout=30,
        )  # fmt: skip
        assert publish_ok.returncode == 0, publish_ok.stderr
        text = fetch(metrics_url(broker) + "/metrics")[1]
    finally:
        broker.stop()
    pattern = r'(?m)^mqtt_broker_connects_refused_total\{reason="(\w+)"\} (\S+)$'
    refused = {m.group(1): float(m.group(2)) for m in re.finditer(pattern, text)}
    # Every failed login is refused "not authorized" (5.0 0x87, 3.1.1 5), as mosquitto 2.0 answers them.
    assert {k: v for k, v in refused.items() if v} == {"not_authorized": 3}, refused
    assert value(text, "mqtt_broker_connects_accepted_total") == 1
