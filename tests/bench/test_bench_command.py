"""`mqtt bench` as a user runs it, against our broker (`mqtt serve`) and Debian's mosquitto: real sockets."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mqtt_cli.core.benchstats import make_payload
from mqtt_cli.core.encoder import encode
from mqtt_cli.core.packets import PubAck, Publish
from tests.broker.conftest import start_ours
from tests.brokers import AUTH_USERS, Broker, free_port, start_mosquitto
from tests.conftest import REPO_ROOT, cli_env

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker = start_ours(tmp_path_factory.mktemp("ours"), "--max-queued-messages", "0")
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def mosq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker = start_mosquitto(tmp_path_factory.mktemp("mosq"))
    yield broker
    broker.stop()


@pytest.fixture(params=["ours", "mosquitto"])
def broker(request: pytest.FixtureRequest, ours: Broker, mosq: Broker) -> Broker:
    return ours if request.param == "ours" else mosq


def bench(broker: Broker | None, tmp_path: Path, *args: str, timeout: float = 60) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / "bench.json"
    where = ["-h", broker.host, "-p", str(broker.port)] if broker else []
    proc = subprocess.run(
        [sys.executable, "-m", "mqtt_cli", "bench", *args, *where, "--json", str(out)],
        cwd=REPO_ROOT, env=cli_env(), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    figures = json.loads(out.read_text()) if out.exists() else {}
    return proc.returncode, figures, proc.stderr + proc.stdout


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_pubsub_counts_are_exact(broker: Broker, tmp_path: Path, qos: int) -> None:
    code, f, text = bench(broker, tmp_path, "pubsub", "-c", "3", "--subs", "2", "-I", "0", "-L", "3000",
                          "-q", str(qos), "-s", "64", "--workers", "2", "--inflight", "10",
                          "--expect", "loss=0,dups=0")  # fmt: skip
    assert code == 0, text
    assert (f["sent"], f["acked"], f["delivered"], f["expected"]) == (3000, 3000, 6000, 6000)
    assert (f["lost"], f["dups"], f["reordered"], f["samples"]) == (0, 0, 0, 6000)
    assert (f["connected"], f["failed"], f["subscribers"], f["workers"]) == (5, 0, 2, 2)
    assert (f["clients"], f["pubs"], f["subs"]) == (3, 3, 2)  # -c 3: publishers and subscribers apart
    assert (f["clock"], f["kernel_samples"]) == ("kernel", 6000)  # plain TCP on Linux: the kernel's times
    assert f["p50_us"] <= f["p90_us"] <= f["p99_us"] <= f["max_us"]
    assert sum(n for _, _, n in f["histogram"]) == 6000
    assert f["published_per_s"] > 0 and f["delivered_per_s"] > 0


def test_workers_merge_exactly(ours: Broker, tmp_path: Path) -> None:
    """The same run with 1 and with 3 workers: the same counts (the merge adds, it does not average)."""
    results = []
    for workers in ("1", "3"):
        code, f, text = bench(ours, tmp_path, "pubsub", "-c", "6", "--subs", "3", "-I", "0", "-L", "1200", "-q", "1",
                              "--workers", workers)  # fmt: skip
        assert code == 0, text
        results.append((f["sent"], f["delivered"], f["lost"], f["dups"], f["samples"], f["subscribers"]))
    assert results[0] == results[1] == (1200, 3600, 0, 0, 3600, 3)


def test_paced_rate_and_duration(mosq: Broker, tmp_path: Path) -> None:
    code, f, text = bench(mosq, tmp_path, "pubsub", "-c", "4", "--rate", "400", "--duration", "1.5", "-q", "1",
                          "--workers", "1")  # fmt: skip
    assert code == 0, text
    assert 500 <= f["sent"] <= 640  # 400/s for 1.5 s (a late wake-up sends what is due at once)
    assert f["delivered"] == f["sent"] and f["lost"] == 0
    # Paced, not saturated: no queueing in the bench. The median, not p99: a stall of a loaded machine (a CI run
    # beside Spark's JVMs held one for 350 ms) delays every message in it, but not half of the run's.
    assert f["p50_us"] < 50_000


@pytest.mark.parametrize(("qos", "version"), [(1, "5"), (2, "311"), (2, "5")])
def test_the_paced_loop_acknowledges_and_delivers_every_message(mosq: Broker, tmp_path: Path, qos: int,
                                                                version: str) -> None:  # fmt: skip
    """Below 2 ms a message (a timerfd paces) over plain TCP, one loop serves the publisher's PUBACKs, or PUBRECs
    (answered with PUBREL) and PUBCOMPs, and the subscriber's deliveries: every message is acknowledged and
    delivered once, timed by the kernel."""
    code, f, text = bench(mosq, tmp_path, "pubsub", "--rate", "2000", "--duration", "1", "-q", str(qos), "-V", version,
                          "--inflight", "20", "--workers", "1")  # fmt: skip
    assert code == 0, text
    assert 1700 <= f["sent"] <= 2100 and f["acked"] == f["delivered"] == f["samples"] == f["sent"], f
    assert (f["lost"], f["dups"], f["clock"]) == (0, 0, "kernel")


def test_the_paced_loop_keeps_its_connections_alive(ours: Broker, tmp_path: Path) -> None:
    """Keepalive 1 s for 3 s at QoS 0: the loop's subscriber never writes, and its writes do not reach the
    connections' keepalive clock at once (trio's turns tell it). Our broker drops a client silent for 1.5 s
    (mosquitto only after about 4.5 s)."""
    code, f, text = bench(ours, tmp_path, "pubsub", "--rate", "1000", "--duration", "3", "-q", "0", "-k", "1",
                          "--workers", "1")  # fmt: skip
    assert code == 0, text
    assert f["errors"] == {} and f["lost"] == 0 and f["delivered"] == f["sent"] >= 2700, f


def test_loss_detected_when_the_broker_drops(tmp_path: Path) -> None:
    """mosquitto with a queue of 5 messages per client: the flood does not fit; what is missing counts as lost."""
    broker = start_mosquitto(tmp_path / "m", extra_conf="max_queued_messages 5\nmax_inflight_messages 1")
    try:
        code, f, text = bench(broker, tmp_path, "pubsub", "-c", "4", "-I", "0", "-L", "8000", "-q", "1",
                              "--drain", "0.5", "--workers", "1", "--expect", "loss=0")  # fmt: skip
    finally:
        broker.stop()
    assert code == 9, text
    assert f["lost"] > 0 and f["sent"] == 8000
    assert f["delivered"] - f["dups"] + f["lost"] == f["expected"] == 8000
    assert "--expect not met: loss=0" in text


def test_expect_exit_codes(ours: Broker, tmp_path: Path) -> None:
    args = ["pubsub", "-c", "2", "-I", "0", "-L", "200", "-q", "1", "--workers", "1"]
    assert bench(ours, tmp_path, *args, "--expect", "loss=0,p99<10s,delivered>=200")[0] == 0
    code, f, text = bench(ours, tmp_path, *args, "--expect", "loss=0,delivered>200")
    assert code == 9 and f["expect"]["failed"] == ["delivered>200"], text
    code, _, text = bench(ours, tmp_path, *args, "--expect", "p99<5%")
    assert code == 2 and "--expect" in text
    code, _, text = bench(ours, tmp_path, "pub", "-t", "bench/#/%i")
    assert code == 2 and "wildcard" in text


def test_unreachable_broker_counted(tmp_path: Path) -> None:
    code, f, text = bench(None, tmp_path, "conn", "-c", "5", "-p", str(free_port()), "-h", "127.0.0.1",
                          "--duration", "0.2", "--workers", "1")  # fmt: skip
    assert code == 3, text
    assert (f["connected"], f["failed"], f["errors"]) == (0, 5, {"unreachable": 5})
    assert "no client could connect" in text


def test_refused_logins_counted_and_the_run_goes_on(tmp_path: Path) -> None:
    broker = start_mosquitto(tmp_path / "m", users=AUTH_USERS)
    try:
        code, f, text = bench(broker, tmp_path, "conn", "-c", "4", "-u", "admin", "-P", "wrong", "--duration", "0.2",
                              "--workers", "2")  # fmt: skip
        assert code == 3 and f["errors"] == {"refused": 4}, text
        code, f, text = bench(broker, tmp_path, "pub", "-c", "3", "-u", "admin", "-P", AUTH_USERS["admin"], "-I", "0",
                              "-L", "300", "-q", "1", "--workers", "1")  # fmt: skip
        assert code == 0 and (f["connected"], f["sent"], f["acked"]) == (3, 300, 300), text
    finally:
        broker.stop()


def test_conn_holds_connections(mosq: Broker, tmp_path: Path) -> None:
    code, f, text = bench(mosq, tmp_path, "conn", "-c", "300", "--duration", "0.5", "--workers", "2")
    assert code == 0, text
    assert (f["clients"], f["connected"], f["failed"], f["errors"]) == (300, 300, 0, {})
    assert f["conn_per_s"] > 0


def test_dropped_clients_counted(tmp_path: Path) -> None:
    broker = start_mosquitto(tmp_path / "m")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqtt_cli", "bench", "pub", "-c", "3", "-I", "20", "--duration", "30", "--workers",
         "1", "-p", str(broker.port), "-h", broker.host, "--json", str(tmp_path / "f.json")],
        cwd=REPO_ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_running(proc, 3)
        broker.kill()
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        broker.stop()
    assert proc.returncode == 0, err[-3000:] + out[-3000:]
    f = json.loads((tmp_path / "f.json").read_text())
    assert f["errors"] == {"dropped": 3} and f["sent"] > 0


def _wait_running(proc: subprocess.Popen[str], connected: int) -> None:
    """Until a live line (one a second on a pipe) shows the clients connected and publishing started."""
    assert proc.stdout is not None
    for line in proc.stdout:
        tick = json.loads(line)
        if tick["connected"] == connected and tick["elapsed"] > 0 and tick["sent"] > 0:
            return
    raise AssertionError("the bench ended before it ran")


def test_ctrl_c_prints_the_summary_and_exits_130(mosq: Broker, tmp_path: Path) -> None:
    out = tmp_path / "f.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqtt_cli", "bench", "pubsub", "-c", "2", "-I", "5", "-q", "1", "--workers", "2",
         "-p", str(mosq.port), "-h", mosq.host, "--json", str(out)],
        cwd=REPO_ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_running(proc, 3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    f = json.loads(out.read_text())
    assert f["interrupted"] is True and f["sent"] > 0 and f["delivered"] > 0
    assert "(interrupted)" in err and "sent" in err


@pytest.mark.parametrize("how", ["tls-v5", "websocket", "v31"])
def test_transports_and_versions(tmp_path: Path, how: str) -> None:
    broker = start_mosquitto(tmp_path / "m", tls=True, websockets=True)
    where = {
        "tls-v5": ["-V", "5", "-h", broker.host, "-p", str(broker.port), "--cafile", str(broker.ca_path)],
        "websocket": ["--url", f"ws://{broker.host}:{broker.ws_port}/mqtt"],
        "v31": ["-V", "31", "-h", broker.host, "-p", str(broker.port), "--cafile", str(broker.ca_path),
                "--prefix", "b"],
    }[how]  # fmt: skip
    try:
        code, f, text = bench(None, tmp_path, "pubsub", "-c", "2", "--subs", "2", "-I", "0", "-L", "1000", "-q", "1",
                              "--workers", "2", *where)  # fmt: skip
    finally:
        broker.stop()
    assert code == 0, text
    assert (f["connected"], f["sent"], f["delivered"], f["lost"], f["dups"]) == (4, 1000, 2000, 0, 0)
    assert (f["clock"], f["kernel_samples"]) == ("user", 0)  # no kernel timestamps through TLS or WebSocket


def test_sub_measures_what_another_bench_publishes(mosq: Broker, tmp_path: Path) -> None:
    out = tmp_path / "sub.json"
    sub = subprocess.Popen(
        [sys.executable, "-m", "mqtt_cli", "bench", "sub", "-c", "2", "-t", "bench/%i", "-q", "1", "--duration", "12",
         "--workers", "1", "-p", str(mosq.port), "-h", mosq.host, "--json", str(out)],
        cwd=REPO_ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert sub.stdout is not None
        for line in sub.stdout:  # subscribed once the run has started
            if json.loads(line)["elapsed"] > 0:
                break
        code, f, text = bench(mosq, tmp_path, "pub", "-c", "2", "-I", "0", "-L", "300", "-q", "1", "--workers", "1")
        assert code == 0 and f["sent"] == 300, text
        _, err = sub.communicate(timeout=40)
    finally:
        sub.kill()
    assert sub.returncode == 0, err
    f = json.loads(out.read_text())
    assert (f["subscribers"], f["delivered"], f["samples"], f["dups"], f["foreign"]) == (2, 600, 600, 0, 0)


def test_messages_in_the_read_of_the_suback_are_counted_and_acknowledged(tmp_path: Path) -> None:
    """A broker that sends a message right behind the SUBACK (a retained one, a publisher already running): the
    subscriber's first read holds both, and the message counts and is acknowledged like any other."""
    server = socket.create_server(("127.0.0.1", 0))
    got: list[bytes] = []

    def broker() -> None:
        conn, _ = server.accept()
        with conn:
            conn.settimeout(10)
            conn.recv(1024)  # CONNECT
            conn.sendall(b"\x20\x02\x00\x00")
            subscribe = conn.recv(1024)
            publish = encode(Publish("bench/1", make_payload(64, time.time_ns(), 1, 0), 1, packet_id=7), 4)
            conn.sendall(b"\x90\x03" + subscribe[2:4] + b"\x01" + publish)  # SUBACK and PUBLISH in one write
            got.append(conn.recv(1024))

    thread = threading.Thread(target=broker, daemon=True)
    thread.start()
    try:
        code, f, text = bench(None, tmp_path, "sub", "-c", "1", "-q", "1", "--duration", "1", "--workers", "1",
                              "-h", "127.0.0.1", "-p", str(server.getsockname()[1]))  # fmt: skip
        thread.join(10)
    finally:
        server.close()
    assert code == 0, text
    assert (f["delivered"], f["samples"], f["foreign"]) == (1, 1, 0)
    assert got and got[0].startswith(encode(PubAck(7), 4))


