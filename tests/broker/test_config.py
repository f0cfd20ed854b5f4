"""`mqtt serve --config` / `--mosquitto-conf` as a real process: start-up, bad input, SIGHUP reload, logging
(file, SIGUSR2 with logrotate, syslog on a unix datagram socket), and the systemd unit of docs/broker.md.

The clients are real ones: mosquitto_pub/mosquitto_sub (Debian) and paho-mqtt."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest

from tests.brokers import HOST, _make_certs, free_port
from tests.conftest import missing_path

DEADLINE = 15.0
REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "broker.md"
SERVE = [sys.executable, "-m", "mqtt_cli", "serve"]


class Ours:
    """`mqtt serve ARGS` with a ready file and a log file in `workdir`."""

    def __init__(self, workdir: Path, *args: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.ready = workdir / "ready.json"
        self.stderr = workdir / "stderr.log"
        self.proc = subprocess.Popen(
            [*SERVE, "--ready-file", str(self.ready), *args],
            stdout=subprocess.DEVNULL, stderr=self.stderr.open("ab"), stdin=subprocess.DEVNULL,
        )  # fmt: skip
        self.wait_ready()

    def wait_ready(self, previous: float | None = None) -> list[dict[str, Any]]:
        deadline = time.monotonic() + 20
        while True:
            if self.ready.exists() and (previous is None or self.ready.stat().st_mtime_ns != previous):
                return list(json.loads(self.ready.read_text())["listeners"])
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"mqtt serve did not start: {self.stderr.read_text()[-2000:]}")
            time.sleep(0.02)

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.returncode


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[Ours]]:
    brokers: list[Ours] = []
    yield brokers
    for broker in brokers:
        broker.stop()


def start(started: list[Ours], workdir: Path, *args: str) -> Ours:
    broker = Ours(workdir, *args)
    started.append(broker)
    return broker


def wait_for(predicate: Any, what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def wait_line(path: Path, pattern: str, count: int = 1) -> list[str]:
    """The log lines matching `pattern`, once there are `count` of them."""
    found: list[str] = []

    def enough() -> bool:
        nonlocal found
        text = path.read_text(errors="replace") if path.exists() else ""
        found = [line for line in text.splitlines() if re.search(pattern, line)]
        return len(found) >= count

    wait_for(enough, f"{pattern!r} in {path}")
    return found


def mosquitto_pub(port: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["mosquitto_pub", "-h", HOST, "-p", str(port), "-t", "cfg/x", "-m", "hello", *args],
        capture_output=True, text=True, timeout=DEADLINE,
    )  # fmt: skip


def refuses(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return False
    except OSError:
        return True


class Subscriber:
    """A paho client subscribed to `topic`, counting what it receives and whether it is still connected."""

    def __init__(self, port: int, topic: str, client_id: str, protocol: int = paho.MQTTv5) -> None:
        self.messages: list[bytes] = []
        self.connected = threading.Event()
        self.disconnected = threading.Event()
        self.reason: Any = None
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol)
        self.client.on_message = lambda c, u, m: self.messages.append(m.payload)
        self.client.on_connect = lambda c, u, f, rc, p: self.connected.set()

        def gone(c: Any, u: Any, flags: Any, rc: Any, props: Any) -> None:
            self.reason = rc
            self.disconnected.set()

        self.client.on_disconnect = gone
        self.client.connect(HOST, port)
        self.client.loop_start()
        assert self.connected.wait(DEADLINE)
        subscribed = threading.Event()
        self.client.on_subscribe = lambda *a: subscribed.set()
        self.client.subscribe(topic, 1)
        assert subscribed.wait(DEADLINE)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def serve_fails(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*SERVE, *args], capture_output=True, text=True, timeout=DEADLINE, cwd=cwd)
    assert "Traceback" not in done.stderr
    assert "listening on" not in done.stderr  # nothing started
    return done


# --- start-up ------------------------------------------------------------------------------------------------


def test_config_file_listeners_and_limits(tmp_path: Path, started: list[Ours]) -> None:
    a, b = free_port(), free_port()
    config = tmp_path / "broker.toml"
    config.write_text(
        f'[[listener]]\nurl = "mqtt://{HOST}:{a}"\n\n[[listener]]\nurl = "mqtt://{HOST}:{b}"\n\n'
        '[limits]\nmax_keepalive = 30\n\n[log]\nlevel = "info"\n'
    )
    broker = start(started, tmp_path / "run", "--config", str(config))
    assert [entry["port"] for entry in json.loads(broker.ready.read_text())["listeners"]] == [a, b]
    sub = Subscriber(b, "cfg/#", "cfg-sub")
    try:
        assert mosquitto_pub(a, "-q", "1", "-k", "30").returncode == 0
        wait_for(lambda: sub.messages == [b"hello"], "the message published on the other listener")
        # 3.1.1 above max_keepalive is refused (CONNACK 2 is what mosquitto sends too).
        refused = mosquitto_pub(a, "-k", "60")
        assert refused.returncode != 0
    finally:
        sub.close()
    assert "cfg-sub" in broker.stderr.read_text()  # level info logs connections


def test_flags_override_the_file_in_print_config(tmp_path: Path) -> None:
    config = tmp_path / "broker.toml"
    config.write_text('[limits]\nmax_keepalive = 30\nmax_inflight = 5\n[log]\nformat = "json"\n')
    done = subprocess.run(
        [*SERVE, "--config", str(config), "--print-config", "--max-keepalive", "60", "-v", "--listen", "mqtt://[::1]:0"],
        capture_output=True, text=True, timeout=DEADLINE,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    import tomllib

    printed = tomllib.loads(done.stdout)
    assert printed["limits"]["max_keepalive"] == 60 and printed["limits"]["max_inflight"] == 5
    assert printed["log"] == {**printed["log"], "format": "json", "level": "info"}
    assert [lst["url"] for lst in printed["listener"]] == ["mqtt://[::1]:0"]
    # What it prints is a configuration file that gives the same output again.
    (tmp_path / "printed.toml").write_text(done.stdout)
    again = subprocess.run(
        [*SERVE, "--config", str(tmp_path / "printed.toml"), "--print-config"], capture_output=True, text=True,
        timeout=DEADLINE,
    )  # fmt: skip
    assert again.returncode == 0 and again.stdout == done.stdout


def test_example_file_is_a_valid_configuration(tmp_path: Path) -> None:
    import tomllib

    from mqtt_cli.core.config import check, load_config
    from mqtt_cli.net.config import read_config

    example = REPO / "docs" / "broker.example.toml"
    settings = check(read_config(example), str(example))
    assert [lst.url for lst in settings.listener] == ["mqtt://127.0.0.1:1883", "mqtts://0.0.0.0:8883"]
    assert settings.limits.max_packet_size == 1048576
    # Copied as it is, with its password and ACL files in place (here under tmp_path).
    copy = tmp_path / "broker.toml"
    text = example.read_text()
    for name in ("passwd", "acl"):
        assert f'"/etc/mqtt/{name}"' in text
        text = text.replace(f'"/etc/mqtt/{name}"', f'"{tmp_path / name}"')
    (tmp_path / "passwd").write_text("")
    (tmp_path / "acl").write_text("topic readwrite #\n")
    copy.write_text(text)
    done = subprocess.run([*SERVE, "--config", str(copy), "--print-config"], capture_output=True, text=True,
                          timeout=DEADLINE)  # fmt: skip
    assert done.returncode == 0 and 'url = "mqtts://0.0.0.0:8883"' in done.stdout, done.stderr
    # Its commented bridge section is a valid one once uncommented.
    text = example.read_text()
    block = text[text.index("# [[bridge]]") :]
    uncommented = "\n".join(line[2:] if line.startswith("# ") else "" for line in block.splitlines())
    (bridge,) = load_config(tomllib.loads(uncommented), "example").bridge
    assert bridge.name == "cloud" and bridge.remote.url == ("mqtts://cloud.example:8883",)


def _documented_sections() -> list[str]:
    """Every section a user may add to a broker.toml: the TOML blocks of docs/broker.md and docs/bridge.md
    (not `mqtt bridge`'s own, with [bridge.local]), the example's commented bridge, and each table's header."""
    from mqtt_cli.core.config import BrokerSettings

    blocks = [m.group(1) for name in ("broker.md", "bridge.md")
              for m in re.finditer(r"```toml\n(.*?)```", (REPO / "docs" / name).read_text(), re.S)]  # fmt: skip
    blocks = [b for b in blocks if "[bridge.local]" not in b]
    example = (REPO / "docs" / "broker.example.toml").read_text()
    bridge = example[example.index("# [[bridge]]") :]
    blocks.append("\n".join(line[2:] for line in bridge.splitlines() if line.startswith("# ")))
    blocks += [f"[{f.name}]\n" for f in dataclasses.fields(BrokerSettings) if f.name not in ("listener", "bridge")]
    assert len(blocks) >= 10
    return blocks


@pytest.mark.parametrize("flags", [[], ["--listen", "mqtt://127.0.0.1:0", "-v"]])
def test_print_config_takes_every_documented_section_appended(flags: list[str]) -> None:
    """What --print-config prints stays a valid configuration with any documented section added below it."""
    import tomllib

    from mqtt_cli.core.config import check, load_config

    done = subprocess.run([*SERVE, "--print-config", *flags], capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 0, done.stderr
    # A table the flags set is printed (-v: [log]); one the user adds again would be declared twice.
    printed = {name for name, value in tomllib.loads(done.stdout).items() if isinstance(value, dict)}
    assert printed == ({"log"} if flags else set())
    for block in _documented_sections():
        if any(f"[{name}]" in block for name in printed):
            continue
        text = done.stdout + "\n" + block
        settings = check(load_config(tomllib.loads(text), "appended"), "appended")
        assert settings.listener, block


_TLS = '[[listener]]\nurl = "mqtts://127.0.0.1:0"\n'
_BRIDGE = '[[bridge]]\nname = "b"\ntopics = ["a/#"]\n[bridge.remote]\nurl = ["mqtt://127.0.0.1:1"]\n'


@pytest.mark.parametrize(
    ("kind", "content", "code", "message"),
    [
        ("toml", '[auth]\npassword_file = "{missing}"\n', 2,
         "{conf}: auth.password_file: password file {missing} does not exist"),
        ("toml", '[auth]\nacl_file = "{missing}"\n', 2, "{conf}: auth.acl_file: ACL file {missing} does not exist"),
        ("toml", '[[listener]]\nurl = "mqtt://127.0.0.1:0"\nacl_file = "{missing}"\n'
         "[auth]\nper_listener_settings = true\n", 2, "{conf}: listener[0].acl_file: ACL file {missing} does not"),
        ("toml", _TLS + 'certfile = "{missing}"\nkeyfile = "{conf}"\n', 1,
         "{conf}: listener[0].certfile: cannot read the certificate {missing}: No such file or directory"),
        ("toml", _TLS + 'certfile = "{conf}"\nkeyfile = "{missing}"\n', 1,
         "{conf}: listener[0].keyfile: cannot read the private key {missing}: No such file or directory"),
        ("toml", _TLS + 'certfile = "{conf}"\nkeyfile = "{conf}"\ncafile = "{missing}"\n', 1,
         "{conf}: listener[0].cafile: cannot read the CA file {missing}: No such file or directory"),
        ("toml", '[log]\nfile = "{missing}/log"\n', 1, "{conf}: log.file: cannot open the log file {missing}/log"),
        ("toml", '[persistence]\npath = "{missing}/p.db"\n', 1,
         "{conf}: persistence.path: cannot write the persistence database {missing}/p.db"),
        ("toml", _BRIDGE + 'password_file = "{missing}"\n', 2,
         "{conf}: bridge[0].remote.password_file: cannot read the password file {missing}: No such file"),
        ("toml", _BRIDGE + 'cafile = "{missing}"\n', 2,
         "{conf}: bridge[0].remote.cafile: cannot read the CA file {missing}: No such file"),
        ("conf", "listener 0 127.0.0.1\n\npassword_file {missing}\n", 2,
         "{conf}:3: password_file: password file {missing} does not exist"),
        ("conf", "listener 0 127.0.0.1\nacl_file {missing}\n", 2, "{conf}:2: acl_file: ACL file {missing} does not"),
        ("conf", "listener 0 127.0.0.1\ncertfile {missing}\nkeyfile {conf}\n", 1,
         "{conf}:2: certfile: cannot read the certificate {missing}"),
        ("conf", "log_dest file {missing}/log\n", 1, "{conf}:1: log_dest: cannot open the log file {missing}/log"),
        ("conf", "persistence true\npersistence_location {missing}/\n", 1,
         "{conf}:2: persistence_location: cannot write the persistence database {missing}/mqtt-cli.db"),
        ("conf", "connection b\naddress 127.0.0.1:1\ntopic a/# out\nbridge_cafile {missing}\n", 2,
         "{conf}:4: bridge_cafile: cannot read the CA file {missing}"),
        ("flag", "", 2, "command line: --password-file: password file {missing} does not exist"),
    ],
)  # fmt: skip
def test_a_file_the_configuration_names_is_reported_with_its_key(
    tmp_path: Path, kind: str, content: str, code: int, message: str
) -> None:
    """A file named in the configuration that cannot be used is reported with the configuration file and the key
    (mosquitto.conf: the line and its option; a flag: the flag), not the file alone."""
    conf = tmp_path / ("broker.toml" if kind != "conf" else "mosquitto.conf")
    content, message = (missing_path(t, tmp_path).replace("{conf}", str(conf)) for t in (content, message))
    conf.write_text(content)
    where = {"toml": ["--config", str(conf)], "conf": ["--mosquitto-conf", str(conf)],
             "flag": ["--password-file", str(tmp_path / "missing")]}[kind]  # fmt: skip
    done = serve_fails(*where)  # (--port would replace the file's listeners)
    assert done.returncode == code, done.stderr
    assert done.stderr.startswith(f"mqtt: error: {message}") and done.stderr.count("\n") == 1, done.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("# mosquitto\npid_file /run/mosquitto/mosquitto.pid\npersistence true\nlistener 1883\n"
         "allow_anonymous false\npassword_file /etc/mosquitto/passwd\ninclude_dir /etc/mosquitto/conf.d\n",
         "{conf}: not TOML but a mosquitto.conf; run it with --mosquitto-conf {conf}"),
        ("not toml at all\n", "{conf}: not valid TOML: "),
        ("[limits]\nmax_keepalive 60\n", "{conf}: not valid TOML: "),  # a TOML file with a slip stays one
    ],
)  # fmt: skip
def test_a_mosquitto_conf_given_to_config_is_named(tmp_path: Path, content: str, message: str) -> None:
    """mosquitto's `-c` habit: `mqtt serve -c mosquitto.conf` says what the file is and which option reads it;
    so does `mqtt bridge --config` (mosquitto's bridges are connection blocks of the broker's file)."""
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(content)
    done = serve_fails("-c", str(conf))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"mqtt: error: {message.replace('{conf}', str(conf))}"), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    bridge = subprocess.run([*SERVE[:-1], "bridge", "--config", str(conf)], capture_output=True, text=True,
                            timeout=DEADLINE)  # fmt: skip
    assert bridge.returncode == 2 and bridge.stderr.count("\n") == 1, bridge.stderr
    said = "not TOML but a mosquitto.conf" in bridge.stderr and f"mqtt serve --mosquitto-conf {conf}" in bridge.stderr
    assert said == message.startswith("{conf}: not TOML"), bridge.stderr


