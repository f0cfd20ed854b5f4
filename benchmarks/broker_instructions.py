"""Instructions per message of this checkout's broker against another commit's, counted by valgrind's callgrind.

    .venv/bin/python benchmarks/broker_instructions.py --against REF [--reps 2] [--messages 200] [--only ROWS]
    .venv/bin/python benchmarks/broker_instructions.py --quick      # this checkout, the one-shot row: does it run

Needs valgrind (callgrind_control, callgrind_annotate; `make install` as root installs it). Rates timed on a
shared 2-core machine move by 10-20% from run to run; user-space instructions do not (repeat counts agree within
about 1%), so this is the A/B to show that a change kept the speed. REF is archived and compiled as
benchmarks/broker.py --against does (benchmarks/_against.py); both trees run compiled when this checkout is
(MQTT_CLI_PURE=1: both pure), each with its own mqtt_cli first on the path, checked before any count.

Rows (--only takes their groups: fanin, fanout, persist, lat, bridge, startup):
- fanin: 4 publishers -> 1 subscriber, QoS 0/1/2, 64 B and 1 KiB; fanout: 1 -> 10 subscribers, QoS 0/1, 64 B;
  persist: 1 -> 1 QoS 1 with persistent sessions (`mqtt bench --no-clean -V 311`, as benchmarks/persistence.py's
  `persistent` load), the broker without and with --persistence; lat: one publisher, one subscriber, QoS 0/1/2
  at lat_instructions.py's 10 messages a second (p99 latency follows these instructions: see that script).
  `mqtt serve` runs under callgrind with instrumentation off (two brokers per tree, one with --persistence, all
  started together and measured in turn, the trees' order rotating each rep); each row is counted twice (a dump
  of its own: callgrind_control), with a few messages and with --messages more, and instructions per message are
  the difference over the difference in messages (the load generator's connects and disconnects cancel out),
  each count less the idle broker's instructions for as long (its timers, counted at the start of each rep). The
  load is `mqtt bench` (benchmarks/_loadgen.py), paced so that the broker, slowed ~50x by valgrind, keeps up: a
  saturated broker batches reads and sends differently from one tree to the other, which would skew the count.
  A row whose p99 latency reached the interval between a publisher's messages is marked `late` (the broker fell
  behind).
  `mqtt bench` paces its publishers on one schedule, so fan-in's four send together: a burst of four each
  period, usually read in one wake-up. On a busy machine (a load average well above the cores) the generator
  itself falls behind and sends in bursts, the broker batches more and the counts drop: run it on a quiet
  machine. Per message is per message published: a fan-out message's ten deliveries count as one. The idle
  broker wakes twice a second (its ticker), about 150k instructions a wake-up under callgrind: a count can hold
  one wake-up more or less than its share, which --messages 200 keeps within about 2% of the cheapest row. Each
  row's raw record names its two callgrind files (`dumps`, in --work) for `callgrind_annotate`.
- bridge: benchmarks/bridge_path.py's forwarding path (QoS 1, MQTT 3.1.1, reads of 64) in a process of its own
  under callgrind, instrumentation on only around the messages (after a warm-up run); per message.
- startup: `mqtt pub` of one message to mosquitto, the whole process under callgrind (start-up included), each
  tree byte-compiled first.

Prints test, REF, this, this/REF (the mean of --reps; the spread of the reps beside). Raw rows go to a new file
benchmarks/results/broker-instructions[-against-REF]-DATE[-N].jsonl, headed by the CPU model (lscpu).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _against import AgainstError, compiled_here, prepare
from _loadgen import MOSQUITTO, LoadGen, mosquitto_conf
from _results import cpu_model, results_dir
from broker import start_broker, stop_brokers
from lat_instructions import WARM_UP, counted_run, free_port, total_instructions, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = Path(__file__).resolve().parent
GROUPS = ("fanin", "fanout", "persist", "lat", "bridge", "startup")
IDLE_SECONDS = 6
FEW = 10  # messages of the short count of each row (connects, subscriptions and disconnects cancel out)
BRIDGE_MESSAGES = 4000


@dataclass(frozen=True)
class Row:
    """One broker row: its load, and which broker of the tree takes it (`persistence`: the one with a file)."""

    group: str
    name: str
    qos: int
    size: int = 64
    pubs: int = 1
    subs: int = 1
    rate: float = 10.0  # messages a second in all: each one alone at valgrind's pace
    persistence: bool = False
    weight: int = 1  # the row's messages are --messages divided by this (a fan-out message is ten deliveries)


BROKER_ROWS = (
    *(Row("fanin", f"fan-in 4->1 QoS {q} {s} B", q, s, pubs=4, rate=20) for s in (64, 1024) for q in (0, 1, 2)),
    *(Row("fanout", f"fan-out 1->10 QoS {q} 64 B", q, subs=10, rate=8, weight=2) for q in (0, 1)),
    Row("persist", "persistent fan-in QoS 1, persistence off", 1, rate=8),
    Row("persist", "persistent fan-in QoS 1, persistence on", 1, rate=8, persistence=True),
    *(Row("lat", f"latency 10/s QoS {q} 64 B", q) for q in (0, 1, 2)),
)
#: The interpreter, run with PYTHONPATH set to a tree: -P keeps the working directory (a checkout) off the path.
PYTHON = (sys.executable, "-P")
BRIDGE_NAME = "bridge path QoS 1 (bridge_path.py)"
STARTUP_NAME = "one-shot mqtt pub (whole process)"

# Run under callgrind by `bridge_instructions`: bridge_path.py's loop with instrumentation on around the messages
# (its `profile` hook), the tree's mqtt_cli imported before bridge_path puts this checkout on the path.
BRIDGE_DRIVER = """
import os, subprocess, sys
tree, benchmarks, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, tree)
import mqtt_cli
assert mqtt_cli.__file__.startswith(tree), mqtt_cli.__file__
sys.path.insert(0, benchmarks)
import trio, bridge_path

