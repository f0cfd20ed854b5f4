"""Start-up time of the ``mqtt`` command: whole-process wall time, median of N runs.

    .venv/bin/python benchmarks/startup.py [-n 30] [--builds compiled,pure] [--goal-ms 60] [--max-ms 150]
                                           [--one-shot-max-ms 60] [--skip-version]
    .venv/bin/python benchmarks/startup.py --zipapp dist/mqtt.pyz [-n 10] [--zipapp-max-ratio 1.5]

One-shot clients (issue 20): ``mqtt pub -t x -m y`` at QoS 0 and 1, ``mqtt sub -C 1`` (a retained message)
and ``mqtt rr`` (a responder answers), each against ``mqtt serve`` and against mosquitto, beside Debian's
mosquitto_pub, mosquitto_sub and mosquitto_rr doing the same, ``mqtt pub`` with the fast path turned off
(MQTT_CLI_FAST=0: typer and trio), and ``python -c pass`` as the floor. Each of our commands runs with each
build of --builds (default: compiled and pure when the compiled build is current, else pure; pure is
MQTT_CLI_PURE=1); the brokers run as they are. The cases run interleaved (one run of each in turn, N rounds),
so that the machine's other load falls on all of them alike; the ratios to mosquitto's clients, to the floor
and between the builds are of the same run. Each of our one-shot rows says whether its median is within the
goal (--goal-ms, issue 20's 60 ms); a last table puts the builds side by side. With --one-shot-max-ms, exits 1
when one of our one-shot medians is above it.

Then ``mqtt --version`` through the installed console script (.venv/bin/mqtt) and through
``python -m mqtt_cli``, for comparison ``--version`` answered by typer (``mqtt --version completions bash``
skips the fast path) and ``mqtt --help`` (typer and rich), and the import cost of the libraries the CLI stands
on (``python -X importtime``). With --max-ms, exits 1 when a ``--version`` median is above it.

--zipapp PATH (`make zipapp` first): the zipapp against the installed command (.venv/bin/mqtt), one-shot
``mqtt pub`` QoS 0 to mosquitto and ``--version``, interleaved, median of -n runs (10 is the issue's measure).
The zipapp runs with the venv's interpreter (the installed command's: the same start-up, so the difference is
the zipapp's own), with the interpreter the venv is made from (its site-packages' .pth files run at each start)
and through its own ``#!/usr/bin/env python3`` (whatever python3 the PATH gives: a pyenv shim, say, costs its
own start); its first run, which unpacks it into a temporary SHIV_ROOT, is not counted. Prints the ratios to the
installed command, also less each interpreter's ``-c pass`` (goal: at most 1.5x); --zipapp-max-ratio exits 1
when the zipapp under the venv's interpreter is above it.

mqtt_cli is byte-compiled first, as pip does when it installs a wheel (with PYTHONDONTWRITEBYTECODE set, an
editable install would otherwise compile its modules from source on every run).
"""

import argparse
import compileall
import contextlib
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))

from _results import cpu_model  # noqa: E402


def wall_ms(cmd: list[str], runs: int) -> list[float]:
    """Wall time in ms of ``runs`` runs of ``cmd`` (after one warm-up run), output discarded."""
    env = {**os.environ, "COLUMNS": "80"}
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        times.append((time.perf_counter() - start) * 1000)
    return times


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"the broker on port {port} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.05)
    raise SystemExit(f"nothing listens on port {port} after {timeout} s")


@contextlib.contextmanager
def brokers(workdir: Path) -> Iterator[dict[str, int]]:
    """`mqtt serve` and, where installed, mosquitto, each on a free port of 127.0.0.1: name -> port."""
    procs: list[subprocess.Popen[bytes]] = []
    ports: dict[str, int] = {}
    try:
        port = _free_port()
        serve = subprocess.Popen([str(BIN / "mqtt"), "serve", "--host", "127.0.0.1", "-p", str(port)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env())  # fmt: skip
        procs.append(serve)
        _wait_port(port, serve)
        ports["mqtt serve"] = port
        mosquitto = shutil.which("mosquitto") or ("/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else "")
        if mosquitto:
            port = _free_port()
            conf = workdir / "mosquitto.conf"
            conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\n")
            proc = subprocess.Popen([mosquitto, "-c", str(conf)], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)  # fmt: skip
            procs.append(proc)
            _wait_port(port, proc)
            ports["mosquitto"] = port
        yield ports
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT), **extra}


