"""Real brokers for tests: Debian's mosquitto and rabbitmq-server, started on free ports on 127.0.0.1.

Use the fixtures (registered by tests/conftest.py through `pytest_plugins`):

* `mosquitto`: one anonymous mosquitto (3.1, 3.1.1, 5.0) for the session; a TCP listener, a WebSocket one
  (`broker.ws_port`) and a Unix socket (`broker.unix_path`).
* `mosquitto_auth`: a password file and an ACL (users in `AUTH_USERS`) for refusals.
* `mosquitto_tls`: a TLS listener with certificates made by trustme; `broker.ca_path` is the CA to trust.
* `rabbitmq`: rabbitmq-server with its MQTT plugin (3.1.1), on random ports with its own node name, data
  directories and Erlang cookie in a temporary directory (about 10 s to start: marked slow by its users).
* `rabbitmq_cluster`: three clustered rabbitmq-server nodes (quorum MQTT queues) with their own epmd and cookie,
  for one test (`start_rabbitmq_cluster`); about 30-60 s to start on 2 busy cores.
* `broker_factory`: a function starting a private mosquitto (same keyword arguments as `start_mosquitto`),
  stopped at the end of the test; for tests that kill (`broker.kill()`) and restart (`broker.restart()`) it.

Or call the functions directly: `start_mosquitto(tmp_dir, ...)` and `start_rabbitmq(tmp_dir)` return a
`Broker` with `host`, `port` and `stop()`, `kill()` (SIGKILL, the port stays reserved for `restart()`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

HOST = "127.0.0.1"
MOSQUITTO = shutil.which("mosquitto", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") or "/usr/sbin/mosquitto"
RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"  # the real script, not Debian's su-ing wrapper
RABBITMQCTL = "/usr/lib/rabbitmq/bin/rabbitmqctl"

#: user -> password in the `mosquitto_auth` broker. "reader" may only read `public/#`; "writer" may do anything
#: except write to `readonly/#` and read `secret/#`.
AUTH_USERS = {"admin": "s3cret", "reader": "r3ad", "writer": "wr1te"}
_ACL = """\
user admin
topic readwrite #

user reader
topic read public/#

