"""Moving a site broker from mosquitto: a production-style mosquitto.conf runs as it is (pid file, `user`, TLS
policy, log types, persistence), Debian's stock files start with nothing named, and the log lets an operator audit
subscriptions, drops and packets. Each file here is also run by Debian's mosquitto, to prove it valid there."""

from __future__ import annotations

import datetime
import json
import os
import pwd
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest

from tests.broker.test_config import DEADLINE, SERVE, Ours, start, wait_for, wait_line
from tests.brokers import HOST, free_port

EXAMPLE = Path("/usr/share/doc/mosquitto/examples/mosquitto.conf")


@pytest.fixture
def brokers() -> Iterator[list[Ours]]:
    """The brokers a test started (`start`), stopped after it."""
    found: list[Ours] = []
    yield found
    for broker in found:
        broker.stop()


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A directory the `mosquitto` user can reach (pytest's own is root's alone), its data directory that user's."""
    path = Path(tempfile.mkdtemp(prefix="mqtt-cli-service-"))
    path.chmod(0o755)
    data = path / "data"
    data.mkdir()
    entry = pwd.getpwnam("mosquitto")
    os.chown(data, entry.pw_uid, entry.pw_gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def make_pki(where: Path) -> None:
    """A CA, the server's certificate, two client certificates (good, revoked) and a CRL revoking the second."""
    import trustme
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(where / "ca.pem"))
    server = ca.issue_cert("localhost", HOST)
    server.cert_chain_pems[0].write_to_path(str(where / "server.pem"))
    server.private_key_pem.write_to_path(str(where / "server.key"))
    for name in ("good", "revoked"):
        cert = ca.issue_cert(f"{name}.example")
        cert.cert_chain_pems[0].write_to_path(str(where / f"{name}.pem"))
        cert.private_key_pem.write_to_path(str(where / f"{name}.key"))
    for name in ("server.key", "good.key", "revoked.key"):
        (where / name).chmod(0o644)  # mosquitto, as its user, reads them too
    revoked = x509.load_pem_x509_certificate((where / "revoked.pem").read_bytes())
    issuer = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    key: Any = serialization.load_pem_private_key(ca.private_key_pem.bytes(), None)
    now = datetime.datetime.now(datetime.UTC)
    entry = x509.RevokedCertificateBuilder().serial_number(revoked.serial_number).revocation_date(now).build()
    crl = (
        x509.CertificateRevocationListBuilder().issuer_name(issuer.subject).last_update(now)
        .next_update(now + datetime.timedelta(days=1)).add_revoked_certificate(entry).sign(key, hashes.SHA256())
    )  # fmt: skip
    (where / "crl.pem").write_bytes(crl.public_bytes(serialization.Encoding.PEM))


def production_conf(where: Path, plain: int, tls: int, legacy: int, data: Path) -> str:
    """A site's mosquitto.conf: every option of issue #34 that a production file sets."""
    return f"""# A site broker, as it runs under mosquitto 2.0
pid_file {data}/broker.pid
user mosquitto

persistence true
persistence_location {data}/
persistent_client_expiration 14d
autosave_interval 1800

log_dest file {data}/broker.log
log_dest topic
log_type error
log_type warning
log_type notice
log_type information
log_type subscribe
log_type unsubscribe
log_timestamp true
log_timestamp_format %Y%m%d-%H%M%S
connection_messages true

allow_zero_length_clientid false
auto_id_prefix site-
use_username_as_clientid false
max_queued_messages 10
per_listener_settings false
allow_anonymous true

listener {plain} {HOST}

listener {tls} {HOST}
certfile {where}/server.pem
keyfile {where}/server.key
cafile {where}/ca.pem
capath /etc/ssl/certs
crlfile {where}/crl.pem
require_certificate true
tls_version tlsv1.2
ciphers ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256
ciphers_tls1.3 TLS_CHACHA20_POLY1305_SHA256

listener {legacy} {HOST}
certfile {where}/server.pem
keyfile {where}/server.key
tls_version tlsv1.1
"""