class Responder:
    """Answers every request on `topic` at once (MQTT 5.0: to its response topic, with its correlation data),
    for the rr cases: a blocking client (mqtt_cli.net.blocking) in a thread."""

    def __init__(self, port: int, topic: str) -> None:
        from mqtt_cli.core.packets import Subscription
        from mqtt_cli.core.properties import Properties
        from mqtt_cli.net.blocking import BlockingClient
        from mqtt_cli.net.endpoints import Endpoint
        from mqtt_cli.net.settings import ClientSettings

        self.client = BlockingClient(ClientSettings(Endpoint("mqtt", "127.0.0.1", port), client_id="", version=5))
        self.client.connect()
        self.client.subscribe([Subscription(topic, 0)])
        self._props = Properties
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from mqtt_cli.net.blocking import WorkTimedOut

        while not self.stop:
            self.client.deadline = time.monotonic() + 0.2  # to look at `stop` now and then
            try:
                msg = self.client.next_message()
            except WorkTimedOut:
                continue
            if not hasattr(msg, "properties") or not msg.properties.response_topic:
                continue
            self.client.deadline = None
            props = self._props(correlation_data=msg.properties.correlation_data)
            self.client.publish(msg.properties.response_topic, b"answer", 0, False, props)
            self.client.wait_acknowledged()

    def close(self) -> None:
        self.stop = True
        self.thread.join(5)
        self.client.disconnect()


#: The builds of the hot modules (mqtt_cli/buildmode.py) and the environment that picks each.
BUILDS = {"compiled": {"MQTT_CLI_PURE": "0"}, "pure": {"MQTT_CLI_PURE": "1"}}


def compiled_build_current() -> bool:
    """Whether `mqtt --version` runs the compiled build (present, current, for this interpreter)."""
    mqtt = str(BIN / "mqtt")
    done = subprocess.run([mqtt, "--version"], capture_output=True, text=True, env=_env(**BUILDS["compiled"]))
    return "compiled" in done.stdout


def one_shot_cases(ports: dict[str, int], builds: list[str]) -> list[tuple[str, list[str], dict[str, str], str]]:
    """(name, command, extra environment, group): ours (with each build) and mosquitto's clients against each
    broker. Our rows are named `mqtt ... [build]`; the typer path runs with the first build only."""
    mqtt = str(BIN / "mqtt")
    cases: list[tuple[str, list[str], dict[str, str], str]] = [
        ("python -c pass (floor)", [sys.executable, "-c", "pass"], {}, "")
    ]
    have_mosquitto = all(shutil.which(c) for c in ("mosquitto_pub", "mosquitto_sub", "mosquitto_rr"))
    for broker, port in ports.items():
        at = ["-h", "127.0.0.1", "-p", str(port)]
        work = {
            "pub QoS 0": [*at, "-t", "bench/x", "-m", "y"],
            "pub QoS 1": [*at, "-t", "bench/x", "-m", "y", "-q", "1"],
            "sub -C 1 (retained)": [*at, "-t", "bench/retained", "-C", "1"],
            "rr": [*at, "-t", "bench/req", "-e", "bench/resp", "-m", "q", "-W", "10"],
        }
        for what, args in work.items():
            verb = what.split()[0]
            group = f"{what} -> {broker}"
            for build in builds:
                cases.append((f"mqtt {what} -> {broker} [{build}]", [mqtt, verb, *args], BUILDS[build], group))
            if what == "pub QoS 0":
                cases.append((f"mqtt {what} -> {broker}, typer path [{builds[0]}]", [mqtt, verb, *args],
                              {"MQTT_CLI_FAST": "0", **BUILDS[builds[0]]}, group))  # fmt: skip
            if have_mosquitto:
                extra = ["-V", "5"] if verb == "rr" else []  # mosquitto_rr needs 5.0 anyway: said plainly
                cases.append((f"mosquitto_{verb} {what[len(verb) + 1:]} -> {broker}".replace("  ", " "),
                              [f"mosquitto_{verb}", *args, *extra], {}, group))  # fmt: skip
    return cases