def test_copying_the_example_gives_no_open_broker(tmp_path: Path) -> None:
    """No listener of docs/broker.example.toml accepts a client without a user name and password."""
    from mqtt_cli.net.config import read_config
    from mqtt_cli.net.server import listener_policy
    from mqtt_cli.net.serving import checked_options

    text = (REPO / "docs" / "broker.example.toml").read_text()
    for name in ("passwd", "acl"):
        (tmp_path / name).write_text("")
        text = text.replace(f'"/etc/mqtt/{name}"', f'"{tmp_path / name}"')
    (tmp_path / "broker.toml").write_text(text)
    options = checked_options(read_config(tmp_path / "broker.toml"), "example", files=False)
    for spec in options.listeners:
        assert listener_policy(options, spec).allow_anonymous is False, spec.url


def test_broker_md_names_each_flag_once_where_flags_override_the_file() -> None:
    doc = (REPO / "docs" / "broker.md").read_text()
    start = doc.index("- **Flags override the file**")
    paragraph = doc[start : doc.index("\n- **", start + 1)]
    flags = re.findall(r"`(--[a-z-]+)(?: [A-Z]+)?`", paragraph)
    assert sorted(flags) == sorted(set(flags)), flags
    assert {"--persistence", "--metrics-listen", "--sys-interval"} <= set(flags)