class Instrumentation:
    def _set(self, state):
        subprocess.run(["callgrind_control", "-i", state, str(os.getpid())], capture_output=True, check=True)
    def enable(self):
        self._set("on")
    def disable(self):
        self._set("off")

trio.run(bridge_path.one_run, 500, 64, 4, None)
trio.run(bridge_path.one_run, count, 64, 4, Instrumentation())
"""


def tree_env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def check_tree(label: str, tree: Path) -> str:
    """The build `tree`'s mqtt_cli runs as (mqtt --version's words); exits if another mqtt_cli would run."""
    probe = "import mqtt_cli, mqtt_cli.buildmode as b; print(mqtt_cli.__file__); print(b.BUILD)"
    done = subprocess.run([*PYTHON, "-c", probe], cwd=ROOT, env=tree_env(tree), capture_output=True, text=True,
                          check=True)  # fmt: skip
    where, build = done.stdout.split("\n")[:2]
    if not Path(where).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"benchmarks/broker_instructions.py: {label} would run {where}, not {tree}'s mqtt_cli")
    if compiled_here() and not build.startswith("compiled"):
        raise SystemExit(f"benchmarks/broker_instructions.py: {label} runs {build}, not its compiled build")
    return build


class CountedBroker:
    """`mqtt serve` of a tree under callgrind, instrumentation off but while `count` runs (a dump each)."""

    def __init__(self, label: str, tree: Path, work: Path, extra: tuple[str, ...] = ()) -> None:
        self.label, self.port = label, free_port()
        self.out = work / f"callgrind-{label}-{self.port}.out"
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={self.out}",
               *PYTHON, "-m", "mqtt_cli", "serve", "--port", str(self.port), "--max-queued-messages", "0",
               "--max-inflight", "0", "--sys-interval", "0", *extra]  # fmt: skip
        self.proc = subprocess.Popen(cmd, cwd=work, env=tree_env(tree), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)  # fmt: skip
        self.idle_per_s = 0.0
        self.dumps: list[str] = []  # callgrind's files of the counts (for callgrind_annotate), in order

    def wait(self) -> None:
        wait_for_port(self.port, self.proc, 600)

    def count(self, run: Callable[[], object]) -> tuple[int, float]:
        """Instructions while `run` runs, and its duration."""
        instructions, took, dump = counted_run(self.proc.pid, self.out, run)
        self.dumps.append(dump.name)
        return instructions, took

    def measure_idle(self, load: LoadGen) -> None:
        """The idle broker's instructions a second, after a second of latency load has run its code once."""
        load.lat(self.port, rate=10, seconds=1, qos=1, size=64)
        time.sleep(1)  # the connections' ends done
        idle, took = self.count(lambda: time.sleep(IDLE_SECONDS))
        self.idle_per_s = idle / took

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(120)


