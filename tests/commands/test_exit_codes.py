"""Every documented exit code of the client commands (docs/exit-codes.md), each produced for real."""

import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ..brokers import AUTH_USERS, Broker, free_port, wait_for_ready
from ..conftest import missing_path
from .conftest import Mqtt, ScriptedBroker, popen_mqtt, wait_for_output

WILL_V5 = ["--will-delay", "5", "--will-message-expiry", "3", "--will-content-type", "t", "--will-user-property", "a=b"]


def at(broker: Broker) -> list[str]:
    return ["-h", broker.host, "-p", str(broker.port)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["pub", "-t", "a"], "no message given"),
        (["pub", "-t", "a", "-m", "x", "-n"], "-m and -n both give the message"),
        (["pub", "-m", "x"], "no topic"),
        (["pub", "-t", "a/#", "-m", "x"], "wildcard"),
        (["pub", "-t", "a", "-m", "x", "-V", "4"], "use 31, 311, 5 or auto"),
        (["pub", "-t", "a", "-m", "x", "-L", "http://x"], "scheme"),
        (["pub", "-t", "a", "-m", "x", "-V", "311", "--content-type", "t"], "need MQTT 5.0"),
        (["pub", "-t", "a", "-m", "x", "--user-property", "novalue"], "KEY=VALUE"),
        (["pub", "-t", "a", "-f", "{missing}"], "No such file"),
        (["pub", "-t", "a", "-l", "--repeat", "2"], "--repeat"),
        (["pub", "-t", "a", "-m", "x", "-P"], "no terminal"),
        (["pub", "-t", "a", "-m", "x", "-V", "311", "-P", "pw"], "needs a user name"),
        (["pub", "-t", "a", "-m", "x", "--cafile", "{missing}"], "--cafile {missing}: No such file or directory"),
        (["pub", "-t", "a", "-m", "x", "--will-payload", "w"], "need --will-topic"),
        (["sub"], "no topic"),
        (["sub", "-t", "a/#/b"], "topic filter"),
        (["sub", "-t", "a", "-F", "%z"], "unknown field %z"),
        (["sub", "-t", "a", "--json", "--hex"], "use one"),
        (["sub", "-t", "a", "-R", "--retained-only"], "use one"),
        (["sub", "-t", "a", "-V", "311", "--no-local"], "need MQTT 5.0"),
        (["rr", "-t", "a", "-m", "x"], "-e"),
        (["pub", "-t", "a", "-m", "x", "--profile", "missing"], "no profile 'missing'"),
        (["sub", "-t", "a", "-F", "%1.2.3t", "-E"], "bad field width %1.2.3t"),
        (["sub", "-t", "a", "-F", "%5-t"], "bad field width %5-t"),
        (["sub", "-t", "a", "-c"], "give one with -i ID"),
        (["pub", "-t", "a", "-m", "x", "-c", "-I", "pre-"], "give one with -i ID"),
        (["sub", "-t", "a", "-V", "311", "-x", "100"], "-x/--session-expiry need MQTT 5.0"),
        (
            ["pub", "-t", "a", "-m", "x", "-V", "311", "--will-topic", "w", *WILL_V5],
            "--will-delay, --will-message-expiry, --will-content-type, --will-user-property need MQTT 5.0",
        ),
        (["pub", "-t", "a", "-m", "x", "--will-qos", "1"], "--will-qos: will options need --will-topic"),
        (["pub", "-t", "a", "-m", "x", "--will-qos", "0"], "--will-qos: will options need --will-topic"),
        (["sub", "-t", "a", "--will-retain"], "--will-retain: will options need --will-topic"),
        (["rr", "-t", "a", "-e", "b", "-m", "x", "--will-user-property", "a=b"], "need --will-topic"),
        (["pub", "-t", "a", "-m", "x", "--cert", "CERT_ONLY"], "holds no private key: give it with --key"),
    ],
)
def test_bad_usage_exits_2_before_connecting(mqtt: Mqtt, args: list[str], message: str, tmp_path: Path) -> None:
    if "CERT_ONLY" in args:  # a certificate without its key (OpenSSL alone says "[SSL] PEM lib")
        import trustme

        cert = tmp_path / "cert.pem"
        trustme.CA().issue_cert("client.example").cert_chain_pems[0].write_to_path(str(cert))
        args = [str(cert) if a == "CERT_ONLY" else a for a in args]
    args, message = [missing_path(a, tmp_path) for a in args], missing_path(message, tmp_path)
    # Port 1 has no broker: a usage error must be found before any connection is tried.
    result = mqtt(*args, "-p", "1")
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # one line: what, where, what to do