def run_timed(name: str, cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Runs `cmd` (output discarded): its wall time and its CPU time (user + system), in ms. Exits when it fails."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    assert proc.stderr is not None
    said = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = (time.perf_counter() - start) * 1000
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"{name}: exit {proc.returncode}: {said.decode().strip()}")
    return elapsed, (usage.ru_utime + usage.ru_stime) * 1000


def one_shot(runs: int, limit: float | None, goal: float, builds: list[str]) -> list[str]:
    """Runs the one-shot cases interleaved; prints medians, same-run ratios and the goal; returns what is over
    `limit`."""
    over: list[str] = []
    with tempfile.TemporaryDirectory() as tmp, brokers(Path(tmp)) as ports:
        responders = []
        for port in ports.values():
            subprocess.run([str(BIN / "mqtt"), "pub", "-h", "127.0.0.1", "-p", str(port), "-t", "bench/retained",
                            "-m", "kept", "-r", "-q", "1"], check=True, env=_env())  # fmt: skip
            responders.append(Responder(port, "bench/req"))
        try:
            cases = one_shot_cases(ports, builds)
            times: dict[str, list[float]] = {name: [] for name, _, _, _ in cases}
            cpu: dict[str, list[float]] = {name: [] for name, _, _, _ in cases}
            for round_ in range(runs + 1):  # the first round warms up
                for name, cmd, extra, _ in cases:
                    elapsed, used = run_timed(name, cmd, _env(**extra))
                    if round_:
                        times[name].append(elapsed)
                        cpu[name].append(used)
        finally:
            for responder in responders:
                responder.close()
    floor = statistics.median(times[cases[0][0]])
    print(f"one-shot clients, wall time of the whole process, median of {runs} interleaved runs (ms); "
          f"goal: ours <= {goal:g} ms")  # fmt: skip
    print(f"{'command':<62} {'median':>7} {'min':>7} {'max':>7} {'- floor':>7} {'/ mosq.':>7} {'CPU':>6}  goal")
    reference = {group: statistics.median(times[name]) for name, _, _, group in cases if name.startswith("mosq")}
    medians = {name: statistics.median(times[name]) for name in times}
    for name, _, _, group in cases:
        median = medians[name]
        ratio = f"{median / reference[group]:7.2f}" if group in reference and not name.startswith("mosq") else " " * 7
        ours = name.startswith("mqtt") and "typer" not in name
        verdict = ("ok" if median <= goal else "OVER") if ours else ""
        print(f"{name:<62} {median:7.1f} {min(times[name]):7.1f} {max(times[name]):7.1f} {median - floor:7.1f} "
              f"{ratio} {statistics.median(cpu[name]):6.1f}  {verdict}")  # fmt: skip
        if limit is not None and ours and median > limit:
            over.append(f"{name}: median {median:.1f} ms > {limit} ms")
    if len(builds) > 1:
        print()
        print(f"the builds side by side, same run (median ms; goal {goal:g} ms)")
        print(f"{'command':<44} " + " ".join(f"{b:>9}" for b in builds) + f" {builds[1] + '/' + builds[0]:>15}")
        for name, _, _, _ in cases:
            if not name.startswith("mqtt") or "typer" in name or not name.endswith(f"[{builds[0]}]"):
                continue
            row = name[: -len(f" [{builds[0]}]")]
            values = [medians[f"{row} [{b}]"] for b in builds]
            print(f"{row:<44} " + " ".join(f"{v:9.1f}" for v in values) + f" {values[1] / values[0]:15.2f}")
    print("CPU: the median CPU time (user + system) of the process, which a loaded machine inflates less than the")
    print("wall time; `goal` holds the wall time to the goal.")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    return over