def broker_row(load: LoadGen, broker: CountedBroker, row: Row, messages: int) -> dict[str, object]:
    """Instructions per message of `row` on `broker`: a count of FEW messages and one of FEW + messages."""
    records: list[dict[str, object]] = []

    def one(count: int) -> None:
        if row.group == "lat":
            records.append(load.lat(broker.port, rate=int(row.rate), seconds=count / row.rate, qos=row.qos,
                                    size=row.size))  # fmt: skip
            return
        run = f"{broker.label}-{time.monotonic_ns()}" if row.group == "persist" else None
        records.append(load.thru(broker.port, pattern="fanout" if row.subs > 1 else "fanin", pubs=row.pubs,
                                 subs=row.subs, qos=row.qos, size=row.size, count=count, rate=row.rate,
                                 persistent=run, workers=1 if run else None))  # fmt: skip

    one(WARM_UP)  # not counted: the row's first pass runs code for the first time (record __init__s, caches)
    records.clear()
    few, few_s = broker.count(lambda: one(FEW))
    many, many_s = broker.count(lambda: one(FEW + messages))
    sent = [published(r, row) for r in records]
    busy = (many - broker.idle_per_s * many_s) - (few - broker.idle_per_s * few_s)
    late = any(float(r.get("p99_us") or 0) >= 1e6 * row.pubs / row.rate for r in records)  # type: ignore[arg-type]
    lost = sum(int(r.get("lost") or 0) for r in records)  # type: ignore[call-overload]
    return {"per_message": busy / (sent[1] - sent[0]), "sent": sent, "late": late, "lost": lost,
            "p99_us": [r.get("p99_us") for r in records], "counts": [few, many], "dumps": broker.dumps[-2:],
            "seconds": [round(few_s, 2), round(many_s, 2)]}  # fmt: skip


def published(record: dict[str, object], row: Row) -> int:
    """Messages the run published (latency runs: the subscriber's count; a fan-out's deliveries over its fan)."""
    for field in ("sent", "delivered", "received"):
        value = record.get(field)
        if isinstance(value, int) and value:
            return value if field == "sent" else value // row.subs
    raise SystemExit(f"benchmarks/broker_instructions.py: the load did not complete: {record}")


def bridge_instructions(tree: Path, work: Path) -> dict[str, object]:
    out = work / f"callgrind-bridge-{time.monotonic_ns()}.out"
    driver = work / "bridge_driver.py"
    driver.write_text(BRIDGE_DRIVER)
    subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                    *PYTHON, str(driver), str(tree), str(BENCHMARKS), str(BRIDGE_MESSAGES)],
                   cwd=work, env=tree_env(tree), capture_output=True, check=True)  # fmt: skip
    return {"per_message": total_instructions(out) / BRIDGE_MESSAGES, "sent": [BRIDGE_MESSAGES]}


def startup_instructions(tree: Path, work: Path, port: int) -> dict[str, object]:
    out = work / f"callgrind-startup-{time.monotonic_ns()}.out"
    pub = [*PYTHON, "-m", "mqtt_cli", "pub", "-h", "127.0.0.1", "-p", str(port), "-t", "bench/startup", "-m",
           "hello"]  # fmt: skip
    # Byte-compiled first, as pip does when it installs a wheel: with PYTHONDONTWRITEBYTECODE set (as in many
    # development shells) every run would otherwise compile the sources again, and count that.
    compileall.compile_dir(str(tree / "mqtt_cli"), quiet=1)
    subprocess.run(pub, cwd=work, env=tree_env(tree), capture_output=True, check=True)
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *pub], cwd=work,
                   env=tree_env(tree), capture_output=True, check=True)  # fmt: skip
    return {"per_message": total_instructions(out), "sent": [1]}



def new_results_path(against: str | None) -> Path:
    """A file name no earlier run used (results are never overwritten)."""
    stem = "broker-instructions" + (f"-against-{against}" if against else "") + f"-{time.strftime('%Y-%m-%d')}"
    path, n = results_dir() / f"{stem}.jsonl", 1
    while path.exists():
        n += 1
        path = results_dir() / f"{stem}-{n}.jsonl"
    return path


