"""`mqtt dump --json` against tshark on the same synthetic capture, and its memory on a large one.

    .venv/bin/python benchmarks/dump.py [--packets 400000] [--tshark-packets 40000] [--big-mb 2048] [--check]
                                        [--baseline OTHER_CHECKOUT] [--repeat 3]

1. Writes a pcap of --packets small PUBLISH packets (QoS 0 and 1, 100 client connections to port 1883, topics
   from a set of 100, 16-64 byte payloads, one packet per frame, the broker's ACK every other frame and its
   PUBACKs, as tcpdump records on loopback), then times `mqtt dump --json FILE > /dev/null` on all of it and
   `tshark -r FILE -d tcp.port==1883,mqtt -T json > /dev/null` on the first --tshark-packets frames' worth
   (tshark is slow: a slice keeps the run short; rates are per second either way). Prints packets/s of
   each and the ratio (target: >= 15, issue #20), by wall time and by CPU time (user + system: on a shared
   machine the CPU time moves less with the load than the wall time). Each tool runs --repeat times,
   interleaved; the best run of each counts. `mqtt dump` is this checkout's (PYTHONPATH), not an installed one;
   --baseline runs another checkout's the same way beside it (before/after a change in the same run).
2. Writes a capture of --big-mb MB of large PUBLISH packets (64 KiB each, split into 1448-byte segments) and
   reports the peak RSS of `mqtt dump --json` on it beside the one on the small capture: memory stays flat,
   since the capture is streamed.

--check exits 1 when the ratio (wall time) is below 15.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mqtt_cli.core import Connect, PubAck, Publish, encode  # noqa: E402
from tests.capture.pcapwriter import ACK, PSH, SYN, ethernet, ipv4, tcp  # noqa: E402

PORT = 1883
TARGET = 15.0


def _record(ts: int, frame: bytes) -> bytes:
    sec, frac = divmod(ts, 1_000_000_000)
    return struct.pack("<IIII", sec, frac // 1000, len(frame), len(frame)) + frame


def _segment(ts: int, client: int, to_server: bool, seq: int, ack: int, flags: int, payload: bytes) -> bytes:
    cport = 40000 + client
    src, dst, sp, dp = ("127.0.0.1", "127.0.0.1", cport, PORT) if to_server else ("127.0.0.1", "127.0.0.1", PORT, cport)
    return _record(ts, ethernet(ipv4(src, dst, tcp(sp, dp, seq, ack, flags, payload))))


def write_small(path: Path, packets: int, clients: int = 100) -> tuple[int, int]:
    """The capture of small PUBLISH packets; returns (MQTT packets, frames) written."""
    rng = random.Random(7)
    topics = [f"sensors/device{i:02d}/temp".encode() for i in range(100)]
    cseq = [1000] * clients
    sseq = [9000] * clients
    pids = [0] * clients
    ts = 1_700_000_000_000_000_000
    frames = mqtt_packets = 0
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        buf: list[bytes] = []
        for c in range(clients):  # handshakes and CONNECTs
            ts += 1000
            buf.append(_segment(ts, c, True, cseq[c] - 1, 0, SYN, b""))
            buf.append(_segment(ts, c, False, sseq[c] - 1, cseq[c], SYN | ACK, b""))
            connect = encode(Connect(f"bench-{c}", keepalive=60))
            buf.append(_segment(ts, c, True, cseq[c], sseq[c], PSH | ACK, connect))
            cseq[c] += len(connect)
            connack = b"\x20\x02\x00\x00"
            buf.append(_segment(ts, c, False, sseq[c], cseq[c], PSH | ACK, connack))
            sseq[c] += len(connack)
            frames += 4
            mqtt_packets += 2
        while mqtt_packets < packets:
            c = rng.randrange(clients)
            ts += 2000
            qos = 1 if rng.random() < 0.3 else 0
            pid = None
            if qos:
                pids[c] = pids[c] % 65535 + 1
                pid = pids[c]
            payload = b"%d" % rng.getrandbits(64) * rng.randint(1, 3)
            data = encode(Publish(topics[rng.randrange(100)].decode(), payload[:64], qos, packet_id=pid))
            buf.append(_segment(ts, c, True, cseq[c], sseq[c], PSH | ACK, data))
            cseq[c] += len(data)
            frames += 1
            mqtt_packets += 1
            if qos:
                ack = encode(PubAck(pid))
                buf.append(_segment(ts + 50, c, False, sseq[c], cseq[c], PSH | ACK, ack))
                sseq[c] += len(ack)
                frames += 1
                mqtt_packets += 1
            elif frames % 2 == 0:
                buf.append(_segment(ts + 50, c, False, sseq[c], cseq[c], ACK, b""))
                frames += 1
            if len(buf) > 10000:
                out.write(b"".join(buf))
                buf.clear()
        out.write(b"".join(buf))
    return mqtt_packets, frames


def write_big(path: Path, megabytes: int) -> int:
    """A capture of 64 KiB PUBLISH packets in 1448-byte segments, about `megabytes` MB; returns packets."""
    payload = bytes(range(256)) * 256
    packet = encode(Publish("big/blob", payload, 0))
    pieces = [packet[at : at + 1448] for at in range(0, len(packet), 1448)]
    seq = 1000
    ts = 1_700_000_000_000_000_000
    limit = megabytes * 1_000_000
    count = 0
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        out.write(_segment(ts, 0, True, seq - 1, 0, SYN, b""))
        written = 0
        while written < limit:
            chunk = []
            for piece in pieces:
                ts += 1000
                chunk.append(_segment(ts, 0, True, seq, 9000, ACK, piece))
                seq = (seq + len(piece)) & 0xFFFFFFFF
            block = b"".join(chunk)
            out.write(block)
            written += len(block)
            count += 1
    return count


class Run(NamedTuple):
    seconds: float  # wall
    cpu: float  # user + system
    rss_kib: int  # peak resident set


def measure(cmd: list[str], env: dict[str, str] | None = None) -> Run:
    """Wall and CPU seconds and peak RSS of `cmd`, measured by a wrapper process that runs only it."""
    code = (
        "import resource, subprocess, sys, time, os\n"
        "t = time.perf_counter()\n"
        "rc = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(time.perf_counter() - t, u.ru_utime + u.ru_stime, u.ru_maxrss, rc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, *cmd], capture_output=True, text=True, check=True, env=env).stdout
    seconds, cpu, rss, rc = out.split()
    if rc != "0":
        raise SystemExit(f"{' '.join(cmd)} failed ({rc})")
    return Run(float(seconds), float(cpu), int(rss))


def dump_command(checkout: Path, path: Path) -> tuple[list[str], dict[str, str]]:
    """`mqtt dump --json path` of the checkout `checkout` (its mqtt_cli first on the path; -P: not the one of
    the current directory, which `-m` would otherwise put first)."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    return [sys.executable, "-P", "-m", "mqtt_cli", "dump", "--json", str(path)], env


