"""``mqtt bench conn|pub|sub|pubsub``: load a broker and measure rates, loss and end-to-end latency
(docs/bench.md). The engine is mqtt_cli/net/bench.py; the figures mqtt_cli/core/benchstats.py.

No `from __future__ import annotations` in command modules (see pub.py).
"""

import enum
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mqtt_cli.exit_codes import EXIT_CONNECT_FAILED, EXIT_EXPECT_NOT_MET, EXIT_INTERRUPTED

from . import _options as o
from . import fail, say

if TYPE_CHECKING:
    from mqtt_cli.net.bench import Tick

LOAD = "Load"
OUT = "Results"


class ClockChoice(enum.StrEnum):
    kernel = "kernel"
    user = "user"


class Mode(enum.StrEnum):
    conn = "conn"
    pub = "pub"
    sub = "sub"
    pubsub = "pubsub"


def bench(
    ctx: typer.Context,
    mode: Annotated[Mode, typer.Argument(help="conn: hold connections; pub, sub, or pubsub (both, end to end).")],
    clients: Annotated[
        int,
        typer.Option(
            "-c",
            "--count",
            min=1,
            help="Clients: publishers (pub, pubsub), subscribers (sub), connections (conn).",
            rich_help_panel=LOAD,
        ),
    ] = 1,
    subs: Annotated[int, typer.Option("--subs", min=0, help="pubsub: subscribers.", rich_help_panel=LOAD)] = 1,
    interval: Annotated[
        float,
        typer.Option("-i", "--interval", min=0, help="Milliseconds between connects.", rich_help_panel=LOAD),
    ] = 0.0,
    interval_of_msg: Annotated[
        float,
        typer.Option(
            "-I",
            "--interval-of-msg",
            min=0,
            rich_help_panel=LOAD,
            help="Milliseconds between messages, per publisher; 0: as fast as the window allows.",
        ),
    ] = 1000.0,
    rate: Annotated[
        float | None,
        typer.Option("--rate", min=0.001, help="Total target messages/s (instead of -I).", rich_help_panel=LOAD),
    ] = None,
    topic: Annotated[
        str,
        typer.Option(
            "-t",
            "--topic",
            rich_help_panel=LOAD,
            help="Topic; %i client number, %c client id, %u user name. Subscribers use it with '+'.",
        ),
    ] = "bench/%i",
    size: Annotated[
        int, typer.Option("-s", "--size", min=0, help="Payload bytes (at least 20).", rich_help_panel=LOAD)
    ] = 256,
    qos: Annotated[int, typer.Option("-q", "--qos", min=0, max=2, help="QoS.", rich_help_panel=LOAD)] = 0,
    retain: Annotated[bool, typer.Option("-r", "--retain", help="Retain the messages.", rich_help_panel=LOAD)] = False,
    limit: Annotated[
        int,
        typer.Option("-L", "--limit", min=0, help="Total messages (0: no limit).", rich_help_panel=LOAD),
    ] = 0,
    start_number: Annotated[
        int,
        typer.Option("-n", "--startnumber", min=0, help="First client number (%i).", rich_help_panel=LOAD),
    ] = 1,
    clean: Annotated[
        bool,
        typer.Option("--clean/--no-clean", "-C", help="Clean sessions (-C, the default) or not.", rich_help_panel=LOAD),
    ] = True,
    duration: Annotated[
        float,
        typer.Option(
            "--duration",
            min=0,
            rich_help_panel=LOAD,
            help="Seconds of publishing (conn, sub: of holding); 0: until -L or Ctrl-C.",
        ),
    ] = 0.0,
    inflight: Annotated[
        int, typer.Option("--inflight", min=1, max=65535, help="QoS 1/2 window per publisher.", rich_help_panel=LOAD)
    ] = 100,
    workers: Annotated[
        int | None,
        typer.Option("--workers", min=1, help="Processes (default: the cores it may run on).", rich_help_panel=LOAD),
    ] = None,
    parallel: Annotated[
        int,
        typer.Option("--parallel", min=1, help="Handshakes in flight per worker.", rich_help_panel=LOAD),
    ] = 64,
    drain: Annotated[
        float,
        typer.Option(
            "--drain",
            min=0,
            help="Seconds without a delivery before the missing ones count as lost.",
            rich_help_panel=LOAD,
        ),
    ] = 2.0,
    ifaddr: Annotated[
        str | None,
        typer.Option(
            "--ifaddr",
            help="Source addresses, comma-separated (default: 127.0.0.x as needed).",
            rich_help_panel=LOAD,
        ),
    ] = None,
    prefix: Annotated[
        str | None, typer.Option("--prefix", help="Client id prefix (default: bench-PID-).", rich_help_panel=LOAD)
    ] = None,
    json_file: Annotated[
        Path | None,
        typer.Option("--json", help="Write every figure to this file (JSON).", rich_help_panel=OUT),
    ] = None,
    expect: Annotated[
        str | None,
        typer.Option(
            "--expect",
            rich_help_panel=OUT,
            help="Conditions for exit 0, e.g. 'loss=0,p99<5ms,delivered_per_s>=1000'; else exit 9.",
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="No live line.", rich_help_panel=OUT)] = False,
    clock: Annotated[
        ClockChoice,
        typer.Option(
            "--clock",
            rich_help_panel=OUT,
            help="Receive times: the kernel's arrival timestamps where it gives them (plain TCP on Linux), or the "
            "time recv() returned (user), as most load generators measure.",
        ),
    ] = ClockChoice.kernel,
    broker_pid: Annotated[
        int | None,
        typer.Option(
            "--broker-pid",
            min=1,
            rich_help_panel=OUT,
            help="Also report this broker process's CPU use over the run, beside the bench's own.",
        ),
    ] = None,
    host: o.connection_option("host") = None,
    port: o.connection_option("port") = None,
    url: Annotated[
        str | None,
        typer.Option("--url", envvar="MQTT_URL", help="Broker URL (mqtt[s]://, ws[s]://).", rich_help_panel=o.CONN),
    ] = None,
    unix: o.connection_option("unix") = None,
    keepalive: o.connection_option("keepalive") = None,
    protocol_version: o.connection_option("protocol_version") = None,
    connect_timeout: o.connection_option("connect_timeout") = None,
    profile: o.connection_option("profile") = None,
    username: o.connection_option("username") = None,
    password: o.connection_option("password") = None,
    password_file: o.connection_option("password_file") = None,
    cafile: o.connection_option("cafile") = None,
    capath: o.connection_option("capath") = None,
    cert: o.connection_option("cert") = None,
    key: o.connection_option("key") = None,
    insecure: o.connection_option("insecure") = None,
    tls_version: o.connection_option("tls_version") = None,
    alpn: o.connection_option("alpn") = None,
) -> None:
    """Load a broker: connections, publishers, subscribers; rates, loss, duplicates and latency, live.

    Exit codes: 0 done (and every --expect condition met), 2 bad usage, 3 no client could connect, 9 an
    --expect condition not met, 130 interrupted (the summary so far is printed) (docs/exit-codes.md).
    """
    from mqtt_cli.core.benchstats import HEADER_SIZE, Clock, parse_expect, subscription_filter, summary
    from mqtt_cli.net import bench as engine

    params: dict[str, Any] = {name: None for name in o.CONNECTION_PARAMS}
    params.update({k: v for k, v in locals().items() if k in o.CONNECTION_PARAMS})
    params.update(client_id="bench", reconnect=False, debug=False, will_qos=0, will_retain=False)
    settings = o.client_settings(params, ctx).settings
    known = set(summary(_empty_figures(), None))
    try:
        conditions = parse_expect(expect, known) if expect is not None else []
    except ValueError as err:
        fail(f"--expect {err}", o.EXIT_USAGE)
    if size < HEADER_SIZE and mode in (Mode.pub, Mode.pubsub):
        size = HEADER_SIZE
    version = settings.version or 4  # auto: 3.1.1, as the C generator
    from mqtt_cli.core.benchstats import expand_topic
    from mqtt_cli.core.topics import topic_filter_error, topic_name_error

    if mode in (Mode.pub, Mode.pubsub) and (err := topic_name_error(expand_topic(topic, 1, "id", "user"))):
        fail(f"-t {topic!r}: {err}", o.EXIT_USAGE)
    if mode in (Mode.sub, Mode.pubsub) and (err := topic_filter_error(subscription_filter(topic))):
        fail(f"-t {topic!r}: {err}", o.EXIT_USAGE)
    spec = engine.Spec(
        mode=engine.Mode(mode.value),
        endpoint=settings.endpoint,
        ssl_context=settings.ssl_context,
        version=version,
        keepalive=settings.keepalive,
        clean=clean,
        username=settings.username,
        password=settings.password,
        id_prefix=prefix if prefix is not None else f"bench-{os.getpid()}-",
        clients=clients,
        subs=subs if mode is Mode.pubsub else 0,
        start_number=start_number,
        connect_interval=interval / 1000,
        msg_interval=(clients / rate) if rate else interval_of_msg / 1000,
        limit=limit,
        duration=duration,
        topic=topic,
        sub_filter=subscription_filter(topic),
        size=size,
        qos=qos,
        sub_qos=qos,
        retain=retain,
        inflight=inflight,
        workers=min(workers or _usable_cpus(), clients + (subs if mode is Mode.pubsub else 0)),
        parallel=parallel,
        connect_timeout=settings.connect_timeout,
        drain=drain,
        source_addresses=[a.strip() for a in ifaddr.split(",") if a.strip()] if ifaddr else [],
        clock=Clock(clock.value),
        broker_pid=broker_pid,
    )
    live = _Live(quiet)
    try:
        outcome = engine.run(spec, live.tick)
    except engine.WorkerFailed as err:
        live.close()
        fail(str(err))
    live.close()
    figures = summary(outcome.figures, outcome.start_ns)
    figures.update(
        mode=mode.value,
        qos=qos,
        size=size,
        workers=spec.workers,
        interrupted=outcome.interrupted,
    )
    if outcome.fd_note:
        say(f"mqtt: {outcome.fd_note}")
    failed = [c.text for c in conditions if not c.check(figures)]
    figures["expect"] = {"conditions": [c.text for c in conditions], "failed": failed} if conditions else None
    _render(figures, mode)
    if json_file is not None:
        try:
            json_file.write_text(json.dumps(figures, indent=1) + "\n")
        except OSError as err:
            fail(f"--json {json_file}: {err.strerror}")
    if outcome.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    if not outcome.figures.connected:
        fail(f"no client could connect to {settings.endpoint} ({_errors(figures)})", EXIT_CONNECT_FAILED)
    if failed:
        fail(f"--expect not met: {', '.join(failed)}", EXIT_EXPECT_NOT_MET)