def zipapp_vs_installed(pyz: Path, runs: int, max_ratio: float | None) -> list[str]:
    """Start-up of the zipapp against the installed console script; returns what is over `max_ratio`."""
    base_python = getattr(sys, "_base_executable", sys.executable)  # the venv's own interpreter, not its link
    with tempfile.TemporaryDirectory() as tmp, brokers(Path(tmp)) as ports:
        port = ports.get("mosquitto", ports["mqtt serve"])
        at = ["-h", "127.0.0.1", "-p", str(port)]
        # The installed command runs this checkout (PYTHONPATH, as elsewhere here), the zipapp its own copy of it.
        zipapp_env = {k: v for k, v in _env(SHIV_ROOT=str(Path(tmp) / "shiv")).items() if k != "PYTHONPATH"}
        subprocess.run([str(pyz), "--version"], check=True, env=zipapp_env, stdout=subprocess.DEVNULL)  # unpacks it
        venv_python = str(BIN / "python")
        commands = {
            "installed (.venv/bin/mqtt)": [str(BIN / "mqtt")],
            f"zipapp (.venv/bin/python {pyz.name})": [venv_python, str(pyz)],
            f"zipapp ({Path(base_python).name} {pyz.name})": [base_python, str(pyz)],
            f"zipapp (./{pyz.name}, its #! line)": [str(pyz)],
        }
        # Each interpreter's own start (site and its .pth files included) is the floor under its rows.
        floors = {venv_python: [venv_python, "-c", "pass"], base_python: [base_python, "-c", "pass"]}
        floor_of = {name: venv_python if cmd[0] in (str(BIN / "mqtt"), venv_python) else base_python
                    for name, cmd in commands.items()}  # fmt: skip
        envs = {name: _env() if name.startswith("installed") else zipapp_env for name in commands}
        builds = {name: subprocess.run([*cmd, "--version"], capture_output=True, text=True, env=envs[name])
                  .stdout.strip() for name, cmd in commands.items()}  # fmt: skip
        work = {"pub QoS 0": ["pub", *at, "-t", "bench/x", "-m", "y"], "--version": ["--version"]}
        times: dict[tuple[str, str], list[float]] = {(n, w): [] for n in commands for w in work}
        cpu: dict[tuple[str, str], list[float]] = {(n, w): [] for n in commands for w in work}
        floor_times: dict[str, list[float]] = {python: [] for python in floors}
        for round_ in range(runs + 1):  # the first round warms up
            for python, cmd in floors.items():
                elapsed, _ = run_timed(python, cmd, zipapp_env)
                if round_:
                    floor_times[python].append(elapsed)
            for what, args in work.items():
                for name, cmd in commands.items():
                    elapsed, used = run_timed(name, [*cmd, *args], envs[name])
                    if round_:
                        times[(name, what)].append(elapsed)
                        cpu[(name, what)].append(used)
    over = []
    print(f"the zipapp against the installed command, median of {runs} interleaved runs (ms), wall and CPU")
    for name, version in builds.items():
        print(f"  {name}: {version}")
    floor = {python: statistics.median(values) for python, values in floor_times.items()}
    for python, value in floor.items():
        print(f"  {python} -c pass (the floor of its rows): {value:.1f} ms")
    print(f"{'command':<44} {'what':<10} {'wall':>7} {'ratio':>6} {'CPU':>7} {'ratio':>6} {'- floor':>8} {'ratio':>6}")
    installed = next(iter(commands))
    for what in work:
        ref = statistics.median(times[(installed, what)])
        ref_cpu = statistics.median(cpu[(installed, what)])
        ref_net = ref - floor[floor_of[installed]]
        for name in commands:
            wall, used = statistics.median(times[(name, what)]), statistics.median(cpu[(name, what)])
            net = wall - floor[floor_of[name]]
            print(f"{name:<44} {what:<10} {wall:7.1f} {wall / ref:6.2f} {used:7.1f} {used / ref_cpu:6.2f} "
                  f"{net:8.1f} {net / ref_net:6.2f}")  # fmt: skip
            # The goal is held by the zipapp under the installed command's own interpreter (same start-up).
            if max_ratio is not None and floor_of[name] == floor_of[installed] and wall / ref > max_ratio:
                over.append(f"{name} {what}: {wall / ref:.2f}x the installed command > {max_ratio}x")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    return over