def tls_handshake(port: int, ca: Path, *, cert: str | None = None, maximum: ssl.TLSVersion | None = None,
                  where: Path | None = None) -> str:  # fmt: skip
    """A TLS client's handshake, then an MQTT CONNECT: "connected CIPHER", or why not."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if maximum is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # TLS 1.1: deprecated, which is the point
            ctx.minimum_version = ssl.TLSVersion.TLSv1
            ctx.maximum_version = maximum
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # OpenSSL's default level would not even offer TLS 1.1
    if cert is not None and where is not None:
        ctx.load_cert_chain(where / f"{cert}.pem", where / f"{cert}.key")
    try:
        with (
            socket.create_connection((HOST, port), timeout=5) as raw,
            ctx.wrap_socket(raw, server_hostname="localhost") as tls,
        ):
            tls.sendall(b"\x10\x0d\x00\x04MQTT\x04\x02\x00\x3c\x00\x01c")  # CONNECT, client id "c"
            answer = tls.recv(4)
            cipher = tls.cipher()
            if answer != b"\x20\x02\x00\x00":
                return f"answer {answer!r}"
            return f"connected {cipher[0] if cipher else ''}"
    except (ssl.SSLError, OSError) as exc:
        return f"refused: {exc}"


def test_production_mosquitto_conf_runs_as_it_is(workdir: Path, brokers: list[Ours]) -> None:
    """pid file, user mosquitto, the TLS policy (CRL, minimum version), subscriptions in the log file, and the
    same file valid for Debian's mosquitto."""
    make_pki(workdir)
    data = workdir / "data"
    plain, tls, legacy = free_port(), free_port(), free_port()
    conf = workdir / "mosquitto.conf"
    conf.write_text(production_conf(workdir, plain, tls, legacy, data))
    run = data / "run"  # the ready file's: written again by the broker once it runs as mosquitto
    run.mkdir()
    os.chown(run, pwd.getpwnam("mosquitto").pw_uid, -1)
    broker = start(brokers, run, "--mosquitto-conf", str(conf))  # no --ignore-unsupported
    assert "mqtt: error" not in broker.stderr.read_text() and "warning" not in broker.stderr.read_text()

    assert int((data / "broker.pid").read_text()) == broker.proc.pid
    user = subprocess.run(["ps", "-o", "user=", "-p", str(broker.proc.pid)], capture_output=True, text=True)
    assert user.stdout.strip() == "mosquitto"

    # The TLS listener: a good certificate connects, the revoked one and TLS 1.1 are refused.
    ca = workdir / "ca.pem"
    # The cipher lists: a TLS 1.3 client gets the one suite of ciphers_tls1.3 (OpenSSL's first would be AES-256), a
    # TLS 1.2 client one of `ciphers` (OpenSSL's first would be an AES-256 one).
    assert tls_handshake(tls, ca, cert="good", where=workdir) == "connected TLS_CHACHA20_POLY1305_SHA256"
    twelve = tls_handshake(tls, ca, cert="good", where=workdir, maximum=ssl.TLSVersion.TLSv1_2)
    assert twelve in ("connected ECDHE-ECDSA-AES128-GCM-SHA256", "connected ECDHE-RSA-AES128-GCM-SHA256"), twelve
    # (TLS 1.3: the client's handshake is over before the server checks its certificate; it sees the end.)
    assert not tls_handshake(tls, ca, cert="revoked", where=workdir).startswith("connected")
    log = data / "broker.log"
    wait_line(log, r"refused +- 127\.0\.0\.1:\d+ TLS handshake failed: certificate verify failed: certificate revoked")
    old = tls_handshake(tls, ca, cert="good", where=workdir, maximum=ssl.TLSVersion.TLSv1_1)
    assert old.startswith("refused"), old
    wait_line(log, r"TLS handshake failed: unsupported protocol")
    # ... where tls_version tlsv1.1 lets the same client in: the refusal above is the policy, not this OpenSSL.
    assert tls_handshake(legacy, ca, maximum=ssl.TLSVersion.TLSv1_1).startswith("connected")

    # A SUBSCRIBE and an UNSUBSCRIBE in the log file, with client, filter, QoS and result.
    sub = subprocess.run(["mosquitto_sub", "-h", HOST, "-p", str(plain), "-i", "auditor", "-t", "site/#", "-q", "1",
                          "-C", "1", "-W", "2", "-U", "site/#"],
                         capture_output=True, text=True, timeout=DEADLINE)  # fmt: skip
    assert sub.returncode in (0, 27)  # 27: the -W timeout, with nothing published
    (line,) = wait_line(log, r" subscribe +auditor ")
    assert "SUBSCRIBE 'site/#' QoS 1: granted QoS 1" in line
    assert re.match(r"\d{8}-\d{6} subscribe ", line), line  # log_timestamp_format
    (gone,) = wait_line(log, r"unsubscribe +auditor ")
    assert "UNSUBSCRIBE 'site/#': removed" in gone
    # An empty client id is refused (allow_zero_length_clientid false), and said at warning.
    with socket.create_connection((HOST, plain), timeout=5) as raw:
        raw.sendall(b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00")  # 3.1.1, clean, client id ""
        assert raw.recv(4) == b"\x20\x02\x00\x02"  # identifier rejected
    wait_line(log, r"refused .*empty client identifier")

    # Persistence written as the mosquitto user: a retained message survives a restart.
    assert subprocess.run(["mosquitto_pub", "-h", HOST, "-p", str(plain), "-t", "site/kept", "-m", "v", "-r", "-q",
                           "1", "-i", "keeper"], timeout=DEADLINE).returncode == 0  # fmt: skip
    assert broker.stop() == 0
    assert not (data / "broker.pid").exists() or int((data / "broker.pid").read_text()) != broker.proc.pid
    (run / "ready.json").unlink()
    again = start(brokers, run, "--mosquitto-conf", str(conf))
    kept = subprocess.run(["mosquitto_sub", "-h", HOST, "-p", str(plain), "-t", "site/kept", "-C", "1", "-W", "5",
                           "-i", "reader"],
                          capture_output=True, text=True, timeout=DEADLINE)  # fmt: skip
    assert kept.stdout == "v\n"
    again.stop()
    assert "rror" not in log.read_text()

    # Debian's mosquitto runs the same file (its own ports and files): it stays up and logs no error.
    theirs = workdir / "theirs"
    theirs.mkdir()
    os.chown(theirs, pwd.getpwnam("mosquitto").pw_uid, pwd.getpwnam("mosquitto").pw_gid)
    mosquitto_runs(production_conf(workdir, free_port(), free_port(), free_port(), theirs), theirs)


def mosquitto_runs(text: str, where: Path, *args: str) -> None:
    """Debian's mosquitto (2.0: no test flag) started on `text` for a moment: it must stay up and log no error."""
    conf = where / "theirs.conf"
    conf.write_text(text)
    proc = subprocess.Popen(["mosquitto", "-c", str(conf), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        time.sleep(1.5)
        assert proc.poll() is None, proc.communicate()[0].decode(errors="replace")
    finally:
        proc.terminate()
        output = proc.communicate(timeout=10)[0].decode(errors="replace")
    logged = "".join(p.read_text(errors="replace") for p in where.glob("*.log"))
    assert "Error" not in output + logged, output + logged


def test_stock_and_example_files_start_with_nothing_named(workdir: Path) -> None:
    """Debian's /etc/mosquitto/mosquitto.conf and its example file (all commented) translate without one line
    named; a minimal file with the log options runs in both brokers."""
    for stock in (Path("/etc/mosquitto/mosquitto.conf"), EXAMPLE):
        assert stock.exists(), f"{stock}: Debian's mosquitto package is not installed"
        printed = subprocess.run([*SERVE, "--mosquitto-conf", str(stock), "--print-config"], capture_output=True,
                                 text=True, timeout=DEADLINE)  # fmt: skip
        assert printed.returncode == 0, printed.stderr
        assert printed.stderr == "" and "not translated" not in printed.stdout, printed.stderr
    assert [line for line in EXAMPLE.read_text().splitlines() if line.strip() and not line.startswith("#")] == []
    # Both run in Debian's mosquitto, the stock file's paths moved into a directory of the test's and the port
    # a free one (`-p`: the listener mosquitto opens when the file has none).
    data = workdir / "data"
    stock = Path("/etc/mosquitto/mosquitto.conf").read_text()
    for system in ("/run/mosquitto/", "/var/lib/mosquitto/", "/var/log/mosquitto/"):
        stock = stock.replace(system, f"{data}/")
    assert f"pid_file {data}/mosquitto.pid" in stock and f"log_dest file {data}/mosquitto.log" in stock
    mosquitto_runs(stock, data, "-p", str(free_port()))
    mosquitto_runs(EXAMPLE.read_text(), data, "-p", str(free_port()))


class Collector:
    """A paho client subscribed to `topic`, keeping (topic, payload) of what it gets."""

    def __init__(self, port: int, topic: str, client_id: str, clean: bool = True) -> None:
        self.got: list[tuple[str, bytes]] = []
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean,
                                  protocol=paho.MQTTv311)  # fmt: skip
        self.client.on_message = lambda c, u, m: self.got.append((m.topic, m.payload))
        subscribed = threading.Event()
        self.client.on_subscribe = lambda *a: subscribed.set()
        self.client.connect(HOST, port)
        self.client.loop_start()
        self.client.subscribe(topic, 1)
        assert subscribed.wait(DEADLINE)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def publish(port: int, topic: str, count: int) -> None:
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="flooder", protocol=paho.MQTTv311)
    client.connect(HOST, port)
    client.loop_start()
    infos = [client.publish(topic, b"m%d" % i, qos=1) for i in range(count)]
    for info in infos:
        info.wait_for_publish(DEADLINE)
    client.disconnect()
    client.loop_stop()


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_flood_to_a_queue_of_10_logs_start_count_and_stop(tmp_path: Path, brokers: list[Ours], fmt: str) -> None:
    port = free_port()
    conf = tmp_path / "broker.toml"
    log = tmp_path / "broker.log"
    conf.write_text(
        f'[[listener]]\nurl = "mqtt://{HOST}:{port}"\n[limits]\nmax_queued_messages = 10\n'
        f'[log]\nlevel = "info"\nformat = "{fmt}"\nfile = "{log}"\ndrop_interval = 0.5\ntopic = true\n'
    )
    start(brokers, tmp_path / "run", "--config", str(conf))
    watcher = Collector(port, "$SYS/broker/log/#", "watcher")
    slow = Collector(port, "flood/#", "slow", clean=False)
    slow.close()  # its session keeps a queue of 10
    publish(port, "flood/x", 25)
    time.sleep(0.6)
    publish(port, "flood/x", 5)
    back = Collector(port, "flood/#", "slow", clean=False)
    wait_for(lambda: len(back.got) >= 10, "the 10 queued messages")
    back.close()
    lines = wait_line(log, "no longer dropped")
    text = log.read_text()
    drops = [line for line in text.splitlines() if "dropped" in line]
    assert len(drops) == 3, text
    if fmt == "json":
        records = [json.loads(line) for line in drops]
        assert {(r["event"], r["client_id"], r["level"]) for r in records} == {("dropped", "slow", "warning")}
        details = [r["detail"] for r in records]
    else:
        assert all(line.split()[1:3] == ["dropped", "slow"] for line in drops), drops
        details = drops
    assert "outgoing messages are being dropped: its queue is full (max_queued_messages 10)" in details[0]
    assert "15 more outgoing messages dropped in" in details[1] and "(16 since dropping started)" in details[1]
    assert "outgoing messages are no longer dropped: 20 dropped in" in details[2]
    assert lines
    # log_dest topic: the same lines on $SYS/broker/log/W, connections on .../N, subscriptions on .../M/subscribe.
    wait_for(lambda: sum(t == "$SYS/broker/log/W" for t, _ in watcher.got) >= 3, "the drops on $SYS/broker/log/W")
    topics = {t for t, _ in watcher.got}
    assert {"$SYS/broker/log/N", "$SYS/broker/log/W"} <= topics
    watcher.close()


def test_debug_logs_every_packet_in_mosquittos_words(tmp_path: Path, brokers: list[Ours]) -> None:
    port = free_port()
    log = tmp_path / "broker.log"
    start(brokers, tmp_path / "run", "--listen", f"mqtt://{HOST}:{port}", "--log-level", "debug", "--log-file",
          str(log))  # fmt: skip
    done = subprocess.run(["mosquitto_pub", "-h", HOST, "-p", str(port), "-i", "dbg", "-t", "a/b", "-m", "hello",
                           "-q", "1"], timeout=DEADLINE)  # fmt: skip
    assert done.returncode == 0
    subprocess.run(["mosquitto_sub", "-h", HOST, "-p", str(port), "-i", "reader", "-t", "a/#", "-q", "2", "-W", "1"],
                   timeout=DEADLINE)  # fmt: skip
    wait_line(log, r"Received DISCONNECT from dbg")
    wait_line(log, r"Sending SUBACK to reader")
    text = log.read_text()
    for words in ("packet       dbg 127.0.0.1:", "Received CONNECT from dbg", "Sending CONNACK to dbg (0, 0)",
                  "Received PUBLISH from dbg (d0, q1, r0, m1, 'a/b', ... (5 bytes))", "Sending PUBACK to dbg (m1, rc0)",
                  "Received SUBSCRIBE from reader", "    a/# (QoS 2)",
                  "subscribe    reader 127.0.0.1:"):  # (at debug, subscriptions are logged unasked)  # fmt: skip
        assert words in text, (words, text)


def test_pid_file_written_removed_and_kept_across_a_reload(tmp_path: Path, brokers: list[Ours]) -> None:
    port = free_port()
    conf = tmp_path / "broker.toml"
    pid = tmp_path / "run" / "sub" / "broker.pid"  # its directory made
    log = tmp_path / "broker.log"
    conf.write_text(
        f'[[listener]]\nurl = "mqtt://{HOST}:{port}"\n[log]\nfile = "{log}"\n[process]\npid_file = "{pid}"\n'
    )
    broker = start(brokers, tmp_path / "ours", "--config", str(conf))
    assert int(pid.read_text()) == broker.proc.pid
    conf.write_text(conf.read_text().replace("broker.pid", "other.pid"))
    broker.signal(signal.SIGHUP)
    (line,) = wait_line(log, "configuration reloaded")
    assert "process (pid_file, user) changed: takes effect at the next start" in line
    assert int(pid.read_text()) == broker.proc.pid and not pid.with_name("other.pid").exists()
    assert broker.stop() == 0
    assert not pid.exists()