@pytest.mark.parametrize("command", ["pub", "rr"])
@pytest.mark.parametrize("source", ["-f", "-s"])
def test_a_message_larger_than_mqtt_can_carry_is_refused_unread(
    mqtt: Mqtt, tmp_path: Path, command: str, source: str
) -> None:
    """256 MiB: more than any PUBLISH carries (268,435,455 bytes of remaining length, the topic included): a usage
    error before connecting (port 1 has no broker), without reading the file (sparse: reading it would take
    seconds and the memory)."""
    huge = tmp_path / "huge.bin"
    with huge.open("wb") as f:
        f.truncate(256 << 20)
    args = ["-t", "a", "-e", "b"] if command == "rr" else ["-t", "a"]
    started = time.monotonic()
    if source == "-f":
        result = mqtt(command, *args, "-f", huge, "-p", "1")
    else:
        with huge.open("rb") as f:
            proc = subprocess.run([*mqtt_argv(), command, *args, "-s", "-p", "1"], stdin=f, capture_output=True,
                                  env=mqtt.env, timeout=60)  # type: ignore[attr-defined]  # fmt: skip
        result = proc
    elapsed = time.monotonic() - started
    stderr = result.stderr if isinstance(result.stderr, str) else result.stderr.decode()
    assert result.returncode == 2, stderr
    assert "more than one MQTT message can carry (268,435,4" in stderr and stderr.count("\n") == 1, stderr
    assert elapsed < 10


def mqtt_argv() -> list[str]:
    from .conftest import MQTT

    return [MQTT]


@pytest.mark.parametrize("args", [["pub", "-q", "3", "-t", "a", "-m", "x"], ["sub", "--no-such-flag"]])
def test_click_usage_errors_exit_2(mqtt: Mqtt, args: list[str]) -> None:
    assert mqtt(*args).returncode == 2


def test_cannot_connect_exits_3(mqtt: Mqtt, scripted_broker: Callable[..., ScriptedBroker]) -> None:
    refused = mqtt("pub", "-p", free_port(), "-t", "a", "-m", "x")
    assert refused.returncode == 3 and "Connection refused" in refused.stderr
    dns = mqtt("sub", "-h", "no-such-host.invalid", "-t", "a")
    assert dns.returncode == 3 and "no-such-host.invalid" in dns.stderr
    silent = scripted_broker(silent=True)
    start = time.monotonic()
    timeout = mqtt("pub", "-p", silent.port, "-t", "a", "-m", "x", "--connect-timeout", "0.5")
    assert timeout.returncode == 3 and "no answer" in timeout.stderr
    assert time.monotonic() - start < 5


def test_tls_failure_exits_4(mqtt: Mqtt, mosquitto_tls: Broker) -> None:
    workdir = mosquitto_tls.workdir
    bad_ca = mqtt(
        "pub", "-h", "localhost", "-p", mosquitto_tls.port, "--cafile", workdir / "other-ca.pem", "-t", "a", "-m", "x"
    )
    assert bad_ca.returncode == 4 and "TLS" in bad_ca.stderr
    good = mqtt(
        "pub", "-h", "localhost", "-p", mosquitto_tls.port, "--cafile", workdir / "ca.pem", "-t", "a", "-m", "x"
    )
    assert good.returncode == 0, good.stderr
    url = mqtt("pub", "-L", f"mqtts://127.0.0.1:{mosquitto_tls.port}", "--insecure", "-t", "a", "-m", "x", "-V", "311")
    assert url.returncode == 0, url.stderr
    client_cert = mqtt("pub", "-h", "localhost", "-p", mosquitto_tls.port, "--cafile", workdir / "ca.pem",
                       "--cert", workdir / "client.pem", "--key", workdir / "client.key", "--tls-version", "tlsv1.2",
                       "-t", "a", "-m", "x")  # fmt: skip
    assert client_cert.returncode == 0, client_cert.stderr
    capath = workdir / "capath"
    capath.mkdir(exist_ok=True)
    (capath / "ca.pem").write_bytes((workdir / "ca.pem").read_bytes())
    subprocess.run(["openssl", "rehash", str(capath)], check=True)
    by_dir = mqtt("pub", "-h", "localhost", "-p", mosquitto_tls.port, "--capath", capath, "--alpn", "mqtt",
                  "-t", "a", "-m", "x")  # fmt: skip
    assert by_dir.returncode == 0, by_dir.stderr


