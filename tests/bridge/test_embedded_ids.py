"""An embedded bridge re-sends, after a kill -9 of our broker, each message under the packet identifier the remote
broker already holds it by, and a QoS 2 message whose PUBREC came as a PUBREL (MQTT 4.4: a resumed session
re-sends with the original identifiers).

Under any other identifier the remote takes the re-send for a new message, and a QoS 2 message it had PUBRECed
stays in its session for good, awaiting a PUBREL that never comes, holding one of the receive-maximum slots: after
a few restarts mosquitto refused new messages with 0x97 (quota exceeded), and the bridge lost them. The remote here
is a scripted one on a real socket, so the identifiers it saw can be compared: it completes the first flows, then
sends PUBREC and withholds PUBCOMP, as a remote does while the bridge is killed between the two.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from mqtt_cli.core.encoder import encode
from mqtt_cli.core.packets import ConnAck, Connect, PingReq, PingResp, PubAck, PubComp, Publish, PubRec, PubRel
from mqtt_cli.core.properties import Properties
from mqtt_cli.core.reader import PacketReader

from .test_embedded import log_of, start_with_bridges, wait_log

pytestmark = pytest.mark.interop

RECEIVE_MAXIMUM = 20


@dataclass
class Seen:
    connection: int
    packet_id: int
    dup: bool = False
    payload: bytes | None = None  # None: a PUBREL


@dataclass
class ScriptedRemote:
    """A 5.0 broker for one bridge: CONNACK (session present from the second connection on), PUBREC for every
    QoS 2 PUBLISH, PUBCOMP for the first `complete` PUBRELs only. Records what it is sent."""

    complete: int
    listener: socket.socket = field(default_factory=socket.socket)
    seen: list[Seen] = field(default_factory=list)
    connections: int = 0
    completed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> int:
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(4)
        self.listener.settimeout(0.2)
        threading.Thread(target=self._accept, daemon=True).start()
        return self.listener.getsockname()[1]

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        reader = PacketReader(None)
        sock.settimeout(30)
        with sock:
            while True:
                try:
                    data = sock.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                out = b""
                for packet in reader.feed(data):
                    out += self._answer(packet)
                if out:
                    sock.sendall(out)

    def _answer(self, packet: object) -> bytes:
        with self.lock:
            if isinstance(packet, Connect):
                self.connections += 1
                return encode(
                    ConnAck(self.connections > 1, 0, Properties(receive_maximum=RECEIVE_MAXIMUM)), 5
                )
            if isinstance(packet, Publish):
                assert packet.packet_id is not None
                self.seen.append(Seen(self.connections, packet.packet_id, packet.dup, packet.payload))
                if packet.qos == 1:
                    return encode(PubAck(packet.packet_id), 5)
                return encode(PubRec(packet.packet_id), 5)
            if isinstance(packet, PubRel):
                self.seen.append(Seen(self.connections, packet.packet_id))
                if self.completed < self.complete:
                    self.completed += 1
                    return encode(PubComp(packet.packet_id), 5)
                return b""
            if isinstance(packet, PingReq):
                return encode(PingResp(), 5)
            return b""

    def published(self, connection: int) -> dict[bytes, int]:
        with self.lock:
            return {s.payload: s.packet_id for s in self.seen if s.connection == connection and s.payload}

    def released(self, connection: int) -> set[int]:
        with self.lock:
            return {s.packet_id for s in self.seen if s.connection == connection and s.payload is None}


def publish_qos2(port: int, n: int) -> None:
    c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="producer")
    c.connect("127.0.0.1", port)
    c.loop_start()
    infos = [c.publish("q2/x", b"2:%d" % i, 2) for i in range(n)]
    for info in infos:
        info.wait_for_publish(timeout=20)
    c.loop_stop()
    c.disconnect()


def wait_for(what: str, check: object, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.slow
def test_a_restart_resends_under_the_identifiers_the_remote_holds(tmp_path: Path) -> None:
    complete, n = 10, 40
    remote = ScriptedRemote(complete)
    port = remote.start()
    try:
        text = (
            f'[[bridge]]\nname = "cloud"\ntopics = [\'q2/# out 2 "" r/\']\nrestart_timeout = [0.1, 0.5]\n'
            f'[bridge.remote]\nurl = ["mqtt://127.0.0.1:{port}"]\n'
        )
        ours = start_with_bridges(tmp_path / "ours", text, "--persistence", str(tmp_path / "ours.db"))
        wait_log(ours, "bridge cloud: connected to")
        publish_qos2(ours.port, n)  # each PUBREC'd by our broker: stored, the bridge's to deliver
        # The first `complete` flows end; then as many as the remote's receive maximum wait for PUBCOMP.
        wait_for("the remote's window to fill", lambda: len(remote.published(1)) >= complete + RECEIVE_MAXIMUM)
        time.sleep(0.5)  # what the bridge's store commits for them (it commits within milliseconds)
        before = remote.published(1)
        released_before = remote.released(1)
        open_flows = {p: pid for p, pid in before.items() if int(p[2:]) >= complete}
        assert len(open_flows) == RECEIVE_MAXIMUM, sorted(before)
        ours.kill()
        assert ours.proc is not None
        ours.proc = ours.start()
        # After the restart every open flow is re-sent: PUBLISH again, or PUBREL.
        wait_for(
            "the re-sends",
            lambda: all(p in remote.published(2) or pid in remote.released(2) for p, pid in open_flows.items()),
            timeout=30,
        )
        time.sleep(0.3)
        after = remote.published(2)
        released = remote.released(2)
        moved = {
            p.decode(): (pid, after[p]) for p, pid in open_flows.items() if p in after and after[p] != pid
        }
        assert moved == {}, f"re-sent under other identifiers (before, after): {moved}\n{log_of(ours)[-2000:]}"
        lost = [p for p, pid in open_flows.items() if p not in after and pid not in released]
        assert lost == [], lost
        # The PUBREL of each went only once the store held its PUBREC, so what the remote had released is released
        # again, never published again (a remote that had completed the flow would take it for a new message).
        assert set(open_flows.values()) <= released_before
        republished = sorted(p.decode() for p, pid in open_flows.items() if pid in released_before and p in after)
        assert republished == [], republished
        # Nothing the remote holds is named by a new message: no identifier of an open flow went to another one.
        reused = {p.decode(): pid for p, pid in after.items() if p not in open_flows and pid in open_flows.values()}
        assert reused == {}, reused
    finally:
        remote.close()