def import_ms(module: str) -> float:
    """Cumulative import time in ms of ``module`` in a fresh interpreter (``-X importtime``)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        check=True,
        capture_output=True,
        text=True,
    )
    pattern = re.compile(rf"^import time:\s+\d+ \|\s+(\d+) \| {re.escape(module)}$", re.MULTILINE)
    match = pattern.search(proc.stderr)
    if match is None:  # already imported by site: costs nothing more
        return 0.0
    return int(match.group(1)) / 1000


def _machine() -> str:
    model = cpu_model()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{model}, {os.cpu_count()} CPUs, load average {load}, Python {sys.version.split()[0]}\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("-n", "--runs", type=int, default=30, help="runs per command (default 30)")
    parser.add_argument("--max-ms", type=float, help="fail when a --version median exceeds this")
    parser.add_argument("--one-shot-max-ms", type=float, help="fail when one of our one-shot medians exceeds this")
    parser.add_argument("--goal-ms", type=float, default=60.0, help="the one-shot goal each row is held to (60)")
    parser.add_argument("--builds", help="our builds to run, of compiled,pure (default: both when the compiled "
                        "build is current, else pure)")  # fmt: skip
    parser.add_argument("--skip-version", action="store_true", help="only the one-shot clients")
    parser.add_argument("--zipapp", type=Path, help="only the zipapp (make zipapp) against the installed command")
    parser.add_argument("--zipapp-max-ratio", type=float, help="--zipapp: fail when its median is above this ratio")
    parser.add_argument("--quick", action="store_true", help="3 runs of each (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.runs = 3
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the brokers are stopped on the way out

    mqtt = BIN / "mqtt"
    if not mqtt.exists():
        print(f"no console script at {mqtt}: run `make install` first", file=sys.stderr)
        return 1
    compileall.compile_dir(ROOT / "mqtt_cli", quiet=1)
    builds = (args.builds or ("compiled,pure" if compiled_build_current() else "pure")).split(",")
    if unknown := [b for b in builds if b not in BUILDS]:
        parser.error(f"--builds: unknown {', '.join(unknown)} (use compiled, pure or both)")
    if "compiled" in builds and not compiled_build_current():
        parser.error("--builds compiled: no current compiled build (make compiled), or it is stale")
    print(_machine())
    if args.zipapp:
        if not args.zipapp.is_file():
            parser.error(f"--zipapp {args.zipapp}: no such file (make zipapp writes dist/mqtt.pyz)")
        over = zipapp_vs_installed(args.zipapp.resolve(), args.runs, args.zipapp_max_ratio)
        for line in over:
            print(line, file=sys.stderr)
        return 1 if over else 0
    over = one_shot(args.runs, args.one_shot_max_ms, args.goal_ms, builds)
    if args.skip_version:
        for line in over:
            print(line, file=sys.stderr)
        return 1 if over else 0
    cases = [
        ("python -c pass (floor)", [sys.executable, "-c", "pass"], False),
        ("mqtt --version (console script)", [str(mqtt), "--version"], True),
        ("python -m mqtt_cli --version", [sys.executable, "-m", "mqtt_cli", "--version"], True),
        ("--version through typer (no fast path)", [str(mqtt), "--version", "completions", "bash"], False),
        ("mqtt --help (loads typer + rich)", [str(mqtt), "--help"], False),
    ]
    pyz = ROOT / "dist" / "mqtt.pyz"
    if pyz.exists():
        cases.append(("dist/mqtt.pyz --version", [sys.executable, str(pyz), "--version"], False))

    print(f"start-up, wall time of the whole process, {args.runs} runs each (ms)")
    print(f"{'command':<40} {'median':>8} {'min':>8} {'max':>8}")
    for name, cmd, checked in cases:
        times = wall_ms(cmd, args.runs)
        median = statistics.median(times)
        print(f"{name:<40} {median:8.1f} {min(times):8.1f} {max(times):8.1f}")
        if checked and args.max_ms is not None and median > args.max_ms:
            over.append(f"{name}: median {median:.1f} ms > {args.max_ms} ms")

    print()
    print("import cost, python -X importtime, cumulative (ms)")
    for module in ("typer", "rich", "trio", "mqtt_cli", "mqtt_cli.app"):
        print(f"{'import ' + module:<40} {import_ms(module):8.1f}")

    for line in over:
        print(line, file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