def test_broker_wanting_a_client_certificate_exits_4(mqtt: Mqtt, broker_factory: Callable[..., Broker]) -> None:
    # TLS 1.3: the broker's "certificate required" alert comes after the handshake, in answer to CONNECT.
    broker = broker_factory(tls=True, extra_conf="require_certificate true")
    tls = ["pub", "-h", "localhost", "-p", broker.port, "--cafile", broker.workdir / "ca.pem", "-t", "a", "-m", "x"]
    for version in ("auto", "5", "311"):
        result = mqtt(*tls, "-V", version)
        assert result.returncode == 4, (version, result.returncode, result.stderr)
        assert "wants a client certificate" in result.stderr and "--cert and --key" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    cert = ["--cert", broker.workdir / "client.pem", "--key", broker.workdir / "client.key"]
    assert mqtt(*tls, *cert).returncode == 0
    # A plain client on a TLS port: the broker closes without a word; the message says what to try.
    plain = mqtt("pub", *at(broker), "-t", "a", "-m", "x")
    assert plain.returncode == 5, plain.stderr
    assert "is it a TLS port? use mqtts:// or --cafile" in plain.stderr
    assert len(plain.stderr.strip().splitlines()) == 1, plain.stderr


@pytest.fixture(scope="module")
def tls_kinds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, int]]]:
    """`mqtt serve` with a listener for each way TLS goes wrong: a self-signed certificate, an expired one, one for
    another host, one from a CA this system does not know; and a plain MQTT port. Its CA file and their ports."""
    import datetime
    import sys

    import trustme

    work = tmp_path_factory.mktemp("tls-kinds")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(work / "ca.pem"))
    ca.private_key_pem.write_to_path(str(work / "ca.key"))  # the CA's own: a self-signed server certificate
    past = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    certs = {
        "good": ca.issue_cert("localhost", "127.0.0.1"),
        "expired": ca.issue_cert("localhost", "127.0.0.1", not_before=past, not_after=past + datetime.timedelta(1)),
        "other-host": ca.issue_cert("other.example"),
    }
    # Every listener on port 0 (no other process can take a port between a check and the bind): the ready file
    # says which ports they got, in the file's order.
    names = ("plain", "self-signed", *certs)
    conf = '[[listener]]\nurl = "mqtt://127.0.0.1:0"\n'
    conf += f'[[listener]]\nurl = "mqtts://127.0.0.1:0"\ncertfile = "{work / "ca.pem"}"\n'
    conf += f'keyfile = "{work / "ca.key"}"\n'
    for name, cert in certs.items():
        cert.cert_chain_pems[0].write_to_path(str(work / f"{name}.pem"))
        cert.private_key_pem.write_to_path(str(work / f"{name}.key"))
        conf += f'[[listener]]\nurl = "mqtts://127.0.0.1:0"\ncertfile = "{work / f"{name}.pem"}"\n'
        conf += f'keyfile = "{work / f"{name}.key"}"\n'
    (work / "broker.toml").write_text(conf)
    ready = work / "ready.json"
    proc = subprocess.Popen([sys.executable, "-m", "mqtt_cli", "serve", "--config", str(work / "broker.toml"),
                             "--ready-file", str(ready)], stderr=subprocess.DEVNULL)  # fmt: skip
    bound = [listener["port"] for listener in wait_for_ready(ready, proc, 20)]
    ports = dict(zip(names, bound, strict=True))
    yield work / "ca.pem", ports
    proc.terminate()
    proc.wait(timeout=15)


