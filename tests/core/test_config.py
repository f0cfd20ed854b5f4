"""core.config: the broker.toml schema (checks with key paths, round trip) and the mosquitto.conf translation."""

from __future__ import annotations

import gzip
import re
import tomllib
from pathlib import Path

import pytest
import tomli_w

from mqtt_cli.core.config import (
    AuthSettings,
    BrokerSettings,
    ConfigError,
    ListenerSettings,
    LogFormat,
    LogLevel,
    PersistenceSettings,
    ProtocolVersion,
    Scheme,
    SyncMode,
    check,
    include_dirs,
    key_docs,
    listener_from_url,
    load_config,
    override,
    override_listeners,
    parse_listener_url,
    to_table,
    translate_mosquitto,
)
from mqtt_cli.core.limits import Limits

DATA = Path(__file__).resolve().parent.parent / "data" / "mosquitto"
DEBIAN_EXAMPLE = Path("/usr/share/doc/mosquitto/examples/mosquitto.conf")


def error_of(table: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(table, "broker.toml")
    message = str(info.value)
    assert "\n" not in message
    return message


def test_empty_file_is_the_defaults() -> None:
    assert load_config({}, "broker.toml") == BrokerSettings()
    assert BrokerSettings().listener == (ListenerSettings("mqtt://127.0.0.1:1883"),)


def test_a_full_file() -> None:
    text = """
[[listener]]
url = "mqtt://0.0.0.0:1883"
versions = ["3.1.1", "5"]
max_connections = 100

[[listener]]
url = "mqtts://[::]:8883"
certfile = "s.pem"
keyfile = "s.key"
cafile = "ca.pem"
require_certificate = true
use_identity_as_username = true

[limits]
max_keepalive = 300
max_queued_bytes = 1048576
queue_drop_oldest = true

[auth]
allow_anonymous = false
password_file = "/etc/mqtt/passwd"

[log]
level = "info"
format = "json"
file = "/var/log/mqtt.log"

[sys]
interval = 2.5
"""
    s = check(load_config(tomllib.loads(text), "b.toml"), "b.toml")
    assert s.listener[0].versions == (ProtocolVersion.v311, ProtocolVersion.v5)
    assert s.listener[0].max_connections == 100
    assert s.listener[1].scheme is Scheme.MQTTS and s.listener[1].require_certificate
    assert s.limits == Limits(max_keepalive=300, max_queued_bytes=1048576, queue_drop_oldest=True)
    assert s.auth == AuthSettings(allow_anonymous=False, password_file="/etc/mqtt/passwd")
    assert (s.log.level, s.log.format, s.log.file) == (LogLevel.info, LogFormat.json, "/var/log/mqtt.log")
    assert s.sys.interval == 2.5
    # What --print-config writes reads back to the same records.
    assert load_config(tomllib.loads(tomli_w.dumps(to_table(s))), "again") == s


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        (
            {"limits": {"max_keepalve": 3}},
            "broker.toml: limits.max_keepalve: unknown key; did you mean 'max_keepalive'?",
        ),
        ({"limits": {"max_keepalive": 70000}}, "limits.max_keepalive: must be an integer from 0 to 65535, not 70000"),
        ({"limits": {"max_keepalive": "60"}}, "limits.max_keepalive: must be an integer from 0 to 65535, not a string"),
        ({"limits": {"max_inflight": -1}}, "limits.max_inflight: must be an integer from 0 to 65535, not -1"),
        ({"limits": {"queue_drop_oldest": 1}}, "limits.queue_drop_oldest: must be true or false, not an integer (1)"),
        (
            {"log": {"level": "warn"}},
            "log.level: must be one of 'debug', 'info', 'warning', 'error', 'none', "
            "not 'warn'; did you mean 'warning'?",
        ),
        ({"log": {"syslog_facility": "local9"}}, "log.syslog_facility: must be one of daemon, user, local0"),
        ({"log": "x"}, "broker.toml: log: must be a table, not a string ('x')"),
        ({"listener": {"url": "mqtt://x"}}, "listener: must be an array, not a table"),
        (
            {"listener": [{"url": "http://x:1"}]},
            "listener[0].url: 'http://x:1': the scheme must be mqtt, mqtts, ws, wss or unix",
        ),
        (
            {"listener": [{"url": "unix://relative"}]},
            "listener[0].url: 'unix://relative': a Unix socket needs an absolute path",
        ),
        ({"listener": [{"url": "mqtt://x:99999"}]}, "listener[0].url: 'mqtt://x:99999': the port must be a number"),
        ({"listener": [{"port": 1883}]}, "listener[0].port: unknown key; known in [listener[0]]: url,"),
        ({"listener": [{}]}, "listener[0].url: missing"),
        (
            {"listener": [{"url": "mqtt://x", "versions": ["3"]}]},
            "listener[0].versions[0]: must be one of '3.1', '3.1.1', '5', not '3'",
        ),
        ({"lsitener": []}, "lsitener: unknown key; did you mean 'listener'? known at the top level: listener, limits"),
        (
            {"persistence": {"file": "x"}},
            "broker.toml: persistence.file: unknown key; known in [persistence]: path, synchronous",
        ),
        ({"persistence": {"synchronous": "off"}}, "broker.toml: persistence.synchronous: "),
        ({"bridge": [{}]}, "broker.toml: bridge[0].name: missing"),
        ({"bridge": [{"name": "x", "topics": ["a/# out 3"], "remote": {"url": ["mqtt://h"]}}]},
         "bridge[0].topics[0]: topic rule 'a/# out 3': QoS '3' is not 0, 1 or 2"),
        ({"metrics": {"listen": "9883"}}, "metrics: '9883' is not HOST:PORT (e.g. 127.0.0.1:9883)"),
        ({"metrics": {"listen": "127.0.0.1:99999"}}, "metrics: '127.0.0.1:99999': the port must be a number"),
        ({"metrics": {"lisen": "x"}}, "metrics.lisen: unknown key; did you mean 'listen'?"),
    ],
)
def test_bad_input_is_one_line_naming_the_key(table: dict[str, object], expected: str) -> None:
    assert expected in error_of(table)