@pytest.mark.parametrize(
    ("content", "args", "code", "message"),
    [
        (
            "[limits]\nmax_keepalve = 3\n",
            [],
            2,
            "broker.toml: limits.max_keepalve: unknown key; did you mean 'max_keepalive'?",
        ),
        (
            "[limits]\nmax_inflight = -1\n",
            [],
            2,
            "broker.toml: limits.max_inflight: must be an integer from 0 to 65535",
        ),
        ("[limits\n", [], 2, "broker.toml: not valid TOML: "),
        ('[persistence]\nsynchronous = "off"\n', [], 2, "broker.toml: persistence.synchronous: must be one of"),
        (
            '[[listener]]\nurl = "mqtts://127.0.0.1:0"\n',
            [],
            2,
            "listener[0]: mqtts://127.0.0.1:0 needs certfile and keyfile",
        ),
        (
            '[[listener]]\nurl = "mqtts://127.0.0.1:0"\ncertfile = "nope.pem"\nkeyfile = "nope.key"\n',
            [],
            1,
            "broker.toml: listener[0].certfile: cannot read the certificate nope.pem: No such file or directory",
        ),
        (
            '[log]\nfile = "{missing}/broker.log"\n',
            [],
            1,
            "cannot open the log file {missing}/broker.log",
        ),
        ("", ["--ready-file", "{missing}/r.json"], 1, "cannot write the ready file {missing}/r.json"),
        ("", ["--log-file", "{missing}/l.log"], 1, "cannot open the log file {missing}/l.log"),
        ("", ["--max-keepalive", "70000"], 2, "command line: --max-keepalive: must be an integer from 0 to 65535"),
        ("", ["--mosquitto-conf", "m.conf"], 2, "give --config or --mosquitto-conf, not both"),
    ],
)
def test_bad_input_at_start_is_one_line(tmp_path: Path, content: str, args: list[str], code: int, message: str) -> None:
    content, message = missing_path(content, tmp_path), missing_path(message, tmp_path)
    (tmp_path / "broker.toml").write_text(content)
    done = serve_fails("--config", "broker.toml", *(missing_path(a, tmp_path) for a in args), cwd=tmp_path)
    assert done.returncode == code, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("mqtt: error: "), done.stderr
    assert message in done.stderr