@pytest.mark.parametrize(
    ("url", "cafile", "code", "message"),
    [
        ("mqtts://127.0.0.1:{self-signed}", False, 4,
         "self-signed certificate; the broker's certificate is self-signed: give it with --cafile FILE to trust it, "
         "or --insecure"),
        ("mqtts://127.0.0.1:{good}", False, 4,
         "unable to get local issuer certificate; the broker's certificate is signed by a CA this system does not "
         "trust: give that CA with --cafile FILE"),
        ("mqtts://127.0.0.1:{expired}", True, 4, "certificate has expired; the broker's certificate has expired"),
        ("mqtts://127.0.0.1:{other-host}", True, 4, "the broker's certificate is not for 127.0.0.1"),
        ("mqtts://127.0.0.1:{plain}", False, 4, "is it a plain (not TLS) port? use mqtt://"),
        ("wss://127.0.0.1:{plain}", False, 4, "is it a plain (not TLS) port? use ws://"),
        ("ws://127.0.0.1:{plain}", False, 3,
         "closed the connection during the WebSocket upgrade; is it a WebSocket listener? a plain MQTT port takes "
         "mqtt://"),
        ("mqtt://127.0.0.1:{good}", False, 5, "is it a TLS port? use mqtts:// or --cafile"),
    ],
)  # fmt: skip
def test_tls_and_websocket_failures_say_what_to_try(
    mqtt: Mqtt, tls_kinds: tuple[Path, dict[str, int]], url: str, cafile: bool, code: int, message: str
) -> None:
    """Each TLS failure (and a WebSocket or TLS URL given a plain MQTT port) says what is wrong and what to try."""
    ca, ports = tls_kinds
    for name, port in ports.items():
        url = url.replace(f"{{{name}}}", str(port))
    result = mqtt("pub", "-L", url, *(["--cafile", str(ca)] if cafile else []), "-t", "a", "-m", "x", "-V", "311")
    assert result.returncode == code, result.stderr
    assert message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_sigint_and_sigterm_disconnect_cleanly_without_the_will(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    env = mqtt.env  # type: ignore[attr-defined]
    watcher = popen_mqtt("sub", *at(mosquitto), "-t", f"{topic}/will", "-C", "1", "-W", "10", env=env)
    # Signalled only once connected (a client stopped before its CONNACK leaves without DISCONNECT): the
    # subscriber once a retained message reached it; the publisher once its first line reached the broker.
    assert mqtt("pub", *at(mosquitto), "-t", f"{topic}/x", "-m", "ready", "-r").returncode == 0
    seen = popen_mqtt("sub", *at(mosquitto), "-t", f"{topic}/x", "-W", "20", env=env)
    assert seen.stdout is not None and seen.stdout.readline() == b"ready\n"
    runs = [(c, sig, code) for c in (["sub", "-t", f"{topic}/x"], ["pub", "-t", f"{topic}/x", "-l"])
            for sig, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130))]  # fmt: skip
    for command, sig, code in runs:
        proc = popen_mqtt(*command, *at(mosquitto), "--will-topic", f"{topic}/will", "--will-payload", "gone",
                          env=env, stdin=subprocess.PIPE)  # fmt: skip
        assert proc.stdin is not None and proc.stdout is not None
        if command[0] == "sub":
            assert proc.stdout.readline() == b"ready\n"
        else:
            proc.stdin.write(b"line\n")
            proc.stdin.flush()
            assert seen.stdout.readline() == b"line\n"
        proc.send_signal(sig)
        proc.wait(timeout=20)  # standard input still open: `pub -l` is stopped, not ended by its input
        assert proc.stderr is not None
        err = proc.stderr.read()
        proc.stdin.close()
        assert proc.returncode == code, (command, proc.returncode, err)
        assert err == b"", err
    out, _ = watcher.communicate(timeout=20)
    seen.kill()
    seen.communicate(timeout=20)
    assert (watcher.returncode, out) == (27, b"")  # no will: both ended with DISCONNECT


