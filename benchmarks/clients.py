"""Client figures: `mqtt pub -l` against `mosquitto_pub -l`, and one-shot `mqtt pub` start-to-exit time.

    .venv/bin/python benchmarks/clients.py [--lines 100000] [--runs 3] [--oneshot-runs 20]

Against a private Debian mosquitto on a free loopback port (started and stopped here). For each QoS (0, 1) and
protocol version (3.1.1, 5.0), both publishers get the same lines on standard input while a `mosquitto_sub`
counts what was delivered; a run's figure is delivered messages per second of the publisher's wall time
(start to exit), best of --runs. Then the whole-process time of `mqtt pub -t x -m y` (median), with
`mosquitto_pub` for reference, and where the time goes (`python -X importtime`). Prints a markdown table and
writes it to benchmarks/results/clients.txt.

mqtt_cli is byte-compiled first, as pip does when it installs a wheel: an editable install run with
PYTHONDONTWRITEBYTECODE set would otherwise compile its ~30 modules from source on every run (about 50 ms).
"""

import argparse
import compileall
import datetime
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _results import results_dir  # noqa: E402

from tests.brokers import start_mosquitto  # noqa: E402

MQTT = str(Path(sys.executable).parent / "mqtt")
XY = ["-t", "x", "-m", "y"]


def count_delivered(port: int, topic: str, expected: int, start: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["mosquitto_sub", "-p", str(port), "-t", topic, "-q", "1", "-C", str(expected), "-W", "60", "-V", "mqttv311"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def run_publisher(cmd: list[str], data: bytes, port: int, topic: str, n: int) -> tuple[float, int, int]:
    """(wall seconds, delivered count, exit code) of one publisher run."""
    counter = count_delivered(port, topic, n, time.perf_counter())
    time.sleep(0.3)  # the counter subscribes
    start = time.perf_counter()
    proc = subprocess.run(cmd, input=data, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    try:
        out, _ = counter.communicate(timeout=max(3.0, wall))
    except subprocess.TimeoutExpired:
        counter.terminate()
        out, _ = counter.communicate()
    return wall, out.count(b"\n"), proc.returncode


def median_ms(cmd: list[str], runs: int) -> float:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def import_breakdown(port: int) -> list[tuple[str, float]]:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "mqtt_cli", "pub", "-h", "127.0.0.1", "-p", str(port), *XY],
        capture_output=True,
        text=True,
        check=True,
    )
    wanted = ("typer", "typer._adapters", "pydantic", "trio", "rich", "mqtt_cli.app", "mqtt_cli.commands.pub",
              "mqtt_cli.core", "mqtt_cli.net.client")  # fmt: skip
    found = {}
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| ( *)(\S+)$", line)
        if m and m[3] in wanted and m[3] not in found:
            found[m[3]] = int(m[1]) / 1000
    return [(name, found[name]) for name in wanted if name in found]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--oneshot-runs", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="2,000 lines, one run, 3 one-shot runs (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.lines, args.runs, args.oneshot_runs = 2_000, 1, 3
    n = args.lines
    compileall.compile_dir(ROOT / "mqtt_cli", quiet=1)
    data = b"".join(b"%d\n" % i for i in range(n))
    broker = start_mosquitto(Path(tempfile.mkdtemp(prefix="mqtt-bench-clients-")))
    port = broker.port
    rows = []
    try:
        for version, ours_v, theirs_v in (("3.1.1", "311", "mqttv311"), ("5.0", "5", "mqttv5")):
            for qos in (0, 1):
                for name, cmd in (
                    ("mqtt pub -l", [MQTT, "pub", "-p", str(port), "-t", "bench", "-l", "-q", str(qos), "-V", ours_v]),
                    ("mosquitto_pub -l", ["mosquitto_pub", "-p", str(port), "-t", "bench", "-l", "-q", str(qos),
                                          "-V", theirs_v]),
                ):  # fmt: skip
                    best = None
                    for _ in range(args.runs):
                        wall, delivered, code = run_publisher(cmd, data, port, "bench", n)
                        rate = delivered / wall
                        if best is None or rate > best[0]:
                            best = (rate, wall, delivered, code)
                    assert best is not None
                    rows.append((name, version, qos, *best))
                    print(f"{name:18} {version} QoS {qos}: {best[2]:>7} of {n} delivered in {best[1]:.2f} s, "
                          f"{best[0]:,.0f}/s, exit {best[3]}", flush=True)  # fmt: skip
        target = ["-h", "127.0.0.1", "-p", str(port), *XY]
        oneshot = median_ms([MQTT, "pub", *target], args.oneshot_runs)
        oneshot_mosq = median_ms(["mosquitto_pub", *target], args.oneshot_runs)
        floor = median_ms([sys.executable, "-c", "pass"], args.oneshot_runs)
        imports = import_breakdown(port)
    finally:
        broker.stop()

    lines = [
        f"# benchmarks/clients.py --lines {n} --runs {args.runs} --oneshot-runs {args.oneshot_runs}",
        f"# {datetime.date.today()} {platform.python_implementation()} {platform.python_version()} "
        f"{os.cpu_count()} cores; Debian mosquitto on loopback",
        "",
        f"| publisher | MQTT | QoS | delivered of {n:,} | wall | delivered/s | exit |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, version, qos, rate, wall, delivered, code in rows:
        lines.append(f"| `{name}` | {version} | {qos} | {delivered:,} | {wall:.2f} s | {rate:,.0f} | {code} |")
    lines += [
        "",
        "| one-shot command | median |",
        "|---|---:|",
        f"| `mqtt pub -h 127.0.0.1 -t x -m y` | {oneshot:.0f} ms |",
        f"| `mosquitto_pub -h 127.0.0.1 -t x -m y` | {oneshot_mosq:.0f} ms |",
        f"| `python -c pass` | {floor:.0f} ms |",
        "",
        "| import (cumulative, -X importtime) | ms |",
        "|---|---:|",
        *(f"| {name} | {ms:.0f} |" for name, ms in imports),
    ]
    text = "\n".join(lines) + "\n"
    print()
    print(text)
    out = results_dir() / "clients.txt"
    out.write_text(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
