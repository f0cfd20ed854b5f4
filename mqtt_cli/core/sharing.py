"""Shared subscriptions (MQTT 5.0 section 4.8.2): the groups, indexed as members subscribe and unsubscribe, and
the policy that picks the one member a message goes to.

A group is one ``$share/{ShareName}/{filter}`` filter; its members are the clients subscribed to it. The broker
adds and removes members as subscriptions come and go, and a group is dropped with its last member, its policy's
state with it. A new way of sharing is a class with :meth:`SharingPolicy.pick`, given to :class:`SharedGroups`.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from typing import Protocol

from .session import SubscriptionOptions
from .topics import parse_shared

__all__ = ["RoundRobin", "SharedGroup", "SharedGroups", "SharingPolicy"]


class SharedGroup:
    """The members of one ``$share/`` filter, in client-id order, with their subscription options."""

    __slots__ = ("filter", "last", "members", "name", "options", "topic_filter")

    def __init__(self, flt: str) -> None:
        name, real = parse_shared(flt)
        assert name is not None  # only $share/ filters make groups
        self.filter = flt  # as subscribed: "$share/g/a/+"
        self.name = name  # "g"
        self.topic_filter = real  # "a/+"
        self.members: list[str] = []  # client ids, sorted: the order the policy goes round
        self.options: dict[str, SubscriptionOptions] = {}
        # The policy's state for this group (round robin: the client id chosen last); it goes with the group.
        self.last = ""


class SharingPolicy(Protocol):
    """Which member of a group gets a message."""

    def pick(self, group: SharedGroup, members: list[str]) -> str:
        """One of ``members`` (not empty, in ``group.members``' order): those of the group that may have this
        message, connected ones only when there are any. May update the group's own state (``group.last``)."""
        ...


class RoundRobin:
    """Each member in turn, in client-id order: the first one after the member chosen last."""

    def pick(self, group: SharedGroup, members: list[str]) -> str:
        i = bisect_right(members, group.last)
        chosen = members[i] if i < len(members) else members[0]
        group.last = chosen
        return chosen


class SharedGroups:
    """The shared-subscription groups by filter (``$share/g/a/+``), kept as subscriptions change."""

    __slots__ = ("groups", "policy")

    def __init__(self, policy: SharingPolicy | None = None) -> None:
        self.groups: dict[str, SharedGroup] = {}
        self.policy: SharingPolicy = policy if policy is not None else RoundRobin()

    def add(self, flt: str, client_id: str, opts: SubscriptionOptions) -> None:
        """``client_id`` subscribed to the ``$share/`` filter ``flt`` (again: its options replaced)."""
        group = self.groups.get(flt)
        if group is None:
            group = self.groups[flt] = SharedGroup(flt)
        if client_id not in group.options:
            insort(group.members, client_id)
        group.options[client_id] = opts

    def remove(self, flt: str, client_id: str) -> None:
        """``client_id`` no longer subscribes to ``flt``; the group goes with its last member."""
        group = self.groups.get(flt)
        if group is None or group.options.pop(client_id, None) is None:
            return
        members = group.members
        del members[bisect_right(members, client_id) - 1]
        if not members:
            del self.groups[flt]