user writer
topic readwrite public/#
topic readwrite data/#
topic read readonly/#
"""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the broker binds it a moment later: a race we retry on)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[Any], timeout: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            text = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
            raise RuntimeError(f"broker exited with {proc.returncode} before listening on {port}:\n{text}")
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"nothing listens on {HOST}:{port} after {timeout} s")


def wait_for_ready(ready: Path, proc: subprocess.Popen[Any], timeout: float, log: Path | None = None) -> list[Any]:
    """The listeners `mqtt serve --ready-file READY` bound (url, scheme, host, port: ours first, then a config
    file's, in order), once it wrote the file; the process killed and RuntimeError if it exits or times out."""
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            text = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
            raise RuntimeError(f"mqtt serve did not start: {text}")
        time.sleep(0.02)
    return list(json.loads(ready.read_text())["listeners"])


@dataclass
class Broker:
    """A broker process. `restart()` starts it again with the same configuration and ports."""

    kind: str
    host: str
    port: int
    workdir: Path
    start: Callable[[], subprocess.Popen[Any]]
    proc: subprocess.Popen[Any] | None = None
    ws_port: int | None = None
    unix_path: str | None = None
    ca_path: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"mqtt://{self.host}:{self.port}"

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def kill(self) -> None:
        """SIGKILL: no goodbye to the clients, no saving."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=5)

    def restart(self) -> None:
        self.stop()
        self.proc = self.start()


# --- mosquitto ----------------------------------------------------------------------------------------------


def start_mosquitto(
    workdir: Path,
    *,
    users: dict[str, str] | None = None,
    acl: str | None = None,
    tls: bool = False,
    websockets: bool = False,
    unix: bool = False,
    persistence: bool = False,
    extra_conf: str = "",
) -> Broker:
    """Starts mosquitto in `workdir` (created). With `users`, anonymous clients are refused."""
    workdir.mkdir(parents=True, exist_ok=True)
    for attempt in range(5):
        port = free_port()
        lines = [f"listener {port} {HOST}"]
        ca_path = None
        if tls:
            ca_path = _make_certs(workdir)
            lines += [
                f"cafile {workdir / 'ca.pem'}",
                f"certfile {workdir / 'server.pem'}",
                f"keyfile {workdir / 'server.key'}",
            ]
        ws_port = None
        if websockets:
            ws_port = free_port()
            lines += [f"listener {ws_port} {HOST}", "protocol websockets"]
        unix_path = None
        if unix:
            unix_path = str(workdir / "mosquitto.sock")
            lines += [f"listener 0 {unix_path}"]
        if os.geteuid() == 0:
            lines += ["user root"]  # otherwise mosquitto becomes user mosquitto, who cannot write to workdir
        lines += [
            "per_listener_settings false",
            "max_queued_messages 0",  # unlimited: tests count every message
            "max_inflight_messages 20",
            f"persistence {'true' if persistence else 'false'}",
            f"persistence_location {workdir}/",
            f"log_dest file {workdir / 'mosquitto.log'}",
            "log_type error",
            "log_type warning",
            "log_type notice",
        ]
        if users:
            pwfile = workdir / "passwords"
            pwfile.write_text("")
            for name, password in users.items():
                subprocess.run(["mosquitto_passwd", "-b", str(pwfile), name, password], check=True)
            lines += ["allow_anonymous false", f"password_file {pwfile}"]
        else:
            lines += ["allow_anonymous true"]
        if acl is not None:
            aclfile = workdir / "acl"
            aclfile.write_text(acl)
            lines += [f"acl_file {aclfile}"]
        if extra_conf:
            lines += [extra_conf]
        conf = workdir / "mosquitto.conf"
        conf.write_text("\n".join(lines) + "\n")
        log = workdir / "mosquitto.log"

        def launch(conf: Path = conf, port: int = port, log: Path = log) -> subprocess.Popen[Any]:
            proc = subprocess.Popen(
                [MOSQUITTO, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=workdir
            )
            try:
                wait_for_port(port, proc, 10, log)
            except BaseException:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                raise
            return proc

        try:
            proc = launch()
        except RuntimeError:
            if attempt == 4:
                raise
            continue  # the port was taken between free_port() and mosquitto's bind: try another
        broker = Broker("mosquitto", HOST, port, workdir, launch, proc, ws_port, unix_path, ca_path)
        if ws_port is not None:
            wait_for_port(ws_port, proc, 10, log)
        return broker
    raise AssertionError("not reached")


def _make_certs(workdir: Path) -> Path:
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("localhost", HOST)
    ca.cert_pem.write_to_path(str(workdir / "ca.pem"))
    cert.cert_chain_pems[0].write_to_path(str(workdir / "server.pem"))
    cert.private_key_pem.write_to_path(str(workdir / "server.key"))
    client = ca.issue_cert("client.example")
    client.cert_chain_pems[0].write_to_path(str(workdir / "client.pem"))
    client.private_key_pem.write_to_path(str(workdir / "client.key"))
    other = trustme.CA()  # a CA that signed nothing the broker has: for "unknown CA" failures
    other.cert_pem.write_to_path(str(workdir / "other-ca.pem"))
    return workdir / "ca.pem"


# --- rabbitmq -----------------------------------------------------------------------------------------------


def start_rabbitmq(workdir: Path, timeout: float = 90) -> Broker:
    """rabbitmq-server with the MQTT plugin, everything of its own under `workdir` (node name, ports, cookie)."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = {"HOME": str(workdir)}  # the Erlang cookie goes there
    broker = _rabbitmq_node(workdir, f"mqttcli-{uuid.uuid4().hex[:8]}@localhost", env, timeout=timeout)
    broker.proc = broker.start()
    return broker


def _rabbitmq_node(
    workdir: Path, name: str, env_extra: dict[str, str], conf_extra: str = "", timeout: float = 90
) -> Broker:
    """One rabbitmq-server node, not started (`broker.start()` starts it and waits up to `timeout` for its MQTT
    port), with the MQTT plugin enabled for it alone (its own enabled_plugins file), its own ports (AMQP, MQTT,
    distribution), data and log directories."""
    workdir.mkdir(parents=True, exist_ok=True)
    mqtt_port, amqp_port, dist_port = free_port(), free_port(), free_port()
    (workdir / "rabbitmq.conf").write_text(
        f"listeners.tcp.default = {HOST}:{amqp_port}\n"
        f"mqtt.listeners.tcp.default = {HOST}:{mqtt_port}\n"
        "mqtt.allow_anonymous = true\n"
        "loopback_users = none\n" + conf_extra
    )
    (workdir / "enabled_plugins").write_text("[rabbitmq_mqtt].\n")  # what `rabbitmq-plugins --offline` writes
    env = {
        **os.environ,
        "RABBITMQ_NODENAME": name,
        "RABBITMQ_NODE_IP_ADDRESS": HOST,
        "RABBITMQ_NODE_PORT": str(amqp_port),
        "RABBITMQ_DIST_PORT": str(dist_port),
        "RABBITMQ_MNESIA_BASE": str(workdir / "mnesia"),
        "RABBITMQ_LOG_BASE": str(workdir / "log"),
        "RABBITMQ_CONFIG_FILE": str(workdir / "rabbitmq.conf"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(workdir / "enabled_plugins"),
        "RABBITMQ_PLUGINS_EXPAND_DIR": str(workdir / "plugins-expand"),
        "ERL_EPMD_ADDRESS": HOST,
        **env_extra,
    }
    log = workdir / "rabbitmq.out"

    def launch() -> subprocess.Popen[Any]:
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [RABBITMQ_SERVER], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True
            )
        try:
            wait_for_port(mqtt_port, proc, timeout, log)
        except BaseException:
            _kill_group(proc)
            raise
        return proc

    return Broker("rabbitmq", HOST, mqtt_port, workdir, launch, extra={"env": env, "node": name})


@dataclass
class RabbitCluster:
    """Nodes of one RabbitMQ cluster on loopback, with their own epmd (ERL_EPMD_PORT) and Erlang cookie."""

    nodes: list[Broker]
    epmd: subprocess.Popen[Any]
    env: dict[str, str]

    def ctl(self, node: Broker, *args: str, timeout: float = 120) -> str:
        """rabbitmqctl against `node`; its output (a failure raises with it)."""
        done = subprocess.run(
            [RABBITMQCTL, "-n", node.extra["node"], *args],
            env={**node.extra["env"], **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {done.returncode}\n{done.stdout}{done.stderr}")
        return done.stdout

    def kill(self, node: Broker) -> None:
        """SIGKILL of the node's whole process group (the script and its Erlang VM)."""
        if node.proc is not None:
            _kill_group(node.proc)

    def restart(self, node: Broker) -> None:
        node.proc = node.start()

    def stop(self) -> None:
        for node in self.nodes:
            if node.proc is not None:
                _kill_group(node.proc)
        if self.epmd.poll() is None:
            self.epmd.kill()
            self.epmd.wait(timeout=10)


def start_rabbitmq_cluster(workdir: Path, size: int = 3, conf_extra: str = "", timeout: float = 240) -> RabbitCluster:
    """`size` rabbitmq-server nodes (rabbit1@localhost, ...) made one cluster with `rabbitmqctl join_cluster`:
    each with its ports and directories under `workdir`, all sharing a private Erlang cookie and an epmd of their
    own on a free port (nothing of another RabbitMQ on this machine is seen or touched). Starting takes a while
    on a busy machine: the timeouts are generous."""
    workdir.mkdir(parents=True, exist_ok=True)
    cookie = workdir / ".erlang.cookie"
    cookie.write_text(uuid.uuid4().hex)
    cookie.chmod(0o400)
    ctl_port = free_port()
    env = {
        "HOME": str(workdir),  # the shared cookie
        "ERL_EPMD_PORT": str(free_port()),
        "RABBITMQ_CTL_DIST_PORT_MIN": str(ctl_port),
        "RABBITMQ_CTL_DIST_PORT_MAX": str(ctl_port),
    }
    epmd = subprocess.Popen(
        ["epmd", "-port", env["ERL_EPMD_PORT"]],
        env={**os.environ, "ERL_EPMD_ADDRESS": HOST},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    cluster = RabbitCluster([], epmd, env)
    try:
        for i in range(size):
            name = f"rabbit{i + 1}"
            cluster.nodes.append(_rabbitmq_node(workdir / name, f"{name}@localhost", env, conf_extra, timeout))

        def boot(node: Broker) -> None:
            node.proc = node.start()

        with ThreadPoolExecutor(size) as pool:  # the nodes boot side by side
            list(pool.map(boot, cluster.nodes))
        first = cluster.nodes[0]
        for node in cluster.nodes[1:]:
            cluster.ctl(node, "stop_app")
            cluster.ctl(node, "join_cluster", first.extra["node"])
            cluster.ctl(node, "start_app")
        for node in cluster.nodes:
            assert node.proc is not None
            wait_for_port(node.port, node.proc, timeout, node.workdir / "rabbitmq.out")
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    """rabbitmq-server is a shell script running the Erlang VM: end the whole process group it leads."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def stop_rabbitmq(broker: Broker) -> None:
    proc = broker.proc
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        _kill_group(proc)


# --- fixtures -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def mosquitto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker = start_mosquitto(tmp_path_factory.mktemp("mosquitto"), websockets=True, unix=True)
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def mosquitto_auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker = start_mosquitto(tmp_path_factory.mktemp("mosquitto-auth"), users=AUTH_USERS, acl=_ACL)
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def mosquitto_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker = start_mosquitto(tmp_path_factory.mktemp("mosquitto-tls"), tls=True)
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker = start_rabbitmq(tmp_path_factory.mktemp("rabbitmq"))
    yield broker
    stop_rabbitmq(broker)


@pytest.fixture
def rabbitmq_cluster(tmp_path: Path) -> Iterator[RabbitCluster]:
    """Three clustered RabbitMQ nodes whose MQTT sessions are quorum queues (replicated on every node): a test
    may kill and restart nodes (`kill`, `restart`)."""
    cluster = start_rabbitmq_cluster(tmp_path / "cluster", conf_extra="mqtt.durable_queue_type = quorum\n")
    yield cluster
    cluster.stop()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    started: list[Broker] = []

    def factory(**kwargs: Any) -> Broker:
        broker = start_mosquitto(tmp_path / f"broker{len(started)}", **kwargs)
        started.append(broker)
        return broker

    yield factory
    for broker in started:
        broker.stop()
