"""Codec throughput: PUBLISH packets decoded and encoded per second on one core.

    .venv/bin/python benchmarks/codec.py [--count 200000] [--json] [--check]

Decoding is measured two ways, both from large buffers of back-to-back packets:
  * "stream": a buffer of 10,000 packets (~0.9 MB) fed again and again, its packets dropped after each feed,
    as a broker or `mqtt dump` handles reads;
  * "one buffer": all --count packets in a single buffer and a single feed, all kept alive (the cyclic garbage
    collector then walks a growing heap, which costs about a quarter of the time).
Encoding builds the bytes of --count Publish objects. Payloads are 64 bytes, topics 21 bytes from a set of 100.
Each figure is the best of --repeat runs. --builds runs it as pure Python (MQTT_CLI_PURE=1) and as the compiled
build in alternating processes (--rounds each) and prints both with their ratio. --check exits 1 when a headline
figure is below the issue's target (500,000 packets/s for decode-stream and encode).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mqtt_cli import buildmode
from mqtt_cli.core.encoder import encode
from mqtt_cli.core.packets import Publish
from mqtt_cli.core.properties import Properties
from mqtt_cli.core.reader import PacketReader

TARGET = 500_000


def packets(count: int, qos: int, props: Properties | None = None) -> list[Publish]:
    kw = {"properties": props} if props else {}
    return [
        Publish(f"sensors/device{i % 100:02d}/temp", b"x" * 64, qos, packet_id=(i % 65535) + 1 if qos else None, **kw)
        for i in range(count)
    ]


def best_of(repeat: int, fn: Callable[..., object], *args: object) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn(*args)
        best = min(best, time.perf_counter() - start)
        del result  # dropped outside the timed region
    return best


def decode_stream(version: int, chunk: bytes, feeds: int) -> None:
    reader = PacketReader(version)
    for _ in range(feeds):
        reader.feed(chunk)


def decode_one_buffer(version: int, whole: bytes) -> list[object]:
    return PacketReader(version).feed(whole)  # kept alive until timed


def encode_all(pkts: list[Publish], version: int) -> None:
    for p in pkts:
        encode(p, version)


def run(count: int, repeat: int) -> list[dict[str, object]]:
    results: list[dict[str, object]] = []
    cases = [
        ("3.1.1", 4, 0, None),
        ("3.1.1", 4, 1, None),
        ("5.0", 5, 0, None),
        ("5.0", 5, 1, None),
        ("5.0 +props", 5, 1, Properties(content_type="application/json", user_properties=[("k", "v")])),
    ]
    for label, version, qos, props in cases:
        pkts = packets(count, qos, props)
        chunk = b"".join(encode(p, version) for p in pkts[:10_000])
        whole = b"".join(encode(p, version) for p in pkts)
        feeds = max(1, count // 10_000)
        assert PacketReader(version).feed(chunk) == pkts[:10_000]
        t_stream = best_of(repeat, decode_stream, version, chunk, feeds)
        t_one = best_of(repeat, decode_one_buffer, version, whole)
        t_enc = best_of(repeat, encode_all, pkts, version)
        results.append(
            {
                "case": f"v{label} QoS {qos}",
                "packet_bytes": len(chunk) // 10_000,
                "decode_stream_per_s": round(feeds * 10_000 / t_stream),
                "decode_one_buffer_per_s": round(count / t_one),
                "encode_per_s": round(count / t_enc),
            }
        )
    return results


def machine() -> dict[str, object]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"python": platform.python_version(), "cpu": cpu, "cores": os.cpu_count()}


def builds(count: int, repeat: int, rounds: int) -> int:
    """This benchmark as pure Python (MQTT_CLI_PURE=1) and compiled, in alternating processes, best of each."""
    import subprocess

    from mqtt_cli import buildmode

    if not os.path.exists(buildmode.STAMP):
        print("benchmarks/codec.py --builds: no compiled build (make install with a C compiler)", file=sys.stderr)
        return 2
    best: dict[str, dict[str, dict[str, int]]] = {"pure": {}, "compiled": {}}
    envs = {
        "pure": {**os.environ, buildmode.ENV_PURE: "1"},
        "compiled": {k: v for k, v in os.environ.items() if k != buildmode.ENV_PURE},
    }
    for _ in range(rounds):
        for build, env in envs.items():
            cmd = [sys.executable, __file__, "--json", "--count", str(count), "--repeat", str(repeat)]
            out = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)
            assert (out["build"] == buildmode.PURE_BUILD) == (build == "pure"), out["build"]
            for r in out["results"]:
                kept = best[build].setdefault(r["case"], {})
                for k in FIGURES:
                    kept[k] = max(kept.get(k, 0), r[k])
    m = machine()
    print(f"Python {m['python']} on {m['cpu']} ({m['cores']} cores); packets/s, best of {rounds} x {repeat} each")
    print(f"{'case':<18}" + "".join(f"{name + ' pure':>22}{'compiled':>10}{'x':>6}" for name in FIGURES.values()))
    for case, pure in best["pure"].items():
        compiled = best["compiled"][case]
        cells = "".join(f"{pure[k]:>22,}{compiled[k]:>10,}{compiled[k] / pure[k]:>6.2f}" for k in FIGURES)
        print(f"{case:<18}{cells}")
    return 0


FIGURES = {
    "decode_stream_per_s": "decode stream",
    "decode_one_buffer_per_s": "decode 1 buffer",
    "encode_per_s": "encode",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--check", action="store_true", help=f"exit 1 if below {TARGET:,}/s")
    parser.add_argument("--builds", action="store_true", help="pure Python against the compiled build")
    parser.add_argument("--rounds", type=int, default=3, help="--builds: processes of each build, alternating")
    parser.add_argument("--quick", action="store_true", help="5,000 packets, one repeat (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.count, args.repeat, args.rounds = 5_000, 1, 1
    if args.builds:
        return builds(args.count, args.repeat, args.rounds)
    results = run(args.count, args.repeat)
    if args.json:
        print(json.dumps({"machine": machine(), "build": buildmode.BUILD, "results": results}, indent=2))
    else:
        m = machine()
        where = f"Python {m['python']} on {m['cpu']} ({m['cores']} cores, {buildmode.BUILD})"
        print(f"{where}; packets/s, best of {args.repeat}")
        print(f"{'case':<22}{'bytes':>6}{'decode stream':>16}{'decode 1 buffer':>17}{'encode':>12}")
        for r in results:
            print(
                f"{r['case']:<22}{r['packet_bytes']:>6}{r['decode_stream_per_s']:>16,}"
                f"{r['decode_one_buffer_per_s']:>17,}{r['encode_per_s']:>12,}"
            )
    if args.check:
        low = [r for r in results[:4] if min(r["decode_stream_per_s"], r["encode_per_s"]) < TARGET]  # type: ignore[call-overload]
        return 1 if low else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
