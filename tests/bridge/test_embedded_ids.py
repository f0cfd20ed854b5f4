"""An embedded bridge re-sends, after a kill -9 of our broker, each message under the packet identifier the remote
broker already holds it by, and a QoS 2 message whose PUBREC came as a PUBREL (MQTT 4.4: a resumed session
re-sends with the original identifiers).

Under any other identifier the remote takes the re-send for a new message, and a QoS 2 message it had PUBRECed
stays in its session for good, awaiting a PUBREL that never comes, holding one of the receive-maximum slots: after
a few restarts mosquitto refused new messages with 0x97 (quota exceeded), and the bridge lost them. The remote here
is a scripted one on a real socket, so the identifiers it saw can be compared: it completes the first flows, then
sends PUBREC and withholds PUBCOMP, as a remote does while the bridge is killed between the two.
"""

from __future__ import annotations

import time
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from tests.scripted_brokers import QoS2Remote

from .test_embedded import log_of, start_with_bridges, wait_log

pytestmark = pytest.mark.interop

RECEIVE_MAXIMUM = 20


def publish_qos2(port: int, n: int) -> None:
    c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="producer")
    c.connect("127.0.0.1", port)
    c.loop_start()
    infos = [c.publish("q2/x", b"2:%d" % i, 2) for i in range(n)]
    for info in infos:
        info.wait_for_publish(timeout=20)
    c.loop_stop()
    c.disconnect()


def wait_for(what: str, check: object, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.slow
def test_a_restart_resends_under_the_identifiers_the_remote_holds(tmp_path: Path) -> None:
    complete, n = 10, 40
    remote = QoS2Remote(complete, RECEIVE_MAXIMUM)
    port = remote.start()
    try:
        text = (
            f'[[bridge]]\nname = "cloud"\ntopics = [\'q2/# out 2 "" r/\']\nrestart_timeout = [0.1, 0.5]\n'
            f'[bridge.remote]\nurl = ["mqtt://127.0.0.1:{port}"]\n'
        )
        ours = start_with_bridges(tmp_path / "ours", text, "--persistence", str(tmp_path / "ours.db"))
        wait_log(ours, "bridge cloud: connected to")
        publish_qos2(ours.port, n)  # each PUBREC'd by our broker: stored, the bridge's to deliver
        # The first `complete` flows end; then as many as the remote's receive maximum wait for PUBCOMP.
        wait_for("the remote's window to fill", lambda: len(remote.published(1)) >= complete + RECEIVE_MAXIMUM)
        time.sleep(0.5)  # what the bridge's store commits for them (it commits within milliseconds)
        before = remote.published(1)
        released_before = remote.released(1)
        open_flows = {p: pid for p, pid in before.items() if int(p[2:]) >= complete}
        assert len(open_flows) == RECEIVE_MAXIMUM, sorted(before)
        ours.kill()
        assert ours.proc is not None
        ours.proc = ours.start()
        # After the restart every open flow is re-sent: PUBLISH again, or PUBREL.
        wait_for(
            "the re-sends",
            lambda: all(p in remote.published(2) or pid in remote.released(2) for p, pid in open_flows.items()),
            timeout=30,
        )
        time.sleep(0.3)
        after = remote.published(2)
        released = remote.released(2)
        moved = {p.decode(): (pid, after[p]) for p, pid in open_flows.items() if p in after and after[p] != pid}
        assert moved == {}, f"re-sent under other identifiers (before, after): {moved}\n{log_of(ours)[-2000:]}"
        lost = [p for p, pid in open_flows.items() if p not in after and pid not in released]
        assert lost == [], lost
        # The PUBREL of each went only once the store held its PUBREC, so what the remote had released is released
        # again, never published again (a remote that had completed the flow would take it for a new message).
        assert set(open_flows.values()) <= released_before
        republished = sorted(p.decode() for p, pid in open_flows.items() if pid in released_before and p in after)
        assert republished == [], republished
        # Nothing the remote holds is named by a new message: no identifier of an open flow went to another one.
        reused = {p.decode(): pid for p, pid in after.items() if p not in open_flows and pid in open_flows.values()}
        assert reused == {}, reused
    finally:
        remote.close()


def test_refusals_are_counted_and_logged_sparingly(tmp_path: Path) -> None:
    """A remote that refuses every QoS 1 message (PUBACK 0x97): each is dropped, as MQTT 5.0 leaves it (4.4: not
    re-sent), counted for the metrics, and logged at the 1st, 2nd and 4th refusal, not at every one."""
    remote = QoS2Remote(0, RECEIVE_MAXIMUM, refuse_qos1=True)
    port = remote.start()
    try:
        text = (
            f'[[bridge]]\nname = "cloud"\ntopics = [\'q1/# out 1 "" r/\']\nrestart_timeout = [0.1, 0.5]\n'
            f'[bridge.remote]\nurl = ["mqtt://127.0.0.1:{port}"]\n'
        )
        ours = start_with_bridges(tmp_path / "ours", text)
        wait_log(ours, "bridge cloud: connected to")
        c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="producer")
        c.connect("127.0.0.1", ours.port)
        c.loop_start()
        for info in [c.publish("q1/x", b"1:%d" % i, 1) for i in range(5)]:
            info.wait_for_publish(timeout=20)
        c.loop_stop()
        c.disconnect()
        wait_for("five refusals", lambda: len(remote.published(1)) == 5)
        wait_log(ours, "(4 so far)")
        log = log_of(ours)
        assert "refused a message (reason 0x97); it is dropped (1 so far)" in log
        assert "(2 so far)" in log and "(3 so far)" not in log and "(5 so far)" not in log
    finally:
        remote.close()
