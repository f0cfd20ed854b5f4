"""Real traffic captured for tests: our broker (`mqtt serve`) on a free port, Debian's dumpcap on the loopback
interface, our clients talking to it.

    path, port = pub_lines_capture(tmp_dir)   # `mqtt pub -l` twice (5.0: topic aliases on by default)
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.broker.conftest import start_ours

#: What pub_lines_capture sends: topic -> lines, each connection its own `mqtt pub -l -V 5 -q 1`.
PUB_LINES = {"cap/lines": 60, "cap/other": 20}


@contextmanager
def dumpcap(port: int, path: Path) -> Iterator[None]:
    """dumpcap writing what goes over TCP `port` on the loopback interface to `path` (pcapng) meanwhile."""
    log = path.with_suffix(".dumpcap.log")
    with log.open("wb") as err:
        proc = subprocess.Popen(
            ["dumpcap", "-q", "-i", "lo", "-f", f"tcp port {port}", "-w", str(path)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
    try:
        # dumpcap writes the file's section header when it is capturing (then a little more, to be safe).
        deadline = time.monotonic() + 20
        while not (path.exists() and path.stat().st_size > 0):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dumpcap did not start: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        time.sleep(0.3)
        yield
        time.sleep(0.3)  # the last segments reach the capture
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def pub_lines_capture(workdir: Path) -> tuple[Path, int]:
    """A capture of `mqtt pub -l` (5.0, QoS 1) sending PUB_LINES through our broker: (pcapng path, broker port).
    Each connection sets topic alias 1 for its own topic, then sends the other lines with an empty topic."""
    broker = start_ours(workdir / "broker")
    path = workdir / "pub-lines.pcapng"
    try:
        with dumpcap(broker.port, path):
            for topic, count in PUB_LINES.items():
                lines = "".join(f"{topic} line {n}\n" for n in range(count))
                subprocess.run(
                    [sys.executable, "-m", "mqtt_cli", "pub", "-p", str(broker.port), "-t", topic, "-l",
                     "-q", "1", "-V", "5"],
                    input=lines, text=True, check=True, timeout=60, capture_output=True,
                )  # fmt: skip
    finally:
        broker.stop()
    return path, broker.port