def test_closed_stdin_exits_2(mqtt: Mqtt) -> None:
    from .conftest import MQTT

    for command in ("pub -t a -s", "pub -t a -l", "pub --json-lines", "rr -t a -e b -s"):
        result = subprocess.run(f"{MQTT} {command} -p 1 <&-", shell=True, capture_output=True, text=True,
                                env=mqtt.env, timeout=30)  # type: ignore[attr-defined]  # fmt: skip
        assert result.returncode == 2, (command, result.stderr)
        assert "standard input, but it is closed" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_json_line_with_an_invalid_topic_exits_2_with_its_line(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    lines = f'{{"topic":"{topic}/ok","payload":"1","retain":true}}\n{{"topic":"{topic}/+","payload":"2"}}\n'
    result = mqtt("pub", *at(mosquitto), "--json-lines", "-q", "1", input=lines.encode())
    assert result.returncode == 2, result.stderr
    assert "standard input line 2" in result.stderr and "(1 sent, 1 acknowledged)" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    out = mqtt("sub", *at(mosquitto), "-t", f"{topic}/ok", "--retained-only")
    assert out.text == "1\n"  # the line before was published and acknowledged


def test_refused_connection_exits_5_and_never_shows_the_password(mqtt: Mqtt, mosquitto_auth: Broker) -> None:
    secret = "not-the-password-42"
    for version in ("5", "311", "31"):
        result = mqtt("pub", *at(mosquitto_auth), "-V", version, "-u", "admin", "-P", secret, "-t", "a", "-m", "x")
        assert result.returncode == 5, result.stderr
        assert "refused the connection" in result.stderr
        assert secret not in result.stderr + result.stdout.decode()
    anonymous = mqtt("sub", *at(mosquitto_auth), "-t", "a")
    assert anonymous.returncode == 5


def test_password_sources(mqtt: Mqtt, mosquitto_auth: Broker, tmp_path: Path) -> None:
    good = AUTH_USERS["admin"]
    base = ["pub", *at(mosquitto_auth), "-u", "admin", "-t", "a", "-m", "x"]
    assert mqtt(*base, env_extra={"MQTT_PASSWORD": good}).returncode == 0
    pwfile = tmp_path / "pw"
    pwfile.write_text(good + "\n")
    assert mqtt(*base, "--password-file", pwfile).returncode == 0
    # Precedence: a flag beats the environment.
    assert mqtt(*base, "--password-file", pwfile, env_extra={"MQTT_PASSWORD": "wrong"}).returncode == 0
    assert mqtt(*base, "-P", "wrong", env_extra={"MQTT_PASSWORD": good}).returncode == 5
    url = f"mqtt://admin:{good}@{mosquitto_auth.host}:{mosquitto_auth.port}"
    assert mqtt("pub", "-L", url, "-t", "a", "-m", "x").returncode == 0


def test_password_prompt_on_a_terminal(mqtt: Mqtt, mosquitto_auth: Broker) -> None:
    import os
    import pty
    import select
    import signal

    pid, fd = pty.fork()
    if pid == 0:  # the child: mqtt with the pty as its terminal (and never back into pytest)
        try:
            os.execve(
                str(Path(__import__("sys").executable).parent / "mqtt"),
                ["mqtt", "pub", *at(mosquitto_auth), "-u", "admin", "-P", "-t", "a", "-m", "x"],
                mqtt.env,  # type: ignore[attr-defined]
            )
        finally:
            os._exit(127)
    output = b""
    deadline = time.monotonic() + 20

    def read() -> bytes:
        """What the terminal shows next (b"" at its end or at the deadline): never blocks past the deadline."""
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return b""
        try:
            return os.read(fd, 1024)
        except OSError:  # EIO: the child closed the terminal
            return b""

    try:
        while b"Password" not in output and (chunk := read()):
            output += chunk
        assert b"Password" in output, output
        os.write(fd, AUTH_USERS["admin"].encode() + b"\n")
        while chunk := read():
            output += chunk
    finally:
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, output
    assert AUTH_USERS["admin"].encode() not in output  # not echoed


def test_refused_subscription_exits_6(mqtt: Mqtt, scripted_broker: Callable[..., ScriptedBroker]) -> None:
    broker = scripted_broker(suback_code=0x80)
    for version in ("5", "311"):
        result = mqtt("sub", "-p", broker.port, "-t", "a/#", "-V", version)
        assert result.returncode == 6, result.stderr
        assert "refused the subscription" in result.stderr and "'a/#'" in result.stderr


def test_refused_publish_exits_7_with_counts(mqtt: Mqtt, mosquitto_auth: Broker) -> None:
    writer = ["pub", *at(mosquitto_auth), "-u", "writer", "-P", AUTH_USERS["writer"], "-q", "1"]
    result = mqtt(*writer, "-t", "readonly/x", "-m", "x")
    assert result.returncode == 7
    assert "refused 1 message(s): Not authorized (1 sent, 0 acknowledged, 1 refused)" in result.stderr
    # mosquitto drops the connection at the second refusal: still 7, the refusal being the cause.
    result = mqtt(*writer, "-t", "readonly/x", "-m", "x", "--repeat", "3")
    assert result.returncode == 7 and "refused" in result.stderr
    assert mqtt(*writer, "-t", "data/x", "-m", "x").returncode == 0


def test_broker_killed_during_lines_exits_8_with_counts(mqtt: Mqtt, broker_factory: Callable[..., Broker]) -> None:
    broker = broker_factory()
    proc = popen_mqtt("pub", *at(broker), "-t", "x", "-l", "-q", "1", env=mqtt.env, stdin=subprocess.PIPE)  # type: ignore[attr-defined]
    total = 2_000_000

    def feed() -> None:
        assert proc.stdin is not None
        try:
            for start in range(0, total, 10_000):
                proc.stdin.write(b"".join(b"%d\n" % i for i in range(start, start + 10_000)))
            proc.stdin.close()
        except (BrokenPipeError, ValueError):
            pass

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    time.sleep(1.5)
    broker.kill()
    _, err = proc.communicate(timeout=30)
    feeder.join(5)
    assert proc.returncode == 8, err
    found = re.search(rb"\((\d+) sent, (\d+) acknowledged\)", err)
    assert found, err
    sent, acked = int(found[1]), int(found[2])
    assert 0 < acked <= sent < total


def test_reconnect_resumes_lines_without_loss(mqtt: Mqtt, broker_factory: Callable[..., Broker]) -> None:
    broker = broker_factory(persistence=True)
    n = 20_000
    assert mqtt("sub", *at(broker), "-t", "rc/#", "-q", "1", "-c", "-i", "counter", "-E").returncode == 0
    proc = popen_mqtt("pub", *at(broker), "-t", "rc/x", "-l", "-q", "1", "--reconnect", "-V", "311",
                      env=mqtt.env, stdin=subprocess.PIPE)  # type: ignore[attr-defined]  # fmt: skip
    assert proc.stdin is not None
    proc.stdin.write(b"".join(b"%d\n" % i for i in range(n // 2)))
    proc.stdin.flush()
    time.sleep(1.0)  # connected (the first connection is not retried) and publishing
    broker.restart()  # SIGTERM: mosquitto saves its sessions; then it starts again on the same port
    proc.stdin.write(b"".join(b"%d\n" % i for i in range(n // 2, n)))
    proc.stdin.close()
    proc.wait(timeout=60)
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert proc.returncode == 0, err
    out = mqtt("sub", *at(broker), "-t", "rc/#", "-q", "1", "-c", "-i", "counter", "-C", n, "-W", "30", timeout=60)
    got = set(out.text.splitlines())
    assert got == {str(i) for i in range(n)}, (out.returncode, n - len(got))


def test_connection_lost_while_subscribed_exits_8(mqtt: Mqtt, broker_factory: Callable[..., Broker]) -> None:
    broker = broker_factory()
    proc = popen_mqtt("sub", *at(broker), "-t", "a", "-d", env=mqtt.env)  # type: ignore[attr-defined]
    wait_for_output(proc, b"received SUBACK")
    broker.kill()
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 8 and b"lost" in err


def test_timeout_exits_27(mqtt: Mqtt, mosquitto: Broker) -> None:
    start = time.monotonic()
    result = mqtt("sub", *at(mosquitto), "-t", "nothing/here", "-W", "0.5")
    assert result.returncode == 27 and "timed out" in result.stderr
    assert time.monotonic() - start < 5


def test_interrupt_exits_130(mqtt: Mqtt, mosquitto: Broker) -> None:
    proc = popen_mqtt("sub", *at(mosquitto), "-t", "nothing/here", "-d", env=mqtt.env)  # type: ignore[attr-defined]
    wait_for_output(proc, b"received SUBACK")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err


def test_unexpected_failure_exits_1(mqtt: Mqtt, tmp_path: Path) -> None:
    config = Path(mqtt.env["XDG_CONFIG_HOME"]) / "mqtt-cli"  # type: ignore[attr-defined]
    config.mkdir(parents=True)
    (config / "config.toml").write_text("this is [not toml")
    result = mqtt("config", "list")
    assert result.returncode == 1 and "cannot read" in result.stderr