@pytest.mark.parametrize(
    ("listener", "expected"),
    [
        ({"url": "mqtts://0.0.0.0:8883"}, "listener[0]: mqtts://0.0.0.0:8883 needs certfile and keyfile"),
        (
            {"url": "mqtts://h", "certfile": "c", "keyfile": "k", "require_certificate": True},
            "listener[0].require_certificate: needs cafile",
        ),
        ({"url": "mqtt://h", "mode": 0o660}, "listener[0].mode: only for unix:// listeners"),
        ({"url": "mqtt://h", "use_identity_as_username": True}, "need a TLS listener"),
    ],
)
def test_rules_across_keys(listener: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(expected)):
        check(load_config({"listener": [listener]}, "b.toml"), "b.toml")


def test_listener_urls() -> None:
    assert parse_listener_url("mqtt://h").port == 1883
    assert parse_listener_url("mqtts://h").port == 8883
    assert parse_listener_url("tcp://h:1").scheme is Scheme.MQTT
    ws = parse_listener_url("ws://0.0.0.0:9001/mqtt")
    assert (ws.scheme, ws.host, ws.port, ws.path) == (Scheme.WS, "0.0.0.0", 9001, "/mqtt")
    assert parse_listener_url("wss://[::1]:443").host == "::1"
    assert parse_listener_url("unix:///run/mqtt.sock").path == "/run/mqtt.sock"
    with pytest.raises(ValueError, match=r"only mqtt://host:port is understood \(a path is for ws and wss\)"):
        parse_listener_url("mqtt://h:1/x")
    assert parse_listener_url("ws://h").port == 8080 and parse_listener_url("wss://h").port == 8081


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("mqtt://h:1?versions=3.1,3.1.1&max_connections=7",
         ListenerSettings("mqtt://h:1", versions=(ProtocolVersion.v31, ProtocolVersion.v311), max_connections=7)),
        ("wss://h/mqtt?versions=5", ListenerSettings("wss://h/mqtt", versions=(ProtocolVersion.v5,))),
        ("unix:///run/m.sock?mode=0660", ListenerSettings("unix:///run/m.sock", mode=0o660)),
    ],
)  # fmt: skip
def test_listen_urls_with_settings(url: str, expected: ListenerSettings) -> None:
    assert listener_from_url(url) == expected


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("unix:///s?mode=999", "not a file mode"),
        ("ws://h?versions=6", "unknown MQTT version '6'"),
        ("ws://h?mode=0600", "unknown setting 'mode'; known: versions, max_connections"),
        ("mqtt://h?max_connections=-1", "whole number"),
    ],
)
def test_listen_url_setting_errors(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        listener_from_url(url)
    # In a file, settings are keys.
    with pytest.raises(ConfigError, match="settings are keys of the"):
        load_config({"listener": [{"url": "mqtt://h?versions=5"}]}, "b.toml")


def test_flags_override_the_file_and_are_checked_as_its_keys() -> None:
    s = load_config({"limits": {"max_keepalive": 30, "max_inflight": 5}}, "b.toml")
    s = override(s, "limits", {"max_keepalive": 60, "max_inflight": None})
    assert (s.limits.max_keepalive, s.limits.max_inflight) == (60, 5)
    with pytest.raises(ConfigError, match=r"command line: --max-keepalive: must be an integer from 0 to 65535"):
        override(s, "limits", {"max_keepalive": 70000})
    s = override_listeners(s, ["mqtt://127.0.0.1:0", "mqtts://127.0.0.1:0"], {"certfile": "c", "keyfile": "k"})
    assert [lst.certfile for lst in s.listener] == [None, "c"]
    with pytest.raises(ConfigError, match="--listen: listener 'http://x': the scheme"):
        override_listeners(s, ["http://x"], {})


def test_every_key_is_documented_in_broker_md() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "broker.md").read_text()
    for path, *_ in key_docs():
        assert f"`{path}`" in doc, path


