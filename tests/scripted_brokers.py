"""Scripted "brokers" on real sockets, for orderings a real broker produces only by chance of timing."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field

from mqtt_cli.core.encoder import encode
from mqtt_cli.core.packets import ConnAck, Connect, PingReq, PingResp, PubAck, PubComp, Publish, PubRec, PubRel
from mqtt_cli.core.properties import Properties
from mqtt_cli.core.reader import PacketReader


def queue_before_suback(n: int, topic: str = "q/x") -> int:
    """Listens on 127.0.0.1 for one 3.1.1 client; answers its CONNECT with a session present and `n` QoS 0
    messages (payloads "0".."n-1") before its SUBSCRIBE is answered, as a resumed session's queue can come.
    Returns the port."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with server:
            conn, _ = server.accept()
        with conn:
            conn.recv(65536)  # CONNECT
            conn.sendall(b"\x20\x02\x01\x00")  # CONNACK, session present
            conn.sendall(b"".join(encode(Publish(topic, b"%d" % i), 4) for i in range(n)))
            data = b""
            while not data.startswith(b"\x82"):  # SUBSCRIBE
                data = conn.recv(65536)
                if not data:
                    return
            pid = data[2:4] if data[1] < 128 else data[3:5]
            conn.sendall(b"\x90\x03" + pid + b"\x00")  # SUBACK, QoS 0 granted
            while conn.recv(65536):  # until the client leaves
                pass

    threading.Thread(target=serve, daemon=True).start()
    return int(server.getsockname()[1])


@dataclass
class Seen:
    connection: int
    packet_id: int
    dup: bool = False
    payload: bytes | None = None  # None: a PUBREL


@dataclass
class QoS2Remote:
    """Listens on 127.0.0.1 for a 5.0 client (a bridge), one connection after another: CONNACK (session present
    from the second connection on, `receive_maximum`), PUBACK for QoS 1 (0x97 with `refuse_qos1`), PUBREC for
    every QoS 2 PUBLISH, PUBCOMP for the first `complete` PUBRELs only (a remote that holds flows open, as one
    does while the bridge is killed between PUBREL and PUBCOMP). Records what it is sent."""

    complete: int
    receive_maximum: int
    refuse_qos1: bool = False  # answer QoS 1 with PUBACK 0x97 (quota exceeded)
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
                return encode(ConnAck(self.connections > 1, 0, Properties(receive_maximum=self.receive_maximum)), 5)
            if isinstance(packet, Publish):
                assert packet.packet_id is not None
                self.seen.append(Seen(self.connections, packet.packet_id, packet.dup, packet.payload))
                if packet.qos == 1:
                    return encode(PubAck(packet.packet_id, 0x97 if self.refuse_qos1 else 0), 5)
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