def _usable_cpus() -> int:
    """The cores this process may run on (taskset narrows them), else the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def _empty_figures() -> Any:
    from mqtt_cli.core.benchstats import Figures

    return Figures()


def _errors(figures: dict[str, Any]) -> str:
    errs = figures.get("errors") or {}
    return ", ".join(f"{k} {v}" for k, v in errs.items()) or "no errors"


class _Live:
    """A line a second: rich on a terminal (standard error), a JSON line on a pipe (standard output)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.tty = sys.stdout.isatty()
        self.live: Any = None
        self.last: tuple[int, int, int] | None = None

    def tick(self, tick: "Tick") -> None:
        if self.quiet:
            return
        from mqtt_cli.core.benchstats import summary

        f = tick.figures
        now = tick.now_ns
        prev_sent, prev_delivered, prev_ns = self.last or (0, 0, now - 1_000_000_000)
        span = max(1e-9, (now - prev_ns) / 1e9)
        self.last = (f.sent, f.delivered, now)
        line = {
            "elapsed": round((now - tick.start_ns) / 1e9, 3) if tick.start_ns else 0.0,
            "connected": f.connected,
            "failed": f.failed,
            "sent": f.sent,
            "delivered": f.delivered,
            "pub_rate": round((f.sent - prev_sent) / span, 1),
            "deliver_rate": round((f.delivered - prev_delivered) / span, 1),
            "inflight": tick.inflight,
            "p50_us": f.latency.percentile(50),
            "p99_us": f.latency.percentile(99),
            "errors": summary(f, None, histogram=False)["errors"],
        }
        if not self.tty:
            print(json.dumps(line), flush=True)
            return
        from rich.console import Console
        from rich.live import Live

        text = (
            f"{line['elapsed']:7.1f}s  conn {f.connected} fail {f.failed}  pub {line['pub_rate']:,.0f}/s  "
            f"recv {line['deliver_rate']:,.0f}/s  inflight {tick.inflight}  "
            f"p50 {_us(line['p50_us'])} p99 {_us(line['p99_us'])}  {_errors(line)}"
        )
        if self.live is None:
            self.live = Live(text, console=Console(), auto_refresh=False, transient=True)
            self.live.start()
        self.live.update(text, refresh=True)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()


