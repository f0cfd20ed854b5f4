"""The least a bridge can do, as a yardstick for benchmarks/bridge.py (`--yardstick`): not a bridge to use.

    python benchmarks/_relay_yardstick.py LOCAL_PORT REMOTE_PORT QOS

One thread, blocking sockets and a selector, no framework: connects to both brokers on 127.0.0.1 as MQTT 3.1.1
clients with the bridge flag (persistent sessions), subscribes to bench/# at QOS (0 or 1) on the local broker and
forwards every PUBLISH to the remote one, a QoS 1 message under an identifier of its own, acknowledged to the
local broker when the remote one acknowledges it (end to end, as `mqtt bridge`). It parses only what it must, in
one pass over each read, and writes each read's forwards with one send. No reconnects, no checks, no limits: a
lower bound on what forwarding costs in Python, to tell the bridge's own cost from what the setup allows.
"""

from __future__ import annotations

import selectors
import signal
import socket
import sys


def connect(port: int, client_id: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # CONNECT: protocol level 4 | 0x80 (bridge), clean session off, keepalive 60.
    body = b"\x00\x04MQTT\x84\x00\x00\x3c" + len(client_id).to_bytes(2, "big") + client_id
    sock.sendall(b"\x10" + bytes([len(body)]) + body)
    if sock.recv(4)[:2] != b"\x20\x02":
        raise SystemExit(f"relay_yardstick: no CONNACK from port {port}")
    return sock


def main() -> None:
    local_port, remote_port, qos = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    local = connect(local_port, b"yardstick-local")
    remote = connect(remote_port, b"yardstick-remote")
    local.sendall(b"\x82\x0c\x00\x01\x00\x07bench/#" + bytes([qos]))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    selector = selectors.DefaultSelector()
    selector.register(local, selectors.EVENT_READ, True)
    selector.register(remote, selectors.EVENT_READ, False)
    from_local = from_remote = b""
    inflight: dict[int, bytes] = {}  # our identifier -> the local broker's
    next_id = 1
    while True:
        for key, _ in selector.select():
            if key.data:
                data = local.recv(1 << 18)
                if not data:
                    return
                data = from_local + data
                out = []
                pos, n = 0, len(data)
                while pos + 2 <= n:
                    first = data[pos]
                    length, mul, p = 0, 1, pos + 1
                    while p < n:
                        byte = data[p]
                        p += 1
                        length += (byte & 127) * mul
                        mul <<= 7
                        if byte < 128:
                            break
                    else:
                        break  # the length is not all here yet
                    end = p + length
                    if end > n:
                        break
                    if first & 0xF0 == 0x30:
                        if first & 0x06:  # QoS 1: our identifier instead of the local broker's
                            q = p + 2 + ((data[p] << 8) | data[p + 1])
                            inflight[next_id] = data[q : q + 2]
                            out.append(data[pos:q] + next_id.to_bytes(2, "big") + data[q + 2 : end])
                            next_id = next_id + 1 if next_id < 65535 else 1
                        else:
                            out.append(data[pos:end])
                    pos = end
                from_local = data[pos:]
                if out:
                    remote.sendall(b"".join(out))
            else:
                data = remote.recv(1 << 18)
                if not data:
                    return
                data = from_remote + data
                acks = []
                pos, n = 0, len(data)
                while pos + 4 <= n and data[pos] == 0x40:
                    source = inflight.pop((data[pos + 2] << 8) | data[pos + 3], None)
                    if source is not None:
                        acks.append(b"\x40\x02" + source)
                    pos += 4
                from_remote = data[pos:]
                if acks:
                    local.sendall(b"".join(acks))


if __name__ == "__main__":
    main()