def test_every_key_is_in_its_own_sections_table() -> None:
    """A key's row sits under its section's heading (`metrics.listen` under **`[metrics]`**, not `[sys]`)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "broker.md").read_text()
    for path, *_ in key_docs():
        row = doc.index(f"| `{path}` |")
        heading = re.findall(r"^\*\*`\[+(\w+)\]+`\*\*", doc[:row], re.MULTILINE)[-1]
        assert heading == path.split(".")[0].removesuffix("[]"), (path, heading)


# --- mosquitto.conf -------------------------------------------------------------------------------------------


def test_a_mistyped_mosquitto_option_gets_a_did_you_mean() -> None:
    text = "listener 1883\npasword_file /etc/mosquitto/passwd\nbogus 1\nhttp_dir /srv\n"
    whys = [(u.line, u.why) for u in translate_mosquitto(text, "m.conf").unsupported]
    assert whys == [
        (2, "pasword_file is not a mosquitto option; did you mean 'password_file'?"),
        (3, "bogus is not a mosquitto option"),
        (4, "http_dir is not supported"),  # mosquitto's, not honoured here: no suggestion
    ]


def test_every_option_of_debians_example_is_a_mosquitto_option() -> None:
    """The options Debian's commented example names (mosquitto 2.0's own list) are never called typos."""
    options = set(re.findall(r"^#([a-z_0-9.]+)(?: |$)", _debian_example(), re.MULTILINE))
    assert len(options) > 80
    text = "".join(f"{option} x\n" for option in sorted(options))
    typos = [u for u in translate_mosquitto(text, "example").unsupported if "not a mosquitto option" in u.why]
    assert typos == []


def translate(name: str) -> tuple[BrokerSettings, list[tuple[int, str]]]:
    result = translate_mosquitto((DATA / name).read_text(), name)
    return result.settings, [(u.line, u.why) for u in result.unsupported]


def test_mosquitto_tls_users_and_limits() -> None:
    s, unsupported = translate("tls-users.conf")
    assert unsupported == []
    plain, tls = s.listener
    assert plain == ListenerSettings("mqtt://127.0.0.1:1883")
    assert tls.url == "mqtts://0.0.0.0:8883"
    assert (tls.cafile, tls.certfile, tls.keyfile) == (
        "/etc/mosquitto/ca_certificates/ca.crt", "/etc/mosquitto/certs/server.crt", "/etc/mosquitto/certs/server.key"
    )  # fmt: skip
    assert tls.require_certificate and tls.use_identity_as_username and tls.max_connections == 5000
    assert s.auth == AuthSettings(False, "/etc/mosquitto/passwd", "/etc/mosquitto/acl", False)
    assert s.limits == Limits(
        max_keepalive=300, max_packet_size=1048576, max_inflight=40, max_queued_messages=5000,
        max_queued_bytes=10485760,
    )  # fmt: skip
    assert s.sys.interval == 30
    assert (s.log.file, s.log.syslog, s.log.level) == ("/var/log/mosquitto/mosquitto.log", True, LogLevel.info)
    check(s, "tls-users.conf")


def test_mosquitto_websockets_and_unix_socket() -> None:
    s, unsupported = translate("websockets.conf")
    assert unsupported == []
    assert [lst.url for lst in s.listener] == [
        "mqtt://0.0.0.0:1883", "ws://0.0.0.0:9001", "wss://0.0.0.0:9443", "unix:///run/mosquitto/mqtt.sock",
    ]  # fmt: skip
    assert s.listener[2].certfile == "/etc/letsencrypt/live/mqtt.example.com/fullchain.pem"
    assert s.auth.allow_anonymous is True
    assert (s.limits.message_size_limit, s.limits.max_topic_alias, s.limits.retain_available) == (262144, 20, False)
    assert s.log.level is LogLevel.debug


def test_mosquitto_per_listener_settings() -> None:
    s, unsupported = translate("per-listener.conf")
    assert unsupported == []
    assert s.auth.per_listener_settings
    inside, outside = s.listener
    assert (inside.url, inside.allow_anonymous, inside.acl_file) == (
        "mqtt://10.0.0.5:1883",
        True,
        "/etc/mosquitto/acl.internal",
    )
    assert outside.url == "mqtts://[::]:8883"
    assert (outside.allow_anonymous, outside.password_file, outside.acl_file) == (
        False, "/etc/mosquitto/passwd", "/etc/mosquitto/acl.external"
    )  # fmt: skip
    assert outside.use_subject_as_username
    assert s.log.level is LogLevel.warning


def test_mosquitto_bridges_and_user_are_named_with_their_line_persistence_honoured() -> None:
    s, unsupported = translate("bridge.conf")
    assert s.listener == (ListenerSettings("mqtt://127.0.0.1:1883"),)
    lines = dict(unsupported)
    assert not {4, 5, 6} & set(lines)  # persistence, persistence_location, autosave_interval
    assert s.persistence == PersistenceSettings(path="/var/lib/mosquitto/mqtt-cli.db")
    assert not {7, 8} & set(lines)  # pid_file, user
    assert (s.process.pid_file, s.process.user) == ("/run/mosquitto/mosquitto.pid", "mosquitto")
    assert not set(range(10, 17)) & set(lines)  # the connection block is a [[bridge]] now
    (bridge,) = s.bridge
    assert bridge.name == "cloud" and bridge.topics == ('sensors/# out 1 "" site7/',)
    remote = bridge.remote
    assert remote.url == ("mqtt://mqtt.example.com:8883",) and remote.cafile == "/etc/ssl/certs/ca-certificates.crt"
    assert (remote.username, remote.password, remote.clean_start) == ("site-7", "secret", False)
    assert remote.protocol_version == "3.1.1"  # mosquitto's default for bridges


def test_mosquitto_connection_blocks_every_key_and_what_is_not_honoured() -> None:
    text = (
        "listener 1883\nconnection a\naddresses h1:1884 h2\ntopic x/# both 2 l/ r/\ntopic y/# in\n"
        "remote_clientid rid\nlocal_clientid lid\ncleansession true\nkeepalive_interval 30\nnotifications true\n"
        "notification_topic st/a\nbridge_protocol_version mqttv50\ntry_private false\nrestart_timeout 2 20\n"
        "bridge_insecure true\nbridge_tls_version tlsv1.2\nlocal_username u\nthreshold 10\nround_robin true\n"
        "topic z/# sideways\nconnection b\naddress h3\ntopic q/#\nnotifications false\nnotification_topic st/b\n"
        "connection empty\naddress h4\n"
    )
    result = translate_mosquitto(text, "m.conf")
    a, b = result.settings.bridge
    assert a.topics == ("x/# both 2 l/ r/", "y/# in") and a.local_client_id == "lid"
    assert a.restart_timeout == (2.0, 20.0) and a.notification_topic == "st/a"
    r = a.remote
    assert r.url == ("mqtt://h1:1884", "mqtt://h2:1883") and r.client_id == "rid" and r.clean_start
    assert (r.keepalive, r.protocol_version, r.try_private, r.insecure, r.tls_version) == (30, "5", False, True,
                                                                                            "tlsv1.2")  # fmt: skip
    assert r.round_robin and not b.remote.round_robin  # mosquitto's default: the first address is the main one
    assert b.notification_topic is None and b.remote.url == ("mqtt://h3:1883",)
    why = {u.line: u.why for u in result.unsupported}
    assert set(why) == {17, 18, 20, 26}
    assert "no local login" in why[17] and why[18] == "threshold is not supported in a bridge"
    assert "direction 'sideways'" in why[20] and "needs an address and at least one topic" in why[26]


def test_mosquitto_default_listener_settings_without_port() -> None:
    # certfile before any `listener` line belongs to mosquitto's default listener, which only `port` starts:
    # named, not moved onto the other listeners (it would turn a plain listener into TLS).
    result = translate_mosquitto("certfile /c.pem\nlistener 1884\n", "m.conf")
    assert result.settings.listener == (ListenerSettings("mqtt://0.0.0.0:1884"),)
    assert [(u.line, u.text) for u in result.unsupported] == [(1, "certfile /c.pem")]
    both = translate_mosquitto("port 1883\nlistener 1884 127.0.0.1\n", "m.conf").settings.listener
    assert [lst.url for lst in both] == ["mqtt://0.0.0.0:1883", "mqtt://127.0.0.1:1884"]
    # No listener at all: mosquitto 2 listens on the loopback interface only.
    assert translate_mosquitto("", "m.conf").settings.listener == (ListenerSettings("mqtt://127.0.0.1:1883"),)


def test_mosquitto_bad_values_are_named() -> None:
    result = translate_mosquitto(
        "max_keepalive soon\nallow_anonymous yes\nlistener\nlog_dest dlt\npersistent_client_expiration 14\n"
        "tls_version sslv3\n", "m.conf"
    )  # fmt: skip
    assert [(u.line, u.why) for u in result.unsupported] == [
        (1, "max_keepalive must be an integer from 0 to 65535, not 'soon'"),
        (2, "allow_anonymous must be true or false, not 'yes'"),
        (3, "listener needs a value"),
        (4, "log_dest dlt is not supported (file, syslog, topic, stderr, none)"),
        (5, "persistent_client_expiration must be a whole number and a unit h, d, w, m or y (e.g. 14d), not '14'"),
        (6, "tls_version is one of tlsv1.1, tlsv1.2, tlsv1.3"),
    ]
    assert (
        str(result.unsupported[0])
        == "m.conf:1: 'max_keepalive soon': max_keepalive must be an integer from 0 to 65535, not 'soon'"
    )


def test_mosquitto_include_dir_is_read_where_it_stands() -> None:
    main = "listener 1883\ninclude_dir /etc/mosquitto/conf.d\nmax_keepalive 60\n"
    assert include_dirs(main) == ["/etc/mosquitto/conf.d"]
    included = {
        "/etc/mosquitto/conf.d": [("a.conf", "allow_anonymous true\n"), ("b.conf", "max_keepalive 30\nbogus 1\n")]
    }
    result = translate_mosquitto(main, "mosquitto.conf", included)
    assert result.settings.auth.allow_anonymous is True
    assert result.settings.limits.max_keepalive == 60  # the main file's later line wins, as in mosquitto
    assert [(u.source, u.line) for u in result.unsupported] == [("b.conf", 2)]


def _debian_example() -> str:
    if DEBIAN_EXAMPLE.exists():
        return DEBIAN_EXAMPLE.read_text()
    gz = DEBIAN_EXAMPLE.with_name("mosquitto.conf.gz")
    if gz.exists():
        return gzip.decompress(gz.read_bytes()).decode()
    pytest.fail("Debian's mosquitto package is not installed (scripts/install-system-deps.sh installs it)")


def test_debian_example_as_shipped_is_the_defaults() -> None:
    result = translate_mosquitto(_debian_example(), "mosquitto.conf")
    assert result.unsupported == ()
    assert result.settings.listener == (ListenerSettings("mqtt://127.0.0.1:1883"),)
    assert result.settings.limits == Limits()


def test_debian_example_with_every_option_uncommented() -> None:
    """Every line of Debian's example, uncommented, is either honoured or named with its line number."""
    text = "\n".join(re.sub(r"^#(?=[a-z_]+( |$))", "", line) for line in _debian_example().splitlines())
    result = translate_mosquitto(text, "mosquitto.conf")
    named = {u.line for u in result.unsupported}
    honoured = {"allow_anonymous", "password_file", "acl_file", "max_keepalive", "max_packet_size",
                "max_inflight_messages", "max_queued_messages", "max_queued_bytes", "max_connections",
                "sys_interval", "per_listener_settings", "protocol", "require_certificate",
                "use_identity_as_username", "use_subject_as_username", "log_dest", "log_type",
                "connection_messages", "log_timestamp", "include_dir", "retain_available", "message_size_limit",
                "max_topic_alias", "port", "bind_address", "persistence", "persistence_file",
                "persistence_location", "autosave_interval", "autosave_on_changes", "pid_file", "user",
                "persistent_client_expiration", "use_username_as_clientid", "allow_zero_length_clientid",
                "auto_id_prefix", "log_timestamp_format"}  # fmt: skip
    for number, line in enumerate(text.splitlines(), 1):
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        if key in honoured and value and "<" not in value:
            assert number not in named, line
        elif key in {"connection", "address", "topic"}:
            assert number in named, line
    assert all(u.why for u in result.unsupported)


