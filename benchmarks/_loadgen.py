"""The load the broker benchmarks put on a broker, and the mosquitto they compare it with.

The generator is this project's own `mqtt bench` (docs/bench.md), run from this checkout. The C generator
mqttload can stand in for it as a neutral yardstick: set MQTTLOAD_DIR to a directory holding its source
(mqttload.c and a Makefile with an `mqttload` target); it is then built in a temporary directory. Nothing else
is needed beside the checkout and what `make install` installs.

Each run gives one JSON record with mqttload's field names, whichever generator ran (`mqtt bench --json` names
its figures as mqttload does where they mean the same): `thru` (sent, delivered, lost, delivered_per_s,
published_per_s, ...), `lat` (p50_us, p99_us, ...), `conns` (connected, conn_per_s). With a broker pid, the
broker's CPU time over the run is added as `broker_cpu_s` and `broker_cpu_pct` (mqttload measures it itself;
for `mqtt bench` it is read from /proc around the whole run, connecting included). The generator runs on CPU 1
when the machine has more than one (the brokers on CPU 0).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV_C_TOOL = "MQTTLOAD_DIR"
MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"

#: mosquitto's settings in every comparison: no queue or inflight caps, persistence off, errors only. Our broker
#: runs with the same limits (`--max-queued-messages 0 --max-inflight 0`).
MOSQUITTO_SETTINGS = """\
allow_anonymous true
max_queued_messages 0
max_inflight_messages 0
persistence false
log_dest stderr
log_type error
log_type warning
connection_messages false
"""


def mosquitto_conf(port: int) -> str:
    return f"listener {port} 127.0.0.1\n{MOSQUITTO_SETTINGS}"


def pin(cpu: int) -> list[str]:
    """`taskset -c CPU` when the machine has that CPU and taskset, else nothing."""
    if (os.cpu_count() or 1) > cpu and shutil.which("taskset"):
        return ["taskset", "-c", str(cpu)]
    return []


def broker_cpu_seconds(pid: int) -> float:
    """Time on a CPU of every thread of a process so far (/proc/PID/schedstat's first field is in ns)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


class LoadGen:
    """`mqtt bench`, or mqttload when MQTTLOAD_DIR names its source (built once in `work`)."""

    def __init__(self, work: Path) -> None:
        self.mqttload: str | None = None
        source = os.environ.get(ENV_C_TOOL)
        if source:
            if not (Path(source) / "mqttload.c").is_file():
                raise SystemExit(f"{ENV_C_TOOL}={source}: no mqttload.c there (unset it to use `mqtt bench`)")
            shutil.copytree(source, work / "mqttload-src")
            subprocess.run(["make", "-s", "-C", str(work / "mqttload-src"), "mqttload"], check=True)
            self.mqttload = str(work / "mqttload-src" / "mqttload")
        self.work = work

    @property
    def name(self) -> str:
        return "mqttload" if self.mqttload else "mqtt bench"

    def _bench(self) -> list[str]:
        return [*pin(1), sys.executable, "-m", "mqtt_cli", "bench"]

    @staticmethod
    def env() -> dict[str, str]:
        """This checkout's mqtt_cli first on the path (a git worktree's, not another installed one)."""
        return {**os.environ, "PYTHONPATH": str(ROOT)}

    def _run(self, argv: list[str], json_path: Path | None, broker_pid: int | None, timeout: float) -> dict:
        before = broker_cpu_seconds(broker_pid) if broker_pid and not self.mqttload else None
        start = time.monotonic()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=self.env(), check=False)
        if json_path is None:
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            row: dict = json.loads(lines[-1]) if lines else {}
        else:
            row = json.loads(json_path.read_text()) if json_path.exists() else {}
            json_path.unlink(missing_ok=True)
        if not row:
            raise RuntimeError(f"{self.name}: no result (exit {done.returncode}): {done.stderr.strip()[-500:]}")
        if before is not None and broker_pid:
            used = broker_cpu_seconds(broker_pid) - before
            row["broker_cpu_s"] = round(used, 3)
            row["broker_cpu_pct"] = round(100 * used / max(time.monotonic() - start, 1e-9), 1)
        row["generator"] = self.name
        return row

    def _json_file(self) -> Path:
        fd, name = tempfile.mkstemp(suffix=".json", dir=self.work)
        os.close(fd)
        os.unlink(name)
        return Path(name)

    def thru(self, port: int, *, pattern: str, pubs: int, subs: int, qos: int, size: int, count: int,
             broker_pid: int | None = None, timeout: float = 300, rate: float | None = None,
             persistent: str | None = None, workers: int | None = None) -> dict:  # fmt: skip
        """`count` messages as fast as the window allows: pattern `fanin` (all to one subscriber) or `fanout`.
        `rate`: paced instead, messages a second in all. `persistent`: MQTT 3.1.1 persistent sessions (not clean)
        whose client ids and topics start with this run name (new sessions each run: a session coming back would
        find the previous run's state). Both need `mqtt bench`."""
        if self.mqttload and (rate or persistent):
            raise SystemExit(f"{ENV_C_TOOL}: paced or persistent loads need `mqtt bench` (unset it)")
        if self.mqttload:
            argv = [*pin(1), self.mqttload, "thru", f"--{pattern}", "--pubs", str(pubs), "--subs", str(subs),
                    "--qos", str(qos), "--size", str(size), "--count", str(count), "--timeout", str(int(timeout)),
                    "--port", str(port)]  # fmt: skip
            if broker_pid:
                argv += ["--broker-pid", str(broker_pid)]
            return self._run(argv, None, broker_pid, timeout + 30)
        out = self._json_file()
        pace = ["--rate", str(rate)] if rate else ["-I", "0"]
        sessions = ["-V", "311", "--no-clean", "--prefix", f"{persistent}-", "-t", f"pbench/{persistent}/%i"]
        argv = [*self._bench(), "pubsub", "-h", "127.0.0.1", "-p", str(port), "-c", str(pubs), "--subs", str(subs),
                "-q", str(qos), "-s", str(max(size, 20)), "-L", str(count), *pace, *(sessions if persistent else []),
                "--workers", str(workers or min(2, pubs + subs)), "--quiet", "--json", str(out)]  # fmt: skip
        row = self._run(argv, out, broker_pid, timeout)
        row.update(mode="thru", pattern=pattern, subs=subs, count=count)
        return row

    def lat(self, port: int, *, rate: int, seconds: float, qos: int, size: int,
            broker_pid: int | None = None) -> dict:  # fmt: skip
        """One publisher at `rate` messages a second to one subscriber, for `seconds`: latency percentiles."""
        argv, out = self.lat_command(port, rate=rate, seconds=seconds, qos=qos, size=size, broker_pid=broker_pid)
        return self._run(argv, out, broker_pid, seconds + 60) | {"mode": "lat"}

    def lat_command(self, port: int, *, rate: int, seconds: float, qos: int, size: int,
                    broker_pid: int | None = None) -> tuple[list[str], Path | None]:  # fmt: skip
        """The command of `lat` (to run beside something else), and where its JSON goes (None: standard output)."""
        if self.mqttload:
            argv = [*pin(1), self.mqttload, "lat", "--rate", str(rate), "--seconds", str(seconds), "--qos", str(qos),
                    "--size", str(size), "--port", str(port)]  # fmt: skip
            if broker_pid:
                argv += ["--broker-pid", str(broker_pid)]
            return argv, None
        out = self._json_file()
        return [*self._bench(), "pubsub", "-h", "127.0.0.1", "-p", str(port), "-c", "1", "--subs", "1", "--rate",
                str(rate), "--duration", str(seconds), "-q", str(qos), "-s", str(max(size, 20)), "--workers", "1",
                "--quiet", "--json", str(out)], out  # fmt: skip

    def result(self, stdout: str, json_path: Path | None) -> dict:
        """The record of a command of lat_command() run by the caller, from its standard output or JSON file."""
        if json_path is None:
            lines = [line for line in stdout.splitlines() if line.startswith("{")]
            return json.loads(lines[-1]) if lines else {}
        row = json.loads(json_path.read_text()) if json_path.exists() else {}
        json_path.unlink(missing_ok=True)
        return row

    def conns_command(self, port: int, *, count: int, hold: float, keepalive: int = 60,
                      broker_pid: int | None = None) -> tuple[list[str], Path | None]:  # fmt: skip
        """The command holding `count` idle clients for `hold` seconds, and where its JSON goes (None: stdout)."""
        if self.mqttload:
            argv = [*pin(1), self.mqttload, "conns", "--count", str(count), "--keepalive", str(keepalive), "--hold",
                    str(hold), "--port", str(port)]  # fmt: skip
            return argv + (["--broker-pid", str(broker_pid)] if broker_pid else []), None
        out = self._json_file()
        return [*self._bench(), "conn", "-h", "127.0.0.1", "-p", str(port), "-c", str(count), "-k", str(keepalive),
                "--duration", str(hold), "--json", str(out)], out  # fmt: skip

    @contextmanager
    def conns(self, port: int, *, count: int, hold: float, keepalive: int = 60,
              broker_pid: int | None = None) -> Iterator[dict]:  # fmt: skip
        """Connects `count` idle clients and holds them; the body runs once all are connected (or the rest failed),
        while they are held. The record (with `count`, `connected`, `conn_per_s`) is complete after the block."""
        row: dict = {}
        argv, out = self.conns_command(port, count=count, hold=hold, keepalive=keepalive, broker_pid=broker_pid)
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=self.env())
        assert proc.stdout is not None
        try:
            for line in proc.stdout:  # mqttload: one line once connected; mqtt bench: a line a second
                if not line.startswith("{"):
                    continue
                got = json.loads(line)
                if self.mqttload or got.get("connected", 0) + got.get("failed", 0) >= count:
                    row.update(got)
                    break
            yield row
            rest = proc.stdout.read()
            proc.wait(timeout=hold + 120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        row.update(self.result(rest if self.mqttload else "", out))
        row.update(mode="conns", count=count, generator=self.name)


def matrix(load: LoadGen, targets: dict[str, tuple[int, Sequence[str]]], *, reps: int, only: Sequence[str],
           count: int, conns: int, out: Path, lat_seconds: float = 10, env: dict[str, dict[str, str]] | None = None,
           ) -> list[dict]:  # fmt: skip
    """The standard matrix against brokers side by side: label -> (port, command starting the broker).

    `reps` rounds; in each, every test runs against every broker back to back, in an order that rotates each
    round, so all brokers see the same machine. conns: each broker started fresh, its VmRSS read before, while
    the clients are held and after; the other tests with all brokers running for the whole round. Tests: fan-in
    1 -> 1 at QoS 0/1/2, 64 B and 1 KiB; fan-out 1 -> 10 at QoS 0/1, 64 B; latency at 1,000 msg/s QoS 0/1/2 for
    `lat_seconds`; `conns` idle clients held 6 s. Each record gets `label` and `rep`, and is appended to `out`.
    """
    from broker import start_broker, stop_brokers  # (broker.py imports this module)

    labels = list(targets)
    rows: list[dict] = []

    def emit(label: str, rep: int, row: dict) -> None:
        row = {"label": label, "rep": rep, **row}
        rows.append(row)
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")

    def rss(pid: int) -> int:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    for rep in range(1, reps + 1):
        order = labels[rep % len(labels):] + labels[: rep % len(labels)]
        if "conns" in only:
            for label in order:
                port, cmd = targets[label]
                procs = {label: start_broker(label, port, list(cmd), (env or {}).get(label))}
                try:
                    time.sleep(1)
                    pid = procs[label].pid
                    before = rss(pid)
                    with load.conns(port, count=conns, hold=6, broker_pid=pid) as row:
                        time.sleep(2)
                        held = rss(pid)
                    time.sleep(1)
                    row.update(rss_before_kb=before, rss_held_kb=held, rss_after_kb=rss(pid))
                    emit(label, rep, row)
                finally:
                    stop_brokers(procs)
        if not {"fanin", "fanout", "lat"} & set(only):
            continue
        procs = {}
        try:
            for label in labels:
                port, cmd = targets[label]
                procs[label] = start_broker(label, port, list(cmd), (env or {}).get(label))
            time.sleep(0.5)
            if "fanin" in only:
                for size in (64, 1024):
                    for qos in (0, 1, 2):
                        for label in order:
                            row = load.thru(targets[label][0], pattern="fanin", pubs=1, subs=1, qos=qos, size=size,
                                            count=count, broker_pid=procs[label].pid)  # fmt: skip
                            emit(label, rep, row)
            if "fanout" in only:
                for qos in (0, 1):
                    for label in order:
                        emit(label, rep, load.thru(targets[label][0], pattern="fanout", pubs=1, subs=10, qos=qos,
                                                   size=64, count=count, broker_pid=procs[label].pid))  # fmt: skip
            if "lat" in only:
                for qos in (0, 1, 2):
                    for label in order:
                        row = load.lat(targets[label][0], rate=1000, seconds=lat_seconds, qos=qos, size=64,
                                       broker_pid=procs[label].pid)  # fmt: skip
                        emit(label, rep, row)
        finally:
            stop_brokers(procs)
    return rows
