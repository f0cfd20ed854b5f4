"""The bridge's forwarding path in memory: CPU per QoS 1 message with no sockets, brokers or other processes.

    .venv/bin/python benchmarks/bridge_path.py [--count 100000] [--batch 64] [--version 4|5] [--reps 5] [--profile]

benchmarks/bridge.py measures the whole chain (two mosquittos, a publisher, a subscriber and the bridge on two
cores), where every process's CPU counts and the figures move by 10% from run to run. This isolates what our
code does per message, repeatably: a `Bridge` with both clients connected (CONNACK fed in), `--batch` QoS 1
PUBLISH packets at a time fed to the local client as if read from its socket, the bridge's observer forwarding
them to the remote client, the remote client's output acknowledged with one PUBACK per PUBLISH, and the
resulting PUBACKs to the local broker taken from the local client. Prints microseconds per message (best and
median of --reps); --profile prints cProfile's top functions for one more run.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mqtt_cli.core.bridge import parse_rule
from mqtt_cli.core.encoder import encode
from mqtt_cli.core.packets import Publish
from mqtt_cli.net.bridge import LOCAL, REMOTE, Bridge, BridgeConfig, SideConfig
from mqtt_cli.net.client import Client
from mqtt_cli.net.transports import Endpoint


async def one_run(count: int, batch: int, version: int, profile: cProfile.Profile | None) -> float:
    """Seconds per message for `count` messages."""

    def side() -> SideConfig:
        return SideConfig(endpoints=(Endpoint(),), client_id="bench", version=version)

    bridge = Bridge(
        BridgeConfig(name="bench", local=side(), remote=side(), rules=[parse_rule("bench/# out 1")]),
        log=lambda _line: None,
    )
    bridge.clients = [Client(bridge._settings(LOCAL)), Client(bridge._settings(REMOTE))]
    for client in bridge.clients:
        client.conn.connect()
        client.conn.data_to_send()
        client.conn.receive_data(b"\x20\x03\x00\x00\x00" if version == 5 else b"\x20\x02\x00\x00", 0.0)
        await client._dispatch(client.conn.events())
    local, remote = bridge.clients
    packets = [
        encode(Publish("bench/0", b"%011d " % i + b"x" * 52, 1, False, False, i % 65535 + 1), version)
        for i in range(count)
    ]
    chunks = [b"".join(packets[i : i + batch]) for i in range(0, count, batch)]
    if profile is not None:
        profile.enable()
    start = time.perf_counter()
    for chunk in chunks:
        local.conn.receive_data(chunk, 1.0)
        await local._dispatch(local.conn.events())
        out = remote.conn.data_to_send(1.0)
        # PUBLISH packets to the remote carry identifiers given in order: acknowledge each one.
        sent = out.count(b"bench/0")
        last = remote.conn._flows._next_id - 1
        pids = [(last - sent + 1 + k - 1) % 65535 + 1 for k in range(sent)]
        remote.conn.receive_data(b"".join(b"\x40\x02" + pid.to_bytes(2, "big") for pid in pids), 1.0)
        await remote._dispatch(remote.conn.events())
        local.conn.data_to_send(1.0)
    seconds = time.perf_counter() - start
    if profile is not None:
        profile.disable()
    counters = bridge.counters
    if counters.forwarded[LOCAL] != count or counters.acknowledged[LOCAL] != count or remote.conn.inflight:
        raise RuntimeError(f"not every message went through: {counters}, {remote.conn.inflight} in flight")
    return seconds / count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=64, help="PUBLISH packets per read")
    parser.add_argument("--version", type=int, choices=(4, 5), default=4)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--quick", action="store_true", help="2,000 messages, one rep (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.count, args.reps = 2_000, 1
    runs = [trio.run(one_run, args.count, args.batch, args.version, None) * 1e6 for _ in range(args.reps)]
    print(
        f"bridge forwarding path, QoS 1, MQTT {'5.0' if args.version == 5 else '3.1.1'}, {args.count:,} messages"
        f" in reads of {args.batch}: best {min(runs):.2f} µs/message, median {statistics.median(runs):.2f}"
    )
    if args.profile:
        profile = cProfile.Profile()
        trio.run(one_run, args.count, args.batch, args.version, profile)
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