def run_rep(rep: int, order: list[str], trees: dict[str, Path], groups: set[str], args: argparse.Namespace,
            work: Path, load: LoadGen, emit: Callable[[dict[str, object]], None]) -> None:  # fmt: skip
    """One rep: every row for every tree, the trees in `order`."""
    rows = [r for r in BROKER_ROWS if r.group in groups]
    if rows:
        brokers: dict[tuple[str, bool], CountedBroker] = {}
        try:
            for label in order:
                for persistence in {r.persistence for r in rows}:
                    extra = ("--persistence", str(work / f"{label}-{rep}.db")) if persistence else ()
                    name = label.replace("/", "_") + ("-persist" if persistence else "")
                    brokers[label, persistence] = CountedBroker(name, trees[label], work, extra)
            for broker in brokers.values():
                broker.wait()
                broker.measure_idle(load)
            for row in rows:
                for label in order:
                    broker = brokers[label, row.persistence]
                    result = broker_row(load, broker, row, max(args.messages // row.weight, 10))
                    emit({"test": row.name, "label": label, "rep": rep, "idle_per_s": round(broker.idle_per_s),
                          **result})  # fmt: skip
        finally:
            for broker in brokers.values():
                broker.stop()
    if "bridge" in groups:
        for label in order:
            emit({"test": BRIDGE_NAME, "label": label, "rep": rep, **bridge_instructions(trees[label], work)})
    if "startup" in groups:
        port = free_port()
        conf = work / "mosquitto.conf"
        conf.write_text(mosquitto_conf(port))
        mosquitto = {"mosquitto": start_broker("mosquitto", port, [MOSQUITTO, "-c", str(conf)])}
        try:
            for label in order:
                emit({"test": STARTUP_NAME, "label": label, "rep": rep,
                      **startup_instructions(trees[label], work, port)})  # fmt: skip
        finally:
            stop_brokers(mosquitto)


def print_table(rows: list[dict[str, object]], labels: list[str]) -> None:
    """test, REF, this, this/REF: means over the reps, each with its spread ((max - min) / mean)."""
    tests = list(dict.fromkeys(str(r["test"]) for r in rows))
    print(f"{'test':<44}" + "".join(f"{lb[:12]:>14}{'spread':>8}" for lb in labels)
          + (f"{'this/' + labels[0][:8]:>14}" if len(labels) > 1 else ""))  # fmt: skip
    for test in tests:
        line, means = f"{test:<44}", []
        for label in labels:
            values = [float(r["per_message"]) for r in rows if r["test"] == test and r["label"] == label]  # type: ignore[arg-type]
            mean = statistics.fmean(values) if values else float("nan")
            spread = (max(values) - min(values)) / mean if len(values) > 1 and mean else 0.0
            late = any(r.get("late") or r.get("lost") for r in rows if r["test"] == test and r["label"] == label)
            line += f"{mean:>14,.0f}{spread:>7.1%}" + ("!" if late else " ")
            means.append(mean)
        if len(labels) > 1:
            line += f"{means[1] / means[0] if means[0] else float('nan'):>14.3f}"
        print(line)
    print("(instructions per message; startup: per run; ! = a run fell behind its pace or lost messages)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", metavar="REF", help="the commit (or branch) to count beside this checkout")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--messages", type=int, default=200, help="messages of each row's long count beyond the short")
    parser.add_argument("--only", default=",".join(GROUPS), help="row groups: " + ", ".join(GROUPS))
    parser.add_argument("--work", type=Path, help="work directory (kept; a REF tree there is reused)")
    parser.add_argument("--quick", action="store_true", help="this checkout's one-shot row once")
    parser.add_argument("--table", type=Path, metavar="JSONL", help="print the table of an earlier run's raw rows")
    args = parser.parse_args()
    if args.table:
        lines = [json.loads(line) for line in args.table.read_text().splitlines()]
        head, rows = lines[0], lines[1:]
        print_table(rows, [head["against"], "this"] if head.get("against") else ["this"])
        return 0
    if args.quick:
        args.reps, args.only, args.against = 1, "startup", None
    groups = set(args.only.split(","))
    if groups - set(GROUPS):
        parser.error(f"--only: unknown group {sorted(groups - set(GROUPS))[0]!r} ({', '.join(GROUPS)})")
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate", "lscpu"):
        if shutil.which(tool) is None:
            print(f"benchmarks/broker_instructions.py: {tool} is missing (install valgrind)", file=sys.stderr)
            return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="mqtt-broker-instr-"))
    work.mkdir(parents=True, exist_ok=True)
    trees = {"this": ROOT}
    if args.against:
        try:
            trees = {args.against: prepare(args.against, work / f"against-{args.against}"), "this": ROOT}
        except AgainstError as e:
            print(f"benchmarks/broker_instructions.py --against: {e}", file=sys.stderr)
            return 2
    builds = {label: check_tree(label, tree) for label, tree in trees.items()}
    load = LoadGen(work)
    labels = list(trees)
    out_path = new_results_path(args.against)
    machine = cpu_model()
    rows: list[dict[str, object]] = []
    with out_path.open("w") as out:
        out.write(json.dumps({"cpu": machine, "builds": builds, "messages": args.messages, "reps": args.reps,
                              "load": load.name, "against": args.against}) + "\n")  # fmt: skip

        def emit(row: dict[str, object]) -> None:
            rows.append(row)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(json.dumps(row), file=sys.stderr, flush=True)

        for rep in range(args.reps):
            order = labels[rep % len(labels) :] + labels[: rep % len(labels)]
            run_rep(rep + 1, order, trees, groups, args, work, load, emit)
    print(f"user-space instructions under callgrind, {', '.join(f'{lb}: {b}' for lb, b in builds.items())}; "
          f"{args.reps} reps, trees' order rotating; {machine}")  # fmt: skip
    print_table(rows, labels)
    print(f"load average {os.getloadavg()[0]:.2f} at the end; raw results: {out_path}")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