def test_mosquitto_persistence_lines() -> None:
    def path(text: str) -> str | None:
        result = translate_mosquitto(text, "m.conf")
        assert not result.unsupported
        return result.settings.persistence.path

    assert path("persistence false\npersistence_location /var/lib/x/\n") is None  # nothing kept, as mosquitto
    assert path("persistence true\n") == "mqtt-cli.db"  # mosquitto: the working directory
    # persistence_file names mosquitto's file, taken over at the first start; the broker's own is beside it.
    given = translate_mosquitto("persistence true\npersistence_location /d\npersistence_file b.db\n", "m.conf")
    assert (given.settings.persistence.path, given.settings.persistence.mosquitto_db) == ("/d/mqtt-cli.db", "b.db")
    assert BrokerSettings().persistence.mosquitto_db == "mosquitto.db"
    bad = translate_mosquitto("persistence_file /x/b.db\n", "m.conf").unsupported
    assert [u.why for u in bad] == ["persistence_file is a file name; give the directory with persistence_location"]
    toml = load_config({"persistence": {"path": "/p.db", "synchronous": "full"}}, "b.toml").persistence
    assert toml == PersistenceSettings("/p.db", SyncMode.full)
    assert BrokerSettings().persistence.path is None  # off by default


def test_certificate_identity_rules() -> None:
    both = {"url": "mqtts://h", "certfile": "c", "keyfile": "k", "use_identity_as_username": True,
            "use_subject_as_username": True}  # fmt: skip
    with pytest.raises(ConfigError, match=r"listener\[0\]: use_identity_as_username and use_subject_as_username"):
        check(load_config({"listener": [both]}, "b.toml"), "b.toml")
    # [auth]'s (the flags'): every listener; a TLS one at least is needed.
    plain = override(load_config({}, "b.toml"), "auth", {"use_identity_as_username": True})
    with pytest.raises(ConfigError, match="auth: a certificate identity as user name needs an mqtts:// or wss://"):
        check(plain, "b.toml")
    no_ca = {"url": "mqtts://h", "certfile": "c", "keyfile": "k", "use_identity_as_username": True}
    with pytest.raises(ConfigError, match=r"listener\[0\]: a certificate identity as user name needs cafile"):
        check(load_config({"listener": [no_ca]}, "b.toml"), "b.toml")


