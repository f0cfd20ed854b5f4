"""Scripted "brokers" on real sockets, for orderings a real broker produces only by chance of timing."""

from __future__ import annotations

import socket
import threading

from mqtt_cli.core.encoder import encode
from mqtt_cli.core.packets import Publish


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