def _us(v: int | None) -> str:
    if v is None:
        return "-"
    return f"{v / 1000:.2f}ms" if v >= 1000 else f"{v}us"


def _render(figures: dict[str, Any], mode: Mode) -> None:
    from rich.table import Table

    from mqtt_cli.render import print_whole

    table = Table(title=f"mqtt bench {mode.value}" + (" (interrupted)" if figures["interrupted"] else ""))
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = ["clients"] if mode is Mode.conn else ["pubs"] if mode is Mode.pub else ["subs"] if mode is Mode.sub else []
    rows += ["pubs", "subs"] if mode is Mode.pubsub else []
    rows += ["connected", "failed", "conn_per_s"]
    if mode in (Mode.pub, Mode.pubsub):
        rows += ["sent", "acked", "pub_seconds", "published_per_s"]
    if mode in (Mode.sub, Mode.pubsub):
        rows += ["subscribers", "delivered", "seconds", "delivered_per_s", "lost", "dups", "reordered"]
        rows += ["min_us", "p50_us", "p90_us", "p99_us", "p999_us", "max_us", "mean_us", "clock"]
    if mode is not Mode.conn:
        rows += ["gen_cpu_pct", "broker_cpu_pct"] if figures.get("broker_cpu_pct") is not None else ["gen_cpu_pct"]
    for name in rows:
        value = figures.get(name)
        table.add_row(name, "-" if value is None else f"{value:,}" if isinstance(value, int) else str(value))
    for kind, n in (figures.get("errors") or {}).items():
        table.add_row(f"error: {kind}", f"{n:,}")
    if figures.get("expect"):
        failed = figures["expect"]["failed"]
        table.add_row("expect", "met" if not failed else "NOT met: " + ", ".join(failed))
    print_whole(table, stderr=not sys.stdout.isatty())  # on a pipe stdout holds the JSON lines