def test_mosquitto_service_options_translated() -> None:
    text = (
        "pid_file /run/m.pid\nuser mosquitto\npersistent_client_expiration 2w\nuse_username_as_clientid true\n"
        "allow_zero_length_clientid false\nauto_id_prefix site-\nlog_type subscribe\nlog_dest topic\n"
        "log_timestamp_format %H:%M\nqueue_qos0_messages false\nallow_duplicate_messages false\n"
        "check_retain_source false\nqueue_qos0_messages true\nlistener 8883\ncertfile /s.pem\nkeyfile /s.key\n"
        "cafile /ca.pem\ncapath /etc/ssl/certs\ncrlfile /crl.pem\ntls_version tlsv1.3\nciphers HIGH\n"
        "ciphers_tls1.3 TLS_AES_256_GCM_SHA384\n"
    )
    result = translate_mosquitto(text, "m.conf")
    assert [(u.line, u.why) for u in result.unsupported] == [
        (13, "only queue_qos0_messages false (this broker's behaviour)")
    ]
    s = result.settings
    assert (s.process.pid_file, s.process.user) == ("/run/m.pid", "mosquitto")
    assert s.limits.persistent_client_expiration == 14 * 86400
    assert (s.auth.use_username_as_clientid, s.auth.allow_zero_length_clientid, s.auth.auto_id_prefix) == (
        True, False, "site-"
    )  # fmt: skip
    assert (s.log.subscriptions, s.log.topic, s.log.timestamp_format) == (True, True, "%H:%M")
    assert s.log.level is LogLevel.info  # subscribe adds the subscription lines, not a level
    (lst,) = s.listener
    assert lst.url == "mqtts://0.0.0.0:8883"
    assert (lst.capath, lst.crlfile, lst.tls_version, lst.ciphers, lst.ciphers_tls13) == (
        "/etc/ssl/certs", "/crl.pem", "tlsv1.3", "HIGH", "TLS_AES_256_GCM_SHA384"
    )  # fmt: skip
    check(s, "m.conf")
    plain = load_config({"listener": [{"url": "mqtt://127.0.0.1:1883", "crlfile": "/crl.pem"}]}, "b.toml")
    with pytest.raises(ConfigError, match=r"listener\[0\]\.crlfile: only for mqtts:// and wss:// listeners"):
        check(plain, "b.toml")
