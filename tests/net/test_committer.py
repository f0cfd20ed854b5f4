"""net/committer.py: the thread that writes the broker's persistence commits, one group at a time, and tells the
trio thread when each is done (a real thread and socket pair; the store's commit stands in as a function)."""

from __future__ import annotations

import threading

import pytest
import trio

from mqtt_cli.core.persistence import Change, DeliveryDone
from mqtt_cli.net.committer import CommitThread
from mqtt_cli.net.store import StoreError


async def test_groups_are_written_in_order_by_one_thread_of_its_own() -> None:
    written: list[tuple[list[Change], str]] = []
    commits = CommitThread(lambda changes: written.append((changes, threading.current_thread().name)))
    groups: list[list[Change]] = [[DeliveryDone("c", n)] for n in range(50)]
    with trio.fail_after(10):
        for group in groups:
            commits.start(group)
            assert commits.busy
            await commits.wait()
            commits.outcome()
            assert not commits.busy
    commits.close()
    assert [changes for changes, _ in written] == groups
    assert {name for _, name in written} == {"mqtt persistence commits"}  # not the trio thread


async def test_a_failed_commit_is_raised_in_the_trio_thread_and_the_next_one_goes_on() -> None:
    def commit(changes: list[Change]) -> None:
        if changes == [DeliveryDone("c", 1)]:
            raise StoreError("persistence: disk full")

    commits = CommitThread(commit)
    with trio.fail_after(10):
        commits.start([DeliveryDone("c", 1)])
        await commits.wait()
        with pytest.raises(StoreError, match="disk full"):
            commits.outcome()
        commits.start([DeliveryDone("c", 2)])
        await commits.wait()
        commits.outcome()  # written
    commits.close()


async def test_close_waits_for_the_group_being_written_and_raises_its_failure() -> None:
    started, go_on = threading.Event(), threading.Event()
    written: list[list[Change]] = []

    def commit(changes: list[Change]) -> None:
        started.set()
        assert go_on.wait(10)
        written.append(changes)
        raise StoreError("persistence: read-only")

    commits = CommitThread(commit)
    commits.start([DeliveryDone("c", 1)])
    assert started.wait(10)
    threading.Timer(0.05, go_on.set).start()
    with pytest.raises(StoreError, match="read-only"):
        commits.close()  # returns only once the group is done (the store is the caller's again)
    assert written == [[DeliveryDone("c", 1)]]