def best(runs: list[Run]) -> Run:
    return Run(min(r.seconds for r in runs), min(r.cpu for r in runs), max(r.rss_kib for r in runs))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--packets", type=int, default=400_000)
    parser.add_argument("--tshark-packets", type=int, default=40_000)
    parser.add_argument("--big-mb", type=int, default=2048, help="size of the large capture (0: skip it)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each tool (best kept)")
    parser.add_argument("--baseline", type=Path, help="another checkout of mqtt-cli to run beside this one")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--quick", action="store_true", help="5,000 packets, no large capture, one run")
    args = parser.parse_args()
    if args.quick:
        args.packets, args.tshark_packets, args.big_mb, args.repeat = 5_000, 1_000, 0, 1

    with tempfile.TemporaryDirectory(prefix="mqtt-dump-bench-") as tmp:
        small = Path(tmp) / "small.pcap"
        packets, frames = write_small(small, args.packets)
        slice_path = Path(tmp) / "slice.pcap"
        slice_packets, slice_frames = write_small(slice_path, args.tshark_packets)
        print(f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs")
        print(f"capture: {packets:,} MQTT packets in {frames:,} frames, {small.stat().st_size / 1e6:.1f} MB")

        tshark = shutil.which("tshark")
        commands: dict[str, tuple[list[str], dict[str, str] | None]] = {"mqtt dump --json": dump_command(ROOT, small)}
        if args.baseline is not None:
            commands["baseline --json"] = dump_command(args.baseline.resolve(), small)
        if tshark is not None:
            cmd = [tshark, "-r", str(slice_path), "-d", f"tcp.port=={PORT},mqtt", "-T", "json"]
            commands["tshark -T json"] = (cmd, None)
        runs: dict[str, list[Run]] = {name: [] for name in commands}
        for _ in range(args.repeat):  # interleaved: a change in the machine's load touches every tool alike
            for name, (cmd, env) in commands.items():
                runs[name].append(measure(cmd, env))

        rates: dict[str, tuple[float, float]] = {}  # name -> packets/s by wall, by CPU time
        for name in commands:
            run = best(runs[name])
            count, nframes = (slice_packets, slice_frames) if name.startswith("tshark") else (packets, frames)
            rates[name] = (count / run.seconds, count / run.cpu)
            note = (
                f"  (on {count:,} packets)" if name.startswith("tshark") else f"  peak RSS {run.rss_kib / 1024:.0f} MiB"
            )
            print(
                f"{name + ':':18} {run.seconds:7.2f} s {rates[name][0]:>10,.0f} packets/s"
                f" {nframes / run.seconds:>10,.0f} frames/s; CPU {run.cpu:6.2f} s"
                f" {rates[name][1]:>10,.0f} packets/s{note}"
            )
        small_rss = best(runs["mqtt dump --json"]).rss_kib

        ratio = None
        if tshark is None:
            print("tshark: not installed (make install), no ratio")
        else:
            theirs = rates["tshark -T json"]
            for name in commands:
                if not name.startswith("tshark"):
                    ours = rates[name]
                    print(
                        f"ratio {name.split()[0]}: {ours[0] / theirs[0]:.1f}x by wall time, {ours[1] / theirs[1]:.1f}x"
                        f" by CPU time (target >= {TARGET:.0f}x)"
                    )
            ratio = rates["mqtt dump --json"][0] / theirs[0]
        if args.baseline is not None:
            ours, before = rates["mqtt dump --json"], rates["baseline --json"]
            print(
                f"this checkout / baseline: {ours[0] / before[0]:.2f}x by wall time, {ours[1] / before[1]:.2f}x by CPU"
            )

        if args.big_mb:
            big = Path(tmp) / "big.pcap"
            big_packets = write_big(big, args.big_mb)
            cmd, env = dump_command(ROOT, big)
            b_seconds, _, big_rss = measure(cmd, env)
            size = big.stat().st_size
            print(
                f"large capture: {size / 1e9:.2f} GB, {big_packets:,} PUBLISH of 64 KiB: {b_seconds:.1f} s "
                f"({size / b_seconds / 1e6:.0f} MB/s), peak RSS {big_rss / 1024:.0f} MiB "
                f"(small capture: {small_rss / 1024:.0f} MiB)"
            )
    if args.check and (ratio is None or ratio < TARGET):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