def test_source_addresses(mosq: Broker, tmp_path: Path) -> None:
    """--ifaddr spreads the clients over local addresses; one that is not local fails those clients only."""
    code, f, text = bench(mosq, tmp_path, "conn", "-c", "40", "--ifaddr", "127.0.0.2,127.0.0.3", "--duration", "0.3",
                          "--workers", "1")  # fmt: skip
    assert code == 0 and (f["connected"], f["failed"]) == (40, 0), text
    code, f, text = bench(mosq, tmp_path, "conn", "-c", "10", "--ifaddr", "127.0.0.2,192.0.2.1", "--duration", "0.3",
                          "--workers", "1", "--connect-timeout", "2")  # fmt: skip
    assert code == 0 and (f["connected"], f["failed"], f["errors"]) == (5, 5, {"unreachable": 5}), text


def test_loopback_spread_over_source_addresses() -> None:
    from mqtt_cli.net.bench import Mode, Spec, source_addresses
    from mqtt_cli.net.transports import Endpoint

    local = Spec(Mode.CONN, Endpoint("mqtt", "127.0.0.1", 1883))
    assert source_addresses(local, 20_000) == []
    assert source_addresses(local, 45_000) == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    assert source_addresses(Spec(Mode.CONN, Endpoint("mqtt", "broker.example", 1883)), 45_000) == []
    given = Spec(Mode.CONN, Endpoint("mqtt", "127.0.0.1", 1883), source_addresses=["10.0.0.1"])
    assert source_addresses(given, 5) == ["10.0.0.1"]