def test_missing_config_file_and_unreadable_tls_key(tmp_path: Path) -> None:
    done = serve_fails("--config", str(tmp_path / "none.toml"))
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "cannot read the configuration" in done.stderr and "No such file" in done.stderr
    # #21: an unreadable key is exit 1 with one line, as a missing one (not click's usage box).
    _make_certs(tmp_path)
    key = tmp_path / "server.key"
    key.chmod(0)
    if os.access(key, os.R_OK):  # root reads anything: make it unreadable another way
        key.unlink()
        key.mkdir()
    done = serve_fails("--listen", "mqtts://127.0.0.1:0", "--tls-cert", str(tmp_path / "server.pem"),
                       "--tls-key", str(key))  # fmt: skip
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "cannot load TLS certificate" in done.stderr


# --- mosquitto.conf ------------------------------------------------------------------------------------------


def test_mosquitto_conf_refused_until_ignore_unsupported(tmp_path: Path, started: list[Ours]) -> None:
    port = free_port()
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(
        f"listener {port} {HOST}\nallow_anonymous true\nhttp_dir /srv/www\nmax_keepalive 120\n"
        "connection cloud\naddress 127.0.0.1:1\ntopic sensors/# out 1\nthreshold 10\n"
    )
    done = serve_fails("--mosquitto-conf", str(conf))
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert lines[:2] == [
        f"mqtt: error: {conf}:3: 'http_dir /srv/www': http_dir is not supported",
        f"mqtt: error: {conf}:8: 'threshold 10': threshold is not supported in a bridge",
    ]
    assert lines[2] == (
        f"mqtt: error: {conf}: 2 lines cannot be honoured (listed above); remove them, or pass "
        "--ignore-unsupported to run without them"
    )
    assert len(lines) == 3
    printed = subprocess.run([*SERVE, "--mosquitto-conf", str(conf), "--print-config"], capture_output=True,
                             text=True, timeout=DEADLINE)  # fmt: skip
    assert printed.returncode == 0
    assert printed.stdout.startswith(f"# not translated: {conf}:3: 'http_dir /srv/www'")
    assert f'url = "mqtt://{HOST}:{port}"' in printed.stdout and "max_keepalive = 120" in printed.stdout
    broker = start(started, tmp_path / "run", "--mosquitto-conf", str(conf), "--ignore-unsupported")
    assert broker.wait_ready()[0]["port"] == port
    assert mosquitto_pub(port, "-k", "120").returncode == 0
    assert mosquitto_pub(port, "-k", "121").returncode != 0
    assert "mqtt: warning: " in broker.stderr.read_text()


