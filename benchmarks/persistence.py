"""What persistence costs our broker: fan-in with it on and off (and mosquitto's), and a restart from a big file.

    .venv/bin/python benchmarks/persistence.py [--mode fanin,restart] [--reps 2] [--count 20000] [--qos 1,2] [--tls]
        [--queued 1000000] [--retained 100000] [--sessions 1000] [--size 64] [--restart-reps 2]
    .venv/bin/python benchmarks/persistence.py --quick     # both modes, once, small (make bench-quick)

fanin: 1 publisher to 1 subscriber, QoS 1 and QoS 2, 64 B, against three brokers started once and measured in
turn (the order rotating each rep, as benchmarks/_loadgen.py's matrix does): ours without persistence, ours with
`--persistence FILE` (the default `synchronous = normal`), and Debian's mosquitto with `persistence true`
(_loadgen's settings plus a persistence location). Two loads, each driving all three brokers:
- `clean`: _loadgen's load generator (clean sessions; `mqtt bench`, or mqttload with MQTTLOAD_DIR). Nothing is
  stored (no persistent session, no retained message): this measures the acknowledgements held back until a
  commit, for every QoS 1/2 message.
- `persistent`: `mqtt bench pubsub --no-clean -V 311` (new sessions each run): the subscriber's session is
  persistent. QoS 1: a message the (online) subscriber acknowledges within net/server.py's COMMIT_LINGER is never
  written (the publisher's PUBACK waits for that acknowledgement instead of a commit); one acknowledged later is
  written (a frame of the change file) and its end later. QoS 2: every message is written before its PUBLISH and
  PUBREC go out, its release before PUBREL/PUBCOMP, and its end once complete (net/store.py: frames of the change
  file, folded into the tables every few MB, where a completed message's records cancel out). mosquitto writes
  nothing per message (a snapshot every autosave_interval), so this compares our stronger promise with its weaker
  one.
Goals (issue 18): persistence on >= 0.5x of ours with it off, and >= 1.0x mosquitto with persistence true.
--tls: the three brokers listen on mqtts:// too (TLS_PORT_OFFSET above their port; certificates made by trustme
for 127.0.0.1, mosquitto's second listener with certfile/keyfile), and the `persistent` load runs over plain TCP
and over TLS in turn (`persistent` and `persistent tls`), without the `clean` one.

restart: a file holding --queued QoS 1 messages for --sessions offline persistent sessions (3.1.1, each
subscribed to its own `dev/<n>/#`, with distinct --size-byte payloads) and --retained retained messages, written
through net/store.py's Store (the records the broker itself commits, in groups, so the file is what the broker
would have written). Then `mqtt serve --persistence FILE` is started --restart-reps times: the time from the
process start to the first accepted TCP connection, and VmRSS then (and VmHWM, the peak), against the payload
bytes the messages hold and against the same broker started with an empty file. Goals: < 10 s, RSS < 2x payload.

Pins the brokers to CPU 0 and the load to CPU 1. Prints medians and same-run ratios; raw rows go to
benchmarks/results/persistence-DATE.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _loadgen import MOSQUITTO, LoadGen, mosquitto_conf, pin
from _results import cpu_model, results_dir
from broker import ROOT, median, start_broker

PORTS = {"ours off": 18880, "ours on": 18881, "mosquitto persist": 18882}
TLS_PORT_OFFSET = 100  # --tls: each broker's mqtts:// port, above its plain one


def serve_cmd(port: int, *extra: str, tls: Path | None = None) -> list[str]:
    where = ["--port", str(port)] if tls is None else [
        "--listen", f"mqtt://127.0.0.1:{port}", "--listen", f"mqtts://127.0.0.1:{port + TLS_PORT_OFFSET}",
        "--tls-cert", str(tls / "cert.pem"), "--tls-key", str(tls / "key.pem")]  # fmt: skip
    return [*pin(0), sys.executable, "-m", "mqtt_cli", "serve", *where,
            "--max-queued-messages", "0", "--max-inflight", "0", "--sys-interval", "0", *extra]  # fmt: skip


def make_certs(work: Path) -> Path:
    """A CA and a server certificate for 127.0.0.1 (trustme, as the tests make theirs): ca.pem, cert.pem, key.pem."""
    import trustme

    tls = work / "tls"
    tls.mkdir()
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tls / "ca.pem"))
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.cert_chain_pems[0].write_to_path(str(tls / "cert.pem"))
    cert.private_key_pem.write_to_path(str(tls / "key.pem"))
    return tls


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (its figure on a loaded machine, where wall time is not)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_load(load: str, qos: int, port: int, pid: int, args: argparse.Namespace, work: Path, label: str) -> dict:
    if load == "clean":
        try:
            return args.load.thru(port, pattern="fanin", pubs=1, subs=1, qos=qos, size=64, count=args.count,
                                      broker_pid=pid)  # fmt: skip
        except RuntimeError as e:
            return {"error": str(e)}
    result = work / "bench.json"
    # New sessions and topics each run: a session coming back would find the previous run's state (ids in use, a
    # late PUBREL), and the previous runs' sessions, offline and kept, must not match (they would queue it all).
    run = f"{label.replace(' ', '-')}-q{qos}-{time.monotonic_ns()}"
    tls = ["--cafile", str(work / "tls" / "ca.pem")] if load.endswith("tls") else []
    port += TLS_PORT_OFFSET if tls else 0
    cmd = [*pin(1), sys.executable, "-m", "mqtt_cli", "bench", "pubsub", "-h", "127.0.0.1",
           "-p", str(port), *tls, "-V", "311", "--no-clean", "--prefix", f"{run}-", "-t", f"pbench/{run}/%i",
           "-c", "1", "--subs", "1", "-q", str(qos), "-s", "64", "-L", str(args.count), "-I", "0",
           "--workers", "1", "--quiet", "--json", str(result)]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False, timeout=600)
    if not result.exists():
        return {"error": f"no output: exit {done.returncode}: {done.stderr.strip()[-300:]}"}
    row = json.loads(result.read_text())
    result.unlink()
    row.pop("histogram", None)
    return row


def fanin(args: argparse.Namespace, work: Path, rows: list[dict]) -> None:
    conf = work / "mosquitto.conf"
    mdir = work / "mosquitto-db"
    mdir.mkdir()
    conf.write_text(
        mosquitto_conf(PORTS["mosquitto persist"])
        .replace("persistence false", f"persistence true\npersistence_location {mdir}/")
        + ("user root\n" if os.geteuid() == 0 else "")
        + (f"listener {PORTS['mosquitto persist'] + TLS_PORT_OFFSET}\ncertfile {tls}/cert.pem\nkeyfile {tls}/key.pem\n"
           if (tls := work / "tls" if args.tls else None) else "")
    )  # fmt: skip
    targets = {
        "ours off": serve_cmd(PORTS["ours off"], tls=tls),
        "ours on": serve_cmd(PORTS["ours on"], "--persistence", str(work / "ours.db"), tls=tls),
        "mosquitto persist": [*pin(0), MOSQUITTO, "-c", str(conf)],
    }
    loads = ("persistent", "persistent tls") if args.tls else ("clean", "persistent")
    qoses = [int(q) for q in args.qos.split(",")]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for label, cmd in targets.items():
            procs[label] = start_broker(label, PORTS[label], cmd)
        labels = list(targets)
        for rep in range(args.reps):
            for load in loads:
                for qos in qoses:
                    for k in range(len(labels)):
                        label = labels[(k + rep) % len(labels)]
                        pid = procs[label].pid
                        before = cpu_s(pid)
                        row = run_load(load, qos, PORTS[label], pid, args, work, label)
                        row["broker_cpu_total_s"] = round(cpu_s(pid) - before, 3)
                        row.update(test="fanin", load=load, qos=qos, label=label, rep=rep + 1)
                        rows.append(row)
                        print(json.dumps(row), file=sys.stderr)
    finally:
        for proc in procs.values():
            stop(proc)
    size = sum(f.stat().st_size for f in work.glob("ours.db*"))
    print(f"\nfan-in 1 -> 1, 64 B, {args.count:,} messages, median of {args.reps} (delivered/s); our file: "
          f"{size / 1e6:.1f} MB with its WAL")
    print(f"{'load':<16}{'QoS':>4}{'ours off':>11}{'ours on':>11}{'mosq pers':>11}{'on/off':>8}{'on/mosq':>9}"
          f"  lost (on)   goals: on/off >= 0.5, on/mosq >= 1.0")
    for load in loads:
        for qos in qoses:
            sel = [r for r in rows if r.get("test") == "fanin" and r["load"] == load and r["qos"] == qos]
            med = {lb: median([r for r in sel if r["label"] == lb], "delivered_per_s") for lb in labels}
            lost = max([int(r.get("lost", 0) or 0) for r in sel if r["label"] == "ours on"] or [0])
            off, on, mq = med["ours off"], med["ours on"], med["mosquitto persist"]
            print(f"{load:<16}{qos:>4}{off:>11,.0f}{on:>11,.0f}{mq:>11,.0f}{on / off:>8.2f}{on / mq:>9.2f}"
                  f"  {lost}")  # fmt: skip
    # On a loaded machine the rates say more about the neighbours than about the brokers: the broker's own CPU
    # time per message (all threads, the whole run) is the steadier figure. Its inverse ratio is the rate ratio
    # a quiet machine would show where the broker is the bottleneck.
    print("\nbroker CPU per message (us, all its threads, whole run), median; ratios as rates would be")
    print(f"{'load':<16}{'QoS':>4}{'ours off':>11}{'ours on':>11}{'mosq pers':>11}{'off/on':>8}{'mosq/on':>9}")
    for load in loads:
        for qos in qoses:
            sel = [r for r in rows if r.get("test") == "fanin" and r["load"] == load and r["qos"] == qos]
            for r in sel:
                r["cpu_us_per_msg"] = 1e6 * r["broker_cpu_total_s"] / max(1, int(r.get("delivered", 0) or 0))
            cost = {lb: median([r for r in sel if r["label"] == lb], "cpu_us_per_msg") for lb in labels}
            off, on, mq = cost["ours off"], cost["ours on"], cost["mosquitto persist"]
            print(f"{load:<16}{qos:>4}{off:>11.1f}{on:>11.1f}{mq:>11.1f}{off / on:>8.2f}{mq / on:>9.2f}")


def build_file(path: Path, args: argparse.Namespace) -> int:
    """The file through the store, as the broker writes it; returns the payload bytes it holds."""
    from mqtt_cli.core.config import SyncMode
    from mqtt_cli.core.persistence import DeliveryAdded, RetainedSet, SessionSaved
    from mqtt_cli.core.properties import EMPTY_PROPERTIES
    from mqtt_cli.core.session import Message, SubscriptionOptions
    from mqtt_cli.net.store import Store

    store, _ = Store.open(path, SyncMode.normal, 0.0)
    per = args.queued // args.sessions
    pad = b"x" * args.size
    row = 0
    payload = 0
    t0 = time.monotonic()
    for s in range(args.sessions):
        cid = f"offline-{s}"
        subs = ((f"dev/{s}/#", SubscriptionOptions(qos=1)),)
        changes: list = [SessionSaved(cid, 4, 0xFFFFFFFF, None, subs)]  # 3.1.1: kept until it comes back
        for i in range(per):
            row += 1
            body = (b"%d/%d:" % (s, i) + pad)[: args.size]
            changes.append(DeliveryAdded(cid, row, Message(f"dev/{s}/t{i % 10}", body, 1, False, EMPTY_PROPERTIES,
                                                           "publisher", 0.0), 1, False, ()))  # fmt: skip
            payload += len(body)
        store.commit(changes)
    batch: list = []
    for r in range(args.retained):
        body = (b"r%d:" % r + pad)[: args.size]
        batch.append(RetainedSet(Message(f"state/{r // 100}/{r % 100}", body, 1, True, EMPTY_PROPERTIES,
                                         "publisher", 0.0)))  # fmt: skip
        payload += len(body)
        if len(batch) == 10_000:
            store.commit(batch)
            batch = []
    store.commit(batch)
    store.close()
    print(f"built {path.name}: {row:,} queued in {args.sessions:,} sessions, {args.retained:,} retained, "
          f"{args.size} B payloads, in {time.monotonic() - t0:.1f} s: {path.stat().st_size / 1e6:.0f} MB",
          file=sys.stderr)  # fmt: skip
    return payload


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def start_timed(cmd: list[str], port: int) -> tuple[subprocess.Popen[bytes], float]:
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, time.monotonic() - t0
        except OSError:
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise SystemExit(f"benchmarks/persistence.py: the broker exited: {err.strip()}") from None
            if time.monotonic() - t0 > 600:
                stop(proc)
                raise SystemExit("benchmarks/persistence.py: the broker did not start in 600 s") from None
            time.sleep(0.01)


def restart(args: argparse.Namespace, work: Path, rows: list[dict]) -> None:
    db = work / "restart.db"
    payload = build_file(db, args)
    port = 18883
    empty = work / "empty.db"
    results: dict[str, list[dict]] = {"empty": [], "full": []}
    for rep in range(args.restart_reps):
        for label, path in (("empty", empty), ("full", db)):
            # --max-queued-messages 0: nothing restored is over a limit (the file was built without one)
            proc, seconds = start_timed(serve_cmd(port, "--persistence", str(path)), port)
            cpu = cpu_s(proc.pid)
            time.sleep(0.5)  # settle: what start-up allocated and freed
            row = {"test": "restart", "label": label, "rep": rep + 1, "seconds": round(seconds, 3),
                   "cpu_s": round(cpu, 2), "rss_kb": status_kb(proc.pid, "VmRSS"),
                   "hwm_kb": status_kb(proc.pid, "VmHWM"),
                   "queued": args.queued if label == "full" else 0, "retained": args.retained if label == "full" else 0,
                   "size": args.size, "payload_bytes": payload if label == "full" else 0}  # fmt: skip
            stop(proc)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
            results[label].append(row)
    full, base = results["full"], results["empty"]
    secs = median(full, "seconds")
    rss, hwm, rss0 = median(full, "rss_kb") * 1024, median(full, "hwm_kb") * 1024, median(base, "rss_kb") * 1024
    print(f"\nrestart: {args.queued:,} queued ({args.sessions:,} offline sessions) + {args.retained:,} retained, "
          f"{args.size} B payloads = {payload / 1e6:.1f} MB of payload; median of {args.restart_reps}")
    print(f"  start to accepting: {secs:.2f} s, {median(full, 'cpu_s'):.2f} s of CPU (empty file: "
          f"{median(base, 'seconds'):.2f} s, {median(base, 'cpu_s'):.2f} s of CPU)   goal < 10 s")
    print(f"  RSS {rss / 1e6:.0f} MB = {rss / payload:.2f}x payload (peak {hwm / 1e6:.0f} MB = {hwm / payload:.2f}x);"
          f" over an empty broker's {rss0 / 1e6:.0f} MB: {(rss - rss0) / payload:.2f}x   goal < 2x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", default="fanin,restart")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--count", type=int, default=20_000, help="fan-in: messages per run")
    parser.add_argument("--queued", type=int, default=1_000_000)
    parser.add_argument("--retained", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=1_000)
    parser.add_argument("--size", type=int, default=64, help="restart: payload bytes")
    parser.add_argument("--restart-reps", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="one rep of 1,000 messages; 10,000 queued, 1,000 retained")
    parser.add_argument("--qos", default="1,2", help="fan-in: the QoS levels measured")
    parser.add_argument("--tls", action="store_true", help="fan-in over mqtts:// too (the persistent load only)")
    args = parser.parse_args()
    if args.quick:
        args.reps, args.count, args.restart_reps = 1, 1_000, 1
        args.queued, args.retained, args.sessions = 10_000, 1_000, 100
    modes = set(args.mode.split(","))
    work = Path(tempfile.mkdtemp(prefix="mqtt-bench-persist-"))
    rows: list[dict] = []
    cpu = cpu_model()
    print(f"CPU: {cpu}; {os.cpu_count()} CPUs; load average at start: {os.getloadavg()[0]:.2f}")
    try:
        if "fanin" in modes:
            args.load = LoadGen(work)
            if args.tls:
                make_certs(work)
            fanin(args, work, rows)
        if "restart" in modes:
            restart(args, work, rows)
    finally:
        out = results_dir() / f"persistence-{time.strftime('%Y-%m-%d')}.jsonl"
        with out.open("a") as f:
            for row in rows:
                f.write(json.dumps({**row, "cpu": cpu}) + "\n")
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}; raw results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