def test_untrusted_tls_counted(tmp_path: Path) -> None:
    broker = start_mosquitto(tmp_path / "m", tls=True)
    try:
        code, f, text = bench(None, tmp_path, "conn", "-c", "3", "--url", f"mqtts://{broker.host}:{broker.port}",
                              "--duration", "0.2", "--workers", "1")  # fmt: skip
    finally:
        broker.stop()
    assert code == 3 and (f["failed"], f["errors"]) == (3, {"tls": 3}), text


def test_workers_end_when_the_parent_is_killed(mosq: Broker) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqtt_cli", "bench", "pubsub", "-c", "2", "-I", "5", "-q", "1", "--workers", "2",
         "-p", str(mosq.port), "-h", mosq.host],
        cwd=REPO_ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        _wait_running(proc, 3)
        children = [int(c) for t in Path(f"/proc/{proc.pid}/task").iterdir()
                    for c in (t / "children").read_text().split()]  # fmt: skip
        assert len(children) == 2
        proc.kill()
        proc.wait(timeout=5)
        deadline = time.monotonic() + 10
        while any(Path(f"/proc/{c}").exists() and "Z" not in _state(c) for c in children):
            assert time.monotonic() < deadline, "a worker outlived its parent"
            time.sleep(0.1)
    finally:
        proc.kill()


