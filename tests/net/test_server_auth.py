"""net/server.py's auth plumbing on real sockets: per-listener policies, the failed-login delay, reload_auth."""

from __future__ import annotations

from typing import Any

import trio

from mqtt_cli.core.acl import parse_acl_file
from mqtt_cli.core.auth import AuthPolicy
from mqtt_cli.core.encoder import encode
from mqtt_cli.core.packets import ConnAck, Connect, Disconnect, SubAck, Subscribe, Subscription
from mqtt_cli.core.passwords import hash_password
from mqtt_cli.core.reader import PacketReader
from mqtt_cli.net.server import LOGIN_FAILURE_DELAY, BrokerServer, Listener, ServeOptions, ServerError

SALT = bytes(range(12))


def table(*users: str) -> dict[str, Any]:
    return {u: hash_password(u, f"{u}-pw", SALT) for u in users}


class Raw:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.reader = PacketReader(5)

    @classmethod
    async def connect(cls, port: int, user: str | None, client_id: str) -> tuple[Raw, ConnAck]:
        raw = cls(await trio.open_tcp_stream("127.0.0.1", port))
        pw = f"{user}-pw".encode() if user else None
        await raw.stream.send_all(encode(Connect(client_id, protocol_version=5, username=user, password=pw), 5))
        (ack,) = await raw.packets()
        return raw, ack

    async def packets(self) -> list[Any]:
        while True:
            data = await self.stream.receive_some(65536)
            if not data:
                return []
            got = self.reader.feed(data)
            if got:
                return got


async def start(nursery: trio.Nursery, *listeners: Listener) -> BrokerServer:
    return await nursery.start(BrokerServer(ServeOptions(listeners=list(listeners))).run, trio.Event())


async def test_per_listener_policies_and_delay() -> None:
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            locked = AuthPolicy(allow_anonymous=False, passwords=table("alice"))
            server = await start(
                nursery, Listener("mqtt", "127.0.0.1", 0, auth=locked), Listener("mqtt", "127.0.0.1", 0)
            )
            locked_port, open_port = (b.port for b in server.bound)
            _, ack = await Raw.connect(open_port, None, "anon")
            assert ack.reason_code == 0  # the second listener: no policy of its own, loopback: anonymous allowed
            started = trio.current_time()
            _, ack = await Raw.connect(locked_port, None, "anon2")
            assert ack.reason_code == 0x87 and trio.current_time() - started >= LOGIN_FAILURE_DELAY * 0.9
            _, ack = await Raw.connect(locked_port, "alice", "a1")
            assert ack.reason_code == 0
            nursery.cancel_scope.cancel()


async def test_open_listener_without_auth_refuses_to_start() -> None:
    with trio.fail_after(10):
        try:
            async with trio.open_nursery() as nursery:
                await start(nursery, Listener("mqtt", "0.0.0.0", 0, auth=AuthPolicy()))
        except* ServerError as group:
            assert "has no authentication" in str(group.exceptions[0])
        else:
            raise AssertionError("started")


async def test_reload_auth() -> None:
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            acl = parse_acl_file("user alice\ntopic a/#\ntopic b/#\nuser bob\ntopic #\n")
            policy = AuthPolicy(allow_anonymous=False, passwords=table("alice", "bob"), acl=acl)
            server = await start(nursery, Listener("mqtt", "127.0.0.1", 0, auth=policy))
            port = server.bound[0].port
            alice, _ = await Raw.connect(port, "alice", "a1")
            bob, _ = await Raw.connect(port, "bob", "b1")
            await alice.stream.send_all(encode(Subscribe(1, (Subscription("a/#"), Subscription("b/#"))), 5))
            (ack,) = await alice.packets()
            assert isinstance(ack, SubAck) and ack.reason_codes == (0, 0)
            new_acl = parse_acl_file("user alice\ntopic a/#\n")
            server.reload_auth([AuthPolicy(allow_anonymous=False, passwords=table("alice"), acl=new_acl)])
            (gone,) = await bob.packets()
            assert isinstance(gone, Disconnect) and gone.reason_code == 0x98
            assert set(server.core.sessions["a1"].subscriptions) == {"a/#"}
            _, ack = await Raw.connect(port, "bob", "b2")  # new connections get the new policy
            assert ack.reason_code == 0x87
            nursery.cancel_scope.cancel()
