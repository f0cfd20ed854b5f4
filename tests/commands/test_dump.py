"""`mqtt dump` from the command line: inputs, outputs, filters, --stats, errors and exit codes."""

from __future__ import annotations

import gzip
import json
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mqtt_cli.core import ConnAck, Connect, Properties, PubAck, Publish, PubRec, encode
from tests.capture.helpers import session
from tests.capture.pcapwriter import ETHERNET, Conversation, Interface, pcap, pcapng

from ..conftest import REPO_ROOT, Run, cli_env

MQTT = [sys.executable, "-m", "mqtt_cli"]  # this checkout's (run from REPO_ROOT), whichever venv runs the tests

SESSION_TYPES = ["CONNECT", "CONNACK", "SUBSCRIBE", "SUBACK", "PUBLISH", "PUBACK", "PUBLISH", "PUBACK", "PUBLISH",
                 "PUBACK", "PINGREQ", "DISCONNECT"]  # fmt: skip


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two sessions (3.1.1 and 5.0) and one with QoS flows left open."""
    frames = session(Conversation(cport=40001), client_id="sensor-1").frames()
    frames += session(Conversation(cport=40002, ts=frames[-1][0] + 10**6), version=5, client_id="sensor-2").frames()
    open_flows = Conversation(cport=40003, ts=frames[-1][0] + 10**6).handshake()
    open_flows.send(encode(Connect("stuck")))
    open_flows.send(encode(ConnAck()), False)
    open_flows.send(encode(Publish("alarm/1", b"\x00\xff binary", 1, packet_id=7)))  # never acknowledged
    open_flows.send(encode(Publish("alarm/2", b"two", 2, packet_id=8)))
    open_flows.send(encode(PubRec(8)), False)  # no PUBREL follows
    open_flows.send(encode(Publish("alarm/3", b"three", 1, packet_id=9)))
    open_flows.send(encode(PubAck(9)), False)
    path = tmp_path_factory.mktemp("dump") / "traffic.pcap"
    path.write_bytes(pcap(frames + open_flows.frames()))
    return path


def dump(*args: Any, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*MQTT, "dump", *map(str, args)],
        input=stdin, capture_output=True, timeout=timeout, env=cli_env(), cwd=REPO_ROOT,
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )  # fmt: skip


def json_records(result: subprocess.CompletedProcess[bytes]) -> list[dict[str, Any]]:
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.decode().splitlines()]


def test_help(run: Run, mqtt_exe: Path) -> None:
    result = run([mqtt_exe, "dump", "--help"])
    assert result.returncode == 0
    for option in (
        "--port",
        "--detect",
        "--hex",
        "--raw",
        "--json",
        "--verbose",
        "--stats",
        "--type",
        "--topic",
        "--client",
        "--protocol-version",
    ):
        assert option in result.stdout


def test_json_lines(capture: Path) -> None:
    records = json_records(dump("--json", capture))
    assert [r["type"] for r in records if r["client"] == "sensor-1"] == SESSION_TYPES
    assert [r["type"] for r in records if r["client"] == "sensor-2"] == SESSION_TYPES
    v5 = [r for r in records if r["client"] == "sensor-2" and r["type"] != "PINGREQ"]
    assert all("properties" in r for r in v5)
    publish = next(r for r in records if r["type"] == "PUBLISH")
    for key in (
        "ts",
        "frame",
        "src",
        "dst",
        "flags",
        "remaining_length",
        "qos",
        "retain",
        "dup",
        "packet_id",
        "topic",
        "payload_len",
        "payload_sha256",
    ):
        assert key in publish


def test_default_lines_for_people(capture: Path) -> None:
    result = dump(capture)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    assert len(lines) == 31
    assert "sensor-1 →  CONNECT" in lines[0]
    assert "sensor-1 ←  CONNACK" in lines[1]
    publish = next(line for line in lines if "PUBLISH" in line)
    assert 't/0 q1 id=2 9 B "payload 0"' in publish
    assert "\x1b[" not in result.stdout.decode()  # piped: no colour
    binary = next(line for line in lines if "alarm/1" in line)
    assert "0x 00 ff" in binary


def test_verbose_tree(capture: Path) -> None:
    result = dump("-v", "--client", "sensor-2", "--type", "PUBLISH", capture)
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    assert text.count("PUBLISH") == 3
    for expected in (
        "fixed header: flags 0x2",
        "topic: 't/0'",
        "properties: none",
        "payload (9 bytes)",
        "00000000  70 61 79 6c 6f 61 64 20 30",
        "|payload 0|",
    ):
        assert expected in text


def test_stdin_plain_and_gzip(capture: Path) -> None:
    data = capture.read_bytes()
    expected = json_records(dump("--json", capture))
    assert json_records(dump("--json", "-", stdin=data)) == expected
    assert json_records(dump("--json", "-", stdin=gzip.compress(data))) == expected


def test_gzip_file_detected_by_content(capture: Path, tmp_path: Path) -> None:
    packed = tmp_path / "traffic.dat"
    packed.write_bytes(gzip.compress(capture.read_bytes()))
    assert json_records(dump("--json", packed)) == json_records(dump("--json", capture))


def test_hex_input() -> None:
    hexed = (encode(Connect("hexy")) + encode(Publish("a/b", b"hi", 1, packet_id=3))).hex(" ")
    records = json_records(dump("--json", "--hex", hexed))
    assert [(r["type"], r["offset"], r["ts"], r["src"]) for r in records] == [
        ("CONNECT", 0, None, None), ("PUBLISH", 18, None, None)
    ]  # fmt: skip
    assert records[1]["client"] == "hexy"
    lines = dump("--hex", hexed).stdout.decode().splitlines()
    assert lines[1].startswith("@18 PUBLISH")


def test_raw_stream_from_file_and_stdin(tmp_path: Path) -> None:
    server_side = encode(ConnAck(), 5) + encode(PubAck(1, 0x10), 5)
    path = tmp_path / "server.bin"
    path.write_bytes(server_side)
    as_311 = json_records(dump("--json", "--raw", path))
    assert "error" in as_311[1]  # read as 3.1.1, the 5.0 PUBACK has bytes too many
    as_5 = json_records(dump("--json", "--raw", "-", "--protocol-version", "5", stdin=server_side))
    assert as_5[1]["reason_code"] == 0x10 and "error" not in as_5[1]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--type", "publish"], {"PUBLISH"}),
        (["--type", "PUBACK,PUBREC"], {"PUBACK", "PUBREC"}),
        (["-t", "alarm/+"], {"PUBLISH"}),  # -t is a topic filter, as in every other command
        (["--topic", "alarm/+"], {"PUBLISH"}),
        (["--topic", "t/#", "--type", "SUBSCRIBE"], {"SUBSCRIBE"}),
    ],
)
def test_type_and_topic_filters(capture: Path, args: list[str], expected: set[str]) -> None:
    records = json_records(dump("--json", *args, capture))
    assert records and {r["type"] for r in records} == expected
    if "alarm/+" in args:
        assert [r["topic"] for r in records] == ["alarm/1", "alarm/2", "alarm/3"]


def test_topic_filter_follows_topic_aliases_per_connection_and_direction(tmp_path: Path) -> None:
    def aliased(conv: Conversation, topic: str, from_client: bool = True) -> None:
        alias = Properties(topic_alias=1)
        conv.send(encode(Publish(topic, b"sets", 0, properties=alias), 5), from_client)
        conv.send(encode(Publish("", b"uses", 0, properties=alias), 5), from_client)

    first = Conversation(cport=40001).handshake()
    first.send(encode(Connect("one", protocol_version=5), 5))
    first.send(encode(ConnAck(), 5), False)
    aliased(first, "a/x")
    aliased(first, "b/x", from_client=False)  # the same alias number the other way means another topic
    second = Conversation(cport=40002, ts=first.ts + 10**6).handshake()
    second.send(encode(Connect("two", protocol_version=5), 5))
    second.send(encode(ConnAck(), 5), False)
    aliased(second, "b/y")
    path = tmp_path / "aliases.pcap"
    path.write_bytes(pcap(first.frames() + second.frames()))
    records = json_records(dump("--json", "--topic", "a/#", "--type", "PUBLISH", path))
    assert [(r["client"], r["topic"], r["from_client"]) for r in records] == [("one", "a/x", True), ("one", "", True)]
    records = json_records(dump("--json", "--topic", "b/#", path))
    assert [(r["client"], r["topic"]) for r in records] == [("one", "b/x"), ("one", ""), ("two", "b/y"), ("two", "")]


def test_client_filter_with_globs(capture: Path) -> None:
    records = json_records(dump("--json", "--client", "sensor-*", capture))
    assert {r["client"] for r in records} == {"sensor-1", "sensor-2"}
    assert {r["client"] for r in json_records(dump("--json", "--client", "stuck", capture))} == {"stuck"}


def test_stats(capture: Path) -> None:
    result = dump("--stats", "--quiet", capture)
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    for expected in (
        "Packets by type",
        "PUBLISH",
        "sensor-1",
        "alarm/1",
        "QoS flows left unacknowledged: 2",
        "PUBACK",
        "PUBREL",
        "MQTT connections",
    ):
        assert expected in text
    assert "→" not in text  # --quiet: no packet lines


def test_stats_with_json_go_to_standard_error(capture: Path) -> None:
    result = dump("--json", "--stats", capture)
    assert len(json_records(result)) == 31
    assert "Packets by type" in result.stderr.decode()


def test_ports_and_detection(tmp_path: Path) -> None:
    path = tmp_path / "odd-port.pcap"
    path.write_bytes(pcap(session(Conversation(sport=9999)).frames()))
    assert len(json_records(dump("--json", path))) == 12  # found by its CONNECT
    assert json_records(dump("--json", "--no-detect", path)) == []
    assert len(json_records(dump("--json", "--no-detect", "--port", "9999", path))) == 12


def test_tls_connection_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "tls.pcap"
    path.write_bytes(pcap(Conversation(sport=8883).handshake().send(b"\x16\x03\x01\x00\x01\x01").frames()))
    result = dump(path)
    assert "TLS-encrypted connection: not decoded" in result.stdout.decode()


def test_an_explicit_port_beats_the_default_tls_port(tmp_path: Path) -> None:
    path = tmp_path / "plain-8883.pcap"
    path.write_bytes(pcap(session(Conversation(sport=8883)).frames()))
    assert [r["type"] for r in json_records(dump("--json", path))] == ["MALFORMED"]  # 8883 is TLS by default
    assert [r["type"] for r in json_records(dump("--json", "-p", "8883", path))] == SESSION_TYPES
    assert [r["type"] for r in json_records(dump("--json", "-p", "8883", "--tls-port", "8884", path))] == SESSION_TYPES
    result = dump("--json", "-p", "8883", "--tls-port", "8883", path)
    assert result.returncode == 2
    assert "port 8883 given as both --port and --tls-port" in one_line_error(result)


def test_unsupported_link_type_is_said(tmp_path: Path) -> None:
    frames = session(Conversation()).frames()
    wifi = tmp_path / "wifi.pcap"
    wifi.write_bytes(pcap(frames, 105))  # IEEE 802.11: nothing in it can be read
    result = dump(wifi)
    assert result.returncode == 1 and result.stdout == b""
    error = one_line_error(result)
    assert "link type 105 (IEEE 802.11) is not supported" in error and f"all {len(frames)} frames skipped" in error
    mixed = tmp_path / "mixed.pcapng"
    mixed.write_bytes(pcapng([(0, ts, f) for ts, f in frames] + [(1, ts, f) for ts, f in frames[:3]],
                             [Interface(ETHERNET), Interface(105)]))  # fmt: skip
    result = dump("--json", mixed)
    assert [r["type"] for r in json_records(result)] == SESSION_TYPES
    assert result.stderr.decode() == (
        f"mqtt: warning: link type 105 (IEEE 802.11) is not supported: 3 of {len(frames) + 3} frames skipped\n"
    )


def test_control_characters_are_escaped_for_terminals(tmp_path: Path) -> None:
    conv = Conversation().handshake()
    conv.send(encode(Connect("evil\x1b[31m")))
    conv.send(encode(ConnAck()), False)
    conv.send(encode(Publish("t/\x1b]0;title\x07\nnext", b"x", 1, packet_id=1)))
    path = tmp_path / "escapes.pcap"
    path.write_bytes(pcap(conv.frames()))
    for args in ([], ["-v"], ["--quiet", "--stats"]):
        out = dump(*args, path).stdout.decode()
        assert "\x1b" not in out and "\x07" not in out, args
        assert "evil\\x1b[31m" in out and "t/\\x1b]0;title\\x07\\nnext" in out, args
    assert len(dump(path).stdout.decode().splitlines()) == 3  # one line per packet, the newline escaped too
    records = json_records(dump("--json", path))  # JSON escapes them its own way, the values are kept
    assert records[0]["client_id"] == "evil\x1b[31m" and records[2]["topic"] == "t/\x1b]0;title\x07\nnext"


# --- errors ------------------------------------------------------------------------------------------------


def one_line_error(result: subprocess.CompletedProcess[bytes]) -> str:
    err = result.stderr.decode()
    assert err.startswith("mqtt: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


def test_not_a_capture_exits_3(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    result = dump(path)
    assert result.returncode == 3
    assert "is not a capture file" in one_line_error(result) and "--raw" in result.stderr.decode()


def test_missing_file_exits_1(tmp_path: Path) -> None:
    result = dump(tmp_path / "nope.pcap")
    assert result.returncode == 1
    assert "No such file or directory" in one_line_error(result)


def test_truncated_capture_decodes_what_it_can_then_exits_1(capture: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(capture.read_bytes()[:-30])
    result = dump("--json", cut)
    assert result.returncode == 1
    assert "is truncated" in one_line_error(result)
    records = [json.loads(line) for line in result.stdout.decode().splitlines()]
    assert records == json_records(dump("--json", capture))[:30]  # all but the PUBACK in the last, cut frame


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "no input"),
        (["x.pcap", "--hex", "00"], "FILE and --hex together"),
        (["--hex", "zz"], "--hex: 'z' is not a hex digit"),
        (["--hex", "0"], "odd number of hex digits"),
        (["--hex", "00", "--topic", "a/#/b"], "--topic 'a/#/b'"),
        (["--hex", "00", "--type", "PUBLSH"], "'PUBLSH' is not a packet type"),
        (["--hex", "00", "--protocol-version", "6"], "--protocol-version '6'"),
        (["--hex", "00", "--port", "70000"], "port 70000 is outside 1..65535"),
    ],
)
def test_usage_errors_exit_2(args: list[str], message: str) -> None:
    result = dump(*args) if args else dump("--json")
    assert result.returncode == 2
    assert message in one_line_error(result)


def test_closed_output_is_not_an_error(capture: Path) -> None:
    big = capture.parent / "big.pcap"
    frames = []
    for n in range(60):
        frames += session(Conversation(cport=41000 + n, ts=1_700_000_000_000_000_000 + n * 10**9)).frames()
    big.write_bytes(pcap(frames))
    proc = subprocess.Popen(
        [*MQTT, "dump", str(big)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(), stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0
    assert b"Traceback" not in err and b"Broken pipe" not in err


@pytest.mark.parametrize("json_output", [False, True], ids=["lines", "json"])
def test_live_pipe_shows_packets_as_they_come(json_output: bool) -> None:
    """`tcpdump -U -w - | mqtt dump -`: each packet is shown before the capture ends."""
    conv = session(Conversation())
    data = pcap(conv.frames())
    first_packet_end = len(pcap(conv.frames()[:4]))  # the pcap header and the frames up to the CONNECT
    proc = subprocess.Popen(
        [*MQTT, "dump", *(["--json"] if json_output else []), "-"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(),
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(data[:first_packet_end])
        proc.stdin.flush()
        # Without read1 and per-record flushes, nothing would come before the end: wait, but not for ever.
        ready, _, _ = select.select([proc.stdout], [], [], 20)
        assert ready, "no output while the capture is still open"
        assert b"CONNECT" in proc.stdout.readline()
        proc.stdin.write(data[first_packet_end:])
        proc.stdin.close()
        rest = proc.stdout.read()
        assert rest.count(b"\n") == 11
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()


def test_progress_bar_on_a_terminal_for_a_large_capture(tmp_path: Path) -> None:
    """stderr on a terminal, stdout piped, a capture of 8 MiB or more: a progress bar on stderr only."""
    import os
    import pty

    conv = Conversation(cport=40010).handshake()
    conv.send(encode(Connect("big")))
    for i in range(160):
        conv.send(encode(Publish("bulk", bytes(60_000), 0)) if i else encode(Publish("bulk", b"first")))
    path = tmp_path / "big.pcap"
    path.write_bytes(pcap(conv.frames()))
    assert path.stat().st_size >= 8 << 20
    leader, follower = pty.openpty()
    try:
        env = {**cli_env(), "TERM": "xterm", "COLUMNS": "100"}
        env.pop("NO_COLOR", None)
        done = subprocess.run(
            [*MQTT, "dump", "--json", str(path)],
            stdout=subprocess.PIPE, stderr=follower, stdin=subprocess.DEVNULL, timeout=60, env=env, cwd=REPO_ROOT,
        )  # fmt: skip
        os.close(follower)
        follower = -1
        shown = b""
        while select.select([leader], [], [], 0.5)[0]:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        if follower != -1:
            os.close(follower)
        os.close(leader)
    assert done.returncode == 0
    assert len(done.stdout.splitlines()) == 161  # CONNECT + 160 PUBLISH: the records go to stdout untouched
    text = shown.decode(errors="replace")
    assert "big.pcap" in text and "MB" in text  # rich's bar: the file's name and bytes read


def test_no_progress_bar_when_stderr_is_not_a_terminal(capture: Path) -> None:
    result = dump("--json", capture)
    assert result.returncode == 0 and result.stderr == b""


def test_stats_written_to_a_pipe_or_file_are_not_cut() -> None:
    """rich cuts a table to 80 columns when its output is no terminal: a long topic came out as `plant/xxx…`."""
    topic = "plant/" + "x" * 120 + "/temp"
    packet = encode(Publish(topic, b"21.5"), 4).hex()
    for stderr in (False, True):  # --stats go to standard error with --json
        result = subprocess.run(
            [sys.executable, "-m", "mqtt_cli", "dump", "--stats", *(["--json"] if stderr else []), "--hex", packet],
            capture_output=True, text=True, timeout=60, env=cli_env(COLUMNS=""), cwd=REPO_ROOT,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        text = result.stderr if stderr else result.stdout
        assert any(line.startswith(topic + " ") for line in text.splitlines()), text
        assert "…" not in text