def test_mosquitto_conf_include_dir_and_the_same_file_in_mosquitto(tmp_path: Path, started: list[Ours]) -> None:
    """Debian's layout: mosquitto.conf with include_dir conf.d; mosquitto itself runs the same files."""
    ours_port, theirs_port = free_port(), free_port()
    confd = tmp_path / "conf.d"
    confd.mkdir()
    (confd / "10-listener.conf").write_text(f"listener {ours_port} {HOST}\nallow_anonymous true\n")
    (confd / "20-limits.conf").write_text("max_queued_messages 200\nmax_packet_size 100\n")
    (confd / "README").write_text("not a .conf file: not read\n")
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(f"# Debian's default, without persistence\nlog_dest stderr\ninclude_dir {confd}\n")
    broker = start(started, tmp_path / "run", "--mosquitto-conf", str(conf))
    assert broker.wait_ready()[0]["port"] == ours_port
    assert mosquitto_pub(ours_port).returncode == 0
    assert mosquitto_pub(ours_port, "-m", "x" * 200).returncode != 0  # over max_packet_size: disconnected

    # The same files are a valid mosquitto configuration, and mean the same there.
    theirs = tmp_path / "theirs"
    shutil.copytree(confd, theirs / "conf.d")
    (theirs / "conf.d" / "10-listener.conf").write_text(f"listener {theirs_port} {HOST}\nallow_anonymous true\n")
    (theirs / "mosquitto.conf").write_text(conf.read_text().replace(str(confd), str(theirs / "conf.d")))
    proc = subprocess.Popen(["mosquitto", "-c", str(theirs / "mosquitto.conf")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for(lambda: not refuses(theirs_port), "mosquitto to listen")
        assert mosquitto_pub(theirs_port).returncode == 0
        assert mosquitto_pub(theirs_port, "-m", "x" * 200).returncode != 0
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# --- reload ------------------------------------------------------------------------------------------------


def _listeners(*ports: int) -> str:
    return "".join(f'[[listener]]\nurl = "mqtt://{HOST}:{port}"\n\n' for port in ports)


def test_sighup_log_line_names_what_changed(tmp_path: Path, started: list[Ours]) -> None:
    """Each reload's line: "no change" only when nothing changed; else the settings, with their old and new values."""
    a = free_port()
    config = tmp_path / "broker.toml"
    config.write_text(_listeners(a))
    broker = start(started, tmp_path / "run", "--config", str(config))
    broker.wait_ready()
    reloads = [
        (_listeners(a), "no change"),
        (_listeners(a) + '[limits]\nmax_keepalive = 60\n[sys]\ninterval = 2\n',
         "limits: max_keepalive 65535 -> 60, sys_interval 10.0 -> 2.0"),
        (f'[[listener]]\nurl = "mqtt://{HOST}:{a}"\nversions = ["5"]\nmax_connections = 3\n[limits]\n'
         'max_keepalive = 60\n[sys]\ninterval = 2\n[log]\nlevel = "info"\n',
         f"listener mqtt://{HOST}:{a}: versions unset -> 5, max_connections 0 -> 3; log: level warning -> info"),
    ]  # fmt: skip
    for n, (content, said) in enumerate(reloads, 1):
        config.write_text(content)
        broker.signal(signal.SIGHUP)
        line = wait_line(broker.stderr, "configuration reloaded", n)[-1]
        assert line.endswith(f"configuration reloaded: {said}"), line


def test_sighup_opens_and_closes_listeners_without_touching_the_others(tmp_path: Path, started: list[Ours]) -> None:
    a, b = free_port(), free_port()
    config = tmp_path / "broker.toml"
    config.write_text(_listeners(a) + '[log]\nlevel = "info"\n')
    broker = start(started, tmp_path / "run", "--config", str(config))
    on_a = Subscriber(a, "cfg/#", "on-a")
    try:
        stamp = broker.ready.stat().st_mtime_ns
        config.write_text(_listeners(a, b) + '[log]\nlevel = "info"\n')
        broker.signal(signal.SIGHUP)
        assert [entry["port"] for entry in broker.wait_ready(stamp)] == [a, b]
        wait_line(broker.stderr, rf"configuration reloaded: listener mqtt://{HOST}:{b} opened")
        assert mosquitto_pub(b, "-q", "1").returncode == 0
        wait_for(lambda: on_a.messages == [b"hello"], "a message through the new listener, to the old one's client")

        on_b = Subscriber(b, "cfg/#", "on-b")
        stamp = broker.ready.stat().st_mtime_ns
        config.write_text(_listeners(b) + '[log]\nlevel = "info"\n')
        broker.signal(signal.SIGHUP)
        assert [entry["port"] for entry in broker.wait_ready(stamp)] == [b]
        assert on_a.disconnected.wait(DEADLINE)  # the removed listener's client: ended (5.0: 0x8B)
        assert str(on_a.reason) == "Server shutting down"
        wait_line(broker.stderr, rf"listener mqtt://{HOST}:{a} closed \(1 connections ended\)")
        assert refuses(a)
        assert mosquitto_pub(b, "-q", "1").returncode == 0
        wait_for(lambda: on_b.messages == [b"hello"], "the other listener's client, untouched")
        assert not on_b.disconnected.is_set()
        on_b.close()
    finally:
        on_a.close()


def test_failed_reload_keeps_everything_and_logs_one_line(tmp_path: Path, started: list[Ours]) -> None:
    a, b = free_port(), free_port()
    config = tmp_path / "broker.toml"
    config.write_text(_listeners(a) + "[limits]\nmax_keepalive = 60\n")
    broker = start(started, tmp_path / "run", "--config", str(config), "--log-format", "json")
    sub = Subscriber(a, "cfg/#", "stays")
    blocker = socket.socket()
    blocker.bind((HOST, b))
    blocker.listen()
    try:
        bad = [
            (_listeners(a) + "[limits]\nmax_keepalive = 70000\n", "limits.max_keepalive: must be an integer"),
            ("[[listener]]\nurl = 'mqtts://127.0.0.1:0'\ncertfile = 'no.pem'\nkeyfile = 'no.key'\n",
             "listener[0].certfile: cannot read the certificate no.pem"),
            (_listeners(a, b), f"cannot listen on mqtt://{HOST}:{b}"),  # port in use: the new listener fails
            (f"[log]\nfile = '{tmp_path / 'missing' / 'x.log'}'\n", "cannot open the log file"),
            ("not toml at all", "not valid TOML"),
        ]  # fmt: skip
        for n, (content, why) in enumerate(bad, 1):
            config.write_text(content)
            broker.signal(signal.SIGHUP)
            lines = wait_line(broker.stderr, "reload failed", n)
            event = json.loads(lines[-1])
            assert event["level"] == "error" and event["event"] == "reload"
            assert (
                event["detail"].startswith("reload failed, the configuration is unchanged: ") and why in event["detail"]
            )
        # Still the old configuration: the same listener, the same keep alive limit, the client still there.
        assert mosquitto_pub(a, "-q", "1", "-k", "60").returncode == 0
        assert mosquitto_pub(a, "-k", "61").returncode != 0
        wait_for(lambda: sub.messages == [b"hello"], "the message")
        assert not sub.disconnected.is_set()
        # And a good file is taken again.
        config.write_text(_listeners(a) + "[limits]\nmax_keepalive = 120\n")
        broker.signal(signal.SIGHUP)
        wait_line(broker.stderr, "configuration reloaded: limits: max_keepalive 60 -> 120")
        assert mosquitto_pub(a, "-k", "120").returncode == 0
    finally:
        blocker.close()
        sub.close()
    assert broker.stop() == 0


def test_sighup_reloads_certificates_for_new_connections(tmp_path: Path, started: list[Ours]) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    _make_certs(first)
    _make_certs(second)
    live = tmp_path / "live"
    shutil.copytree(first, live)
    port = free_port()
    config = tmp_path / "broker.toml"
    config.write_text(
        f'[[listener]]\nurl = "mqtts://{HOST}:{port}"\ncertfile = "{live}/server.pem"\nkeyfile = "{live}/server.key"\n'
    )
    broker = start(started, tmp_path / "run", "--config", str(config))

    def served_by(ca: Path) -> bool:
        ctx = ssl.create_default_context(cafile=str(ca))
        try:
            with socket.create_connection((HOST, port), timeout=5) as raw, ctx.wrap_socket(raw, server_hostname=HOST):
                return True
        except ssl.SSLCertVerificationError:
            return False

    assert served_by(first / "ca.pem") and not served_by(second / "ca.pem")
    for name in ("server.pem", "server.key"):
        shutil.copy(second / name, live / name)
    broker.signal(signal.SIGHUP)
    wait_line(broker.stderr, "configuration reloaded")
    assert served_by(second / "ca.pem") and not served_by(first / "ca.pem")


# --- logging ---------------------------------------------------------------------------------------------


def _doc_block(language: str, marker: str) -> str:
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", DOCS.read_text(), re.S | re.M)
    return next(block for lang, block in blocks if lang == language and marker in block)


def test_log_file_rotated_by_logrotate_and_reopened_on_sigusr2(tmp_path: Path, started: list[Ours]) -> None:
    port = free_port()
    log = tmp_path / "broker.log"
    broker = start(started, tmp_path / "run", "--port", str(port), "--log-file", str(log), "-v")
    assert mosquitto_pub(port, "-i", "before-rotation").returncode == 0
    wait_line(log, "before-rotation", 2)  # connected, disconnected
    # docs/broker.md's snippet, with this test's file, owner and broker.
    snippet = _doc_block("", "/etc/logrotate.d/mqtt-serve")
    snippet = snippet.replace("/var/log/mqtt/broker.log", str(log)).replace("create 0640 mqtt mqtt", "create 0640")
    snippet = re.sub(r"systemctl kill .*", f"kill -USR2 {broker.proc.pid}", snippet)
    (tmp_path / "logrotate.conf").write_text(snippet)
    done = subprocess.run(["logrotate", "-f", "-s", str(tmp_path / "state"), str(tmp_path / "logrotate.conf")],
                          capture_output=True, text=True, timeout=DEADLINE)  # fmt: skip
    assert done.returncode == 0, done.stderr
    rotated = tmp_path / "broker.log.1"
    assert "before-rotation" in rotated.read_text()
    assert mosquitto_pub(port, "-i", "after-rotation").returncode == 0
    wait_line(log, "after-rotation", 2)
    assert "after-rotation" not in rotated.read_text()
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d connected +before-rotation 127\.0\.0\.1:\d+", rotated.read_text())


def test_syslog_on_a_unix_datagram_socket(tmp_path: Path, started: list[Ours]) -> None:
    address = tmp_path / "log.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(str(address))
    server.settimeout(DEADLINE)
    port = free_port()
    config = tmp_path / "broker.toml"
    config.write_text(
        _listeners(port) + f'[log]\nlevel = "info"\nsyslog = true\nsyslog_address = "{address}"\n'
        'syslog_facility = "local3"\n'
    )
    try:
        broker = start(started, tmp_path / "run", "--config", str(config))
        assert mosquitto_pub(port, "-i", "to-syslog").returncode == 0
        datagrams = [server.recv(4096).decode() for _ in range(2)]
    finally:
        server.close()
    pid = broker.proc.pid
    # local3 (19) * 8 + info (6) = 158
    assert re.fullmatch(
        rf"<158>\w{{3}} [ \d]\d \d\d:\d\d:\d\d mqtt-serve\[{pid}\]: connected +to-syslog .*", datagrams[0]
    )
    assert "disconnected" in datagrams[1] and "to-syslog" in datagrams[1]


def test_log_levels_and_escaped_client_ids(tmp_path: Path, started: list[Ours]) -> None:
    port = free_port()
    broker = start(started, tmp_path / "run", "--port", str(port), "--log-level", "warning")
    assert mosquitto_pub(port, "-i", "quiet").returncode == 0
    with socket.create_connection((HOST, port)) as raw:
        raw.sendall(bytes.fromhex("10 0d 00 04 4d 51 54 54 06 02 00 00 00 01 7a"))  # protocol level 6: refused
        raw.settimeout(5)
        assert raw.recv(100)[:1] == b"\x20"  # CONNACK
    with socket.create_connection((HOST, port)) as raw:
        raw.sendall(bytes.fromhex("10 10 00 04 4d 51 54 54 04 02 00 3c 00 04") + b"a\nb\x1b")  # id "a\nb\x1b"
        raw.sendall(bytes.fromhex("82 06 00 01 00 01 23 03"))  # SUBSCRIBE with QoS 3: a protocol error
        raw.settimeout(5)
        while raw.recv(100):
            pass
    # A client id with control characters is refused as malformed (as mosquitto does): logged, never written raw.
    lines = wait_line(broker.stderr, r"control character U\+000A")
    assert "\x1b" not in broker.stderr.read_text() and "a\nb" not in broker.stderr.read_text()
    assert "quiet" not in broker.stderr.read_text()  # connections are info: below warning
    assert "refused" in broker.stderr.read_text() and lines


# --- systemd ----------------------------------------------------------------------------------------------


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.fail("systemd-analyze is missing: scripts/install-system-deps.sh installs Debian's systemd")
    unit = _doc_block("ini", "mqtt-serve.service")
    mqtt = Path(sys.executable).parent / "mqtt"
    assert "ExecStart=/usr/local/bin/mqtt serve --config /etc/mqtt/broker.toml" in unit
    unit = unit.replace("/usr/local/bin/mqtt", str(mqtt))
    path = tmp_path / "mqtt-serve.service"
    path.write_text(unit)
    done = subprocess.run([analyze, "verify", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr
    # And the command it runs is one this version understands.
    check = subprocess.run([str(mqtt), "serve", "--help"], capture_output=True, text=True, timeout=DEADLINE)
    assert "--config" in check.stdout


def test_reloads_under_traffic_lose_nothing(tmp_path: Path, started: list[Ours]) -> None:
    """QoS 1 messages flowing through one listener while reloads open and close another and change limits:
    every message arrives, in order, and no client is disconnected."""
    a, b = free_port(), free_port()
    config = tmp_path / "broker.toml"
    config.write_text(_listeners(a))
    broker = start(started, tmp_path / "run", "--config", str(config))
    sub = Subscriber(a, "flow/#", "flow-sub")
    publisher = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="flow-pub", protocol=paho.MQTTv311)
    publisher.connect(HOST, a)
    publisher.loop_start()
    try:
        total = 600
        for i in range(total):
            publisher.publish("flow/n", str(i).encode(), 1)
            if i % 100 == 50:
                variant = (i // 100) % 3
                limits = f"[limits]\nmax_queued_messages = {1000 + i}\n"
                config.write_text((_listeners(a, b) if variant else _listeners(a)) + limits)
                broker.signal(signal.SIGHUP)
            time.sleep(0.002)
        wait_for(lambda: len(sub.messages) == total, f"{total} messages")
        assert sub.messages == [str(i).encode() for i in range(total)]
        assert not sub.disconnected.is_set()
        assert len(wait_line(broker.stderr, "configuration reloaded", 6)) == 6
    finally:
        publisher.disconnect()
        publisher.loop_stop()
        sub.close()


def test_debian_default_mosquitto_conf(tmp_path: Path) -> None:
    """Debian's /etc/mosquitto/mosquitto.conf (as the mosquitto package installs it, include_dir and all)."""
    conf = Path("/etc/mosquitto/mosquitto.conf")
    if not conf.exists():
        pytest.fail("Debian's mosquitto package is not installed (scripts/install-system-deps.sh installs it)")
    printed = subprocess.run([*SERVE, "--mosquitto-conf", str(conf), "--print-config"], capture_output=True,
                             text=True, timeout=DEADLINE)  # fmt: skip
    assert printed.returncode == 0 and printed.stderr == ""  # every line honoured: nothing named
    assert "not translated" not in printed.stdout
    assert 'pid_file = "/run/mosquitto/mosquitto.pid"' in printed.stdout
    assert 'url = "mqtt://127.0.0.1:1883"' in printed.stdout  # no listener: local only, as mosquitto 2
    assert 'path = "/var/lib/mosquitto/mqtt-cli.db"' in printed.stdout  # persistence true, beside mosquitto.db
    assert 'file = "/var/log/mosquitto/mosquitto.log"' in printed.stdout


# --- every kind of listener from the file (net/server.py's listeners) ---------------------------------------


def paho_ws_roundtrip(port: int, client_id: str, path: str = "/mqtt", protocol: int = paho.MQTTv311) -> bool:
    """Connects over WebSocket, subscribes, publishes one QoS 1 message to itself; True when it came back."""
    got = threading.Event()
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol,
                         transport="websockets")  # fmt: skip
    client.ws_set_options(path=path)
    client.on_message = lambda c, u, m: got.set()
    client.on_connect = lambda c, u, f, rc, p: c.subscribe("ws/#", 1)
    client.on_subscribe = lambda c, *a: c.publish("ws/x", b"over websocket", 1)
    try:
        client.connect(HOST, port)
    except OSError:
        return False
    client.loop_start()
    try:
        return got.wait(DEADLINE)
    finally:
        client.disconnect()
        client.loop_stop()


def test_mosquitto_websockets_and_unix_file_in_both_brokers(tmp_path: Path, started: list[Ours]) -> None:
    """tests/data/mosquitto/websockets.conf's listeners (MQTT, WebSocket, a unix socket), on free ports: the same
    file runs our broker (--mosquitto-conf) and mosquitto, and the same clients work with both."""
    template = (REPO / "tests" / "data" / "mosquitto" / "websockets.conf").read_text()
    # This test's addresses; the TLS WebSocket listener is left out (its files are Let's Encrypt's).
    text = template.split("listener 9443")[0] + "listener 0 SOCK\n" + template.split("mqtt.sock\n")[1]

    def conf_for(name: str) -> tuple[Path, int, int, Path]:
        mqtt_port, ws_port, sock = free_port(), free_port(), tmp_path / f"{name}.sock"
        path = tmp_path / f"{name}.conf"
        path.write_text(text.replace("listener 1883", f"listener {mqtt_port}")
                        .replace("listener 9001", f"listener {ws_port}").replace("SOCK", str(sock)))  # fmt: skip
        return path, mqtt_port, ws_port, sock

    ours_conf, ours_mqtt, ours_ws, ours_sock = conf_for("ours")
    start(started, tmp_path / "run", "--mosquitto-conf", str(ours_conf))
    theirs_conf, theirs_mqtt, theirs_ws, theirs_sock = conf_for("theirs")
    if os.geteuid() == 0:  # mosquitto started as root becomes user mosquitto, who cannot enter pytest's tmp_path
        theirs_conf.write_text("user root\n" + theirs_conf.read_text())
    proc = subprocess.Popen(["mosquitto", "-c", str(theirs_conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for(lambda: not refuses(theirs_mqtt) and theirs_sock.exists(), "mosquitto to listen")
        for mqtt_port, ws_port, sock in ((ours_mqtt, ours_ws, ours_sock), (theirs_mqtt, theirs_ws, theirs_sock)):
            assert mosquitto_pub(mqtt_port).returncode == 0
            assert paho_ws_roundtrip(ws_port, f"ws-{ws_port}")
            over_unix = subprocess.run(["mosquitto_pub", "--unix", str(sock), "-t", "u", "-m", "x"],
                                       capture_output=True, text=True, timeout=DEADLINE)  # fmt: skip
            assert over_unix.returncode == 0, over_unix.stderr
            # message_size_limit 262144: a bigger payload is acknowledged and dropped by both; the next one goes on.
            sub = Subscriber(mqtt_port, "big", f"big-{mqtt_port}")
            try:
                for size in (300_000, 200_000):
                    (tmp_path / "payload").write_bytes(b"x" * size)
                    done = subprocess.run(
                        ["mosquitto_pub", "-h", HOST, "-p", str(mqtt_port), "-t", "big", "-q", "1", "-f",
                         str(tmp_path / "payload")], capture_output=True, text=True, timeout=DEADLINE,
                    )  # fmt: skip
                    assert done.returncode == 0, done.stderr
                wait_for(lambda: len(sub.messages) == 1, "the message under the limit")  # noqa: B023
                assert len(sub.messages[0]) == 200_000
            finally:
                sub.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_config_listeners_and_per_listener_settings_reloaded(tmp_path: Path, started: list[Ours]) -> None:
    plain, ws = free_port(), free_port()
    sock = tmp_path / "mqtt.sock"
    config = tmp_path / "broker.toml"

    def write(versions: str, max_connections: int, with_unix: bool) -> None:
        unix = f'[[listener]]\nurl = "unix://{sock}"\nmode = 0o600\n\n' if with_unix else ""
        config.write_text(
            f'[[listener]]\nurl = "mqtt://{HOST}:{plain}"\nversions = [{versions}]\n'
            f"max_connections = {max_connections}\n\n"
            f'[[listener]]\nurl = "ws://{HOST}:{ws}/mqtt"\n\n' + unix
        )

    write('"5"', 0, True)
    broker = start(started, tmp_path / "run", "--config", str(config))
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    assert mosquitto_pub(plain, "-V", "mqttv311").returncode != 0  # versions = ["5"]
    assert mosquitto_pub(plain, "-V", "mqttv5").returncode == 0
    assert paho_ws_roundtrip(ws, "ws-before")
    holder = Subscriber(plain, "hold/#", "holder")  # one connection on the listener
    try:
        stamp = broker.ready.stat().st_mtime_ns
        write('"3.1.1", "5"', 1, False)
        broker.signal(signal.SIGHUP)
        assert len(broker.wait_ready(stamp)) == 2
        wait_line(broker.stderr, rf"listener unix://{sock} closed")
        assert not sock.exists()
        # The kept listener takes its new settings: 3.1.1 allowed, one connection at most (the holder's).
        assert mosquitto_pub(plain, "-V", "mqttv311").returncode != 0
        assert not holder.disconnected.is_set()
    finally:
        holder.close()
    wait_for(lambda: mosquitto_pub(plain, "-V", "mqttv311").returncode == 0, "a 3.1.1 client, once alone")
    assert paho_ws_roundtrip(ws, "ws-after")


# --- [auth] from the file, and SIGHUP re-reading the password and ACL files (w2-auth's policies) -------------


def test_auth_from_the_file_and_reloaded(tmp_path: Path, started: list[Ours]) -> None:
    """Passwords made by Debian's mosquitto_passwd, an ACL in mosquitto's format, both named in [auth]; a reload
    disconnects a user removed from the password file (5.0: 0x98) and drops the subscriptions the new ACL no
    longer lets a client read; a bad file on reload changes nothing."""
    port = free_port()
    passwd, acl = tmp_path / "passwd", tmp_path / "acl"
    for user, password in (("alice", "alice-pw"), ("bob", "bob-pw")):
        flag = ["-c"] if user == "alice" else []
        subprocess.run(["mosquitto_passwd", *flag, "-b", str(passwd), user, password], check=True, timeout=DEADLINE)
    acl.write_text("user alice\ntopic readwrite a/#\n\nuser bob\ntopic readwrite a/#\n")
    config = tmp_path / "broker.toml"
    config.write_text(
        _listeners(port) + f'[auth]\nallow_anonymous = false\npassword_file = "{passwd}"\nacl_file = "{acl}"\n'
        '[log]\nlevel = "info"\n'
    )
    broker = start(started, tmp_path / "run", "--config", str(config))
    assert mosquitto_pub(port).returncode != 0  # anonymous: refused
    assert mosquitto_pub(port, "-u", "alice", "-P", "wrong").returncode != 0

    def user(name: str) -> Subscriber:
        sub = Subscriber.__new__(Subscriber)
        sub.messages, sub.connected, sub.disconnected, sub.reason = [], threading.Event(), threading.Event(), None
        sub.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=name, protocol=paho.MQTTv5)
        sub.client.username_pw_set(name, f"{name}-pw")
        sub.client.on_message = lambda c, u, m: sub.messages.append(m.payload)
        sub.client.on_connect = lambda c, u, f, rc, p: sub.connected.set()

        def gone(c: Any, u: Any, flags: Any, rc: Any, props: Any) -> None:
            sub.reason = rc
            sub.disconnected.set()

        sub.client.on_disconnect = gone
        sub.client.connect(HOST, port)
        sub.client.loop_start()
        assert sub.connected.wait(DEADLINE)
        subscribed = threading.Event()
        sub.client.on_subscribe = lambda *a: subscribed.set()
        sub.client.subscribe("a/#", 1)
        assert subscribed.wait(DEADLINE)
        return sub

    alice, bob = user("alice"), user("bob")
    try:
        assert mosquitto_pub(port, "-u", "alice", "-P", "alice-pw", "-t", "a/1", "-q", "1").returncode == 0
        wait_for(lambda: alice.messages == bob.messages == [b"hello"], "both to receive")
        # bob leaves the password file; alice may now only write under a/.
        subprocess.run(["mosquitto_passwd", "-D", str(passwd), "bob"], check=True, timeout=DEADLINE)
        acl.write_text("user alice\ntopic write a/#\n")
        broker.signal(signal.SIGHUP)
        assert bob.disconnected.wait(DEADLINE)
        assert str(bob.reason) == "Administrative action"
        # The log line says what changed, not "no change".
        (line,) = wait_line(broker.stderr, "configuration reloaded")
        assert line.endswith(
            f"configuration reloaded: password file {passwd}: bob removed; ACL file {acl}: 1 line added, 2 removed; "
            "1 client disconnected, 1 subscription removed"
        ), line
        assert not alice.disconnected.is_set()
        assert mosquitto_pub(port, "-u", "alice", "-P", "alice-pw", "-t", "a/2", "-q", "1").returncode == 0
        assert mosquitto_pub(port, "-u", "bob", "-P", "bob-pw").returncode != 0
        time.sleep(0.5)
        assert alice.messages == [b"hello"]  # her a/# subscription is gone with her read access
        # A password file that cannot be read: the reload fails, alice's access stays as it was.
        passwd.write_text("alice:not-a-hash\n")
        broker.signal(signal.SIGHUP)
        wait_line(broker.stderr, rf"reload failed, the configuration is unchanged: {re.escape(str(config))}: "
                                 rf"auth.password_file: password file {re.escape(str(passwd))}, line 1")
        assert mosquitto_pub(port, "-u", "alice", "-P", "alice-pw", "-t", "a/3", "-q", "1").returncode == 0
    finally:
        alice.close()
        bob.close()