def _state(pid: int) -> str:
    try:
        return next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("State"))
    except (FileNotFoundError, StopIteration):
        return "Z"


def test_live_lines_add_counts_of_one_moment(mosq: Broker, tmp_path: Path) -> None:
    """Every worker's figures in a live line are of the same moment: no line shows publishing before every client
    is connected, and `sent` is not a second of traffic ahead of `delivered` (the two used to be read from
    different workers' last reports)."""
    proc = subprocess.run(
        [sys.executable, "-m", "mqtt_cli", "bench", "pubsub", "-c", "4", "--subs", "1", "-i", "150", "--rate", "2000",
         "--duration", "3.5", "--workers", "2", "-p", str(mosq.port), "-h", mosq.host],
        cwd=REPO_ROOT, env=cli_env(), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    ticks = [json.loads(line) for line in proc.stdout.splitlines()]
    publishing = [t for t in ticks if t["sent"]]
    assert len(publishing) >= 2, ticks
    for t in ticks:
        assert t["connected"] == 5 or not t["sent"], t
    for t in publishing:
        assert abs(t["sent"] - t["delivered"]) <= 300, t  # what is in flight at one moment, not 2,000 a second


def test_clock_user_and_cpu_beside_the_brokers(mosq: Broker, tmp_path: Path) -> None:
    """--clock user: receive times as recv() returned (as most load generators take them), and said so;
    --broker-pid: the broker's CPU use beside the bench's own."""
    assert mosq.proc is not None
    code, f, text = bench(mosq, tmp_path, "pubsub", "-I", "0", "-L", "20000", "-q", "1", "--workers", "1",
                          "--clock", "user", "--broker-pid", str(mosq.proc.pid))  # fmt: skip
    assert code == 0, text
    assert (f["clock"], f["kernel_samples"], f["samples"]) == ("user", 0, 20000)
    assert f["gen_cpu_s"] > 0 and 0 < f["gen_cpu_pct"] <= 110
    assert f["broker_cpu_s"] > 0 and 0 < f["broker_cpu_pct"] <= 110
    assert "gen_cpu_pct" in text and "broker_cpu_pct" in text and "clock" in text


def test_every_placeholder_names_its_unit() -> None:
    """-i was shown as a plain number while its help said milliseconds: each option's placeholder says the unit
    its help names."""
    import click
    import typer

    from mqtt_cli.app import app

    group = typer.main.get_command(app)
    command = group.get_command(click.Context(group), "bench")  # type: ignore[attr-defined]
    units = {"milliseconds": "MS", "seconds": "SECONDS", "bytes": "BYTES", "messages/s": "MSG/S"}
    checked = 0
    for param in command.params:
        if param.param_type_name != "option" or getattr(param, "is_flag", False):
            continue
        text = (param.help or "").lower()
        first = text.replace(",", " ").split()[:2]
        for word, metavar in units.items():
            if word in first or f"in {word}" in text or (word == "messages/s" and word in text):
                assert (param.metavar or "").split()[0] == metavar, (param.opts, param.metavar, param.help)
                checked += 1
                break
    assert checked >= 6


def test_a_paced_rate_is_held_when_the_window_fills(tmp_path: Path) -> None:
    """--rate with QoS 1: messages that fall due while the window is full go out once it opens, not never (the
    broker stopped for half a second: no acknowledgement, a full window, and still the rate's count in the end)."""
    broker = start_mosquitto(tmp_path / "m")
    assert broker.proc is not None
    out = tmp_path / "f.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqtt_cli", "bench", "pubsub", "--rate", "1000", "--duration", "3", "-q", "1",
         "--inflight", "10", "--workers", "1", "-p", str(broker.port), "-h", broker.host, "--json", str(out)],
        cwd=REPO_ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_running(proc, 2)
        broker.proc.send_signal(signal.SIGSTOP)
        time.sleep(0.5)
        broker.proc.send_signal(signal.SIGCONT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        broker.proc.send_signal(signal.SIGCONT)
        broker.stop()
    assert proc.returncode == 0, err
    f = json.loads(out.read_text())
    assert f["sent"] >= 2950 and f["lost"] == 0, f  # 1,000/s for 3 s; without the catch-up about 2,500
