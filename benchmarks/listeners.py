"""The broker's transports side by side: the same QoS 0 and QoS 1 stream over mqtt://, ws:// and unix://.

    .venv/bin/python benchmarks/listeners.py [--reps 3] [--count 100000] [--size 64]

One `mqtt serve` (pinned to CPU 0 when taskset exists) with the three listeners; one process of ours (CPU 1) runs
a subscriber and a publisher over the same transport, both with our trio client, and times how long the
subscriber takes to receive `count` messages. The clients cost the same on every transport but the framing, so
the differences are the broker's and the client's WebSocket framing. Prints medians: messages per second received,
and the broker's CPU time per message delivered (user + system, from /proc), which isolates the broker's share.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mqtt_cli.core.packets import Subscription  # noqa: E402
from mqtt_cli.net.client import ClientSettings, open_client  # noqa: E402
from mqtt_cli.net.transports import Endpoint  # noqa: E402


async def one_run(endpoint: Endpoint, count: int, size: int, qos: int) -> tuple[float, int]:
    """Messages received per second, and how many were dropped (QoS 0 only)."""
    payload = b"x" * size
    with trio.fail_after(120):
        async with (
            open_client(ClientSettings(endpoint=endpoint, client_id="bench-sub", version=5)) as sub,
            open_client(ClientSettings(endpoint=endpoint, client_id="bench-pub", version=5)) as pub,
        ):
            await sub.subscribe([Subscription("bench/t", qos), Subscription("bench/end", 1)])
            done = trio.Event()
            started = time.perf_counter()

            received = 0

            async def receive() -> None:
                nonlocal received
                while True:
                    message = await sub.messages.receive()
                    if message.topic == "bench/end":
                        break
                    received += 1
                done.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(receive)
                for _ in range(count):
                    await pub.publish("bench/t", payload, qos)
                # QoS 0 may be dropped for a subscriber that falls behind: a QoS 1 marker ends the run.
                await pub.publish("bench/end", b"", 1)
                await done.wait()
            return received / (time.perf_counter() - started), count - received


def paho_ingest(transport: str, port: int, count: int, size: int) -> None:
    """paho-mqtt publishes `count` QoS 0 messages to nobody, then a QoS 1 one (its PUBACK: all were read).
    paho writes each packet by itself, so over WebSocket each is a frame of its own: the broker's worst case."""
    import paho.mqtt.client as paho

    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=f"bench-paho-{transport}", transport=transport)
    client.max_queued_messages_set(0)
    client.connect("127.0.0.1", port, keepalive=60)
    client.loop_start()
    try:
        payload = b"x" * size
        for _ in range(count):
            client.publish("bench/nobody", payload, 0)
        client.publish("bench/nobody", b"", 1).wait_for_publish(120)
    finally:
        client.disconnect()
        client.loop_stop()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="one rep of 2,000 messages (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.reps, args.count = 1, 2_000
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    with tempfile.TemporaryDirectory() as tmp:
        ready = Path(tmp) / "ready.json"
        sock = Path(tmp) / "mqtt.sock"
        serve = [sys.executable, "-m", "mqtt_cli", "serve", "--ready-file", str(ready), "--sys-interval", "0"]
        serve += ["--max-queued-messages", "0", "--max-inflight", "0"]
        serve += ["--listen", "mqtt://127.0.0.1:0", "--listen", "ws://127.0.0.1:0", "--listen", f"unix://{sock}"]
        broker = subprocess.Popen([*pin, *serve], cwd=ROOT, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 20
            while not ready.exists():
                if broker.poll() is not None or time.monotonic() > deadline:
                    print("mqtt serve did not start", file=sys.stderr)
                    return 1
                time.sleep(0.05)
            bound = {b["scheme"]: b for b in json.loads(ready.read_text())["listeners"]}
            endpoints = {
                "mqtt": Endpoint("mqtt", "127.0.0.1", bound["mqtt"]["port"]),
                "ws": Endpoint("ws", "127.0.0.1", bound["ws"]["port"], "/mqtt"),
                "unix": Endpoint("unix", "", 0, str(sock)),
            }
            print(f"{args.count} messages of {args.size} bytes, median of {args.reps} (messages/s received)")
            for qos in (0, 1):
                rates: dict[str, list[float]] = {name: [] for name in endpoints}
                cpu: dict[str, list[float]] = {name: [] for name in endpoints}
                dropped = 0
                for _ in range(args.reps):  # interleaved, so each transport sees the same machine
                    for name, endpoint in endpoints.items():
                        before = cpu_seconds(broker.pid)
                        rate, lost = trio.run(one_run, endpoint, args.count, args.size, qos)
                        cpu[name].append((cpu_seconds(broker.pid) - before) / (args.count - lost) * 1e6)
                        rates[name].append(rate)
                        dropped += lost
                tcp = statistics.median(rates["mqtt"])
                medians = {name: statistics.median(r) for name, r in rates.items()}
                line = "  ".join(f"{name} {m:>9,.0f} ({m / tcp:.2f})" for name, m in medians.items())
                print(f"QoS {qos}: {line}" + (f"  ({dropped} dropped in all)" if dropped else ""))
                line = "  ".join(f"{name} {statistics.median(c):5.1f}" for name, c in cpu.items())
                print(f"       broker CPU per message, us: {line}")
            per_message: dict[str, list[float]] = {"tcp": [], "websockets": []}
            for _ in range(args.reps):
                for transport, port in (("tcp", bound["mqtt"]["port"]), ("websockets", bound["ws"]["port"])):
                    before = cpu_seconds(broker.pid)
                    paho_ingest(transport, port, args.count, args.size)
                    per_message[transport].append((cpu_seconds(broker.pid) - before) / args.count * 1e6)
            line = "  ".join(f"{name} {statistics.median(c):5.1f}" for name, c in per_message.items())
            print(f"paho-mqtt publishing, one packet per write (per frame over ws), broker CPU per message, us: {line}")
        finally:
            broker.terminate()
            broker.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
