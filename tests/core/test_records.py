"""core/records.py: the frozen record classes behave as the frozen, slotted dataclasses they replace."""

from __future__ import annotations

import copy
import pickle
from typing import Any, ClassVar

import pytest

from mqtt_cli.core.packets import Connect, PubAck, Publish, PubRec, Subscribe, Subscription
from mqtt_cli.core.records import (
    COMPILE_AFTER,
    FrozenInstanceError,
    compile_waiting,
    fast_constructor,
    fields,
    mutable_twin,
    record,
    replace,
)


@record
class Point:
    kind: ClassVar[str] = "point"
    x: int
    y: int = 0

    def norm(self) -> int:
        return abs(self.x) + abs(self.y)


@record
class Point3(Point):
    z: int = 0


@record
class Normalised:
    items: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple(self.items))


def test_fields_defaults_and_class_variables() -> None:
    assert fields(Point) == ("x", "y")
    assert fields(Point3) == ("x", "y", "z")
    assert Point(1) == Point(1, 0) == Point(x=1, y=0)
    assert Point.kind == Point(1).kind == "point"
    assert Point(3, -4).norm() == 7
    assert Point.__slots__ == ("x", "y") and Point3.__slots__ == ("z",)
    assert not hasattr(Point(1), "__dict__")
    with pytest.raises(TypeError):
        Point()  # type: ignore[call-arg]


def test_equality_is_per_class_and_hash_follows_it() -> None:
    assert Point(1, 2) != Point3(1, 2)
    assert Point(1, 2) != (1, 2)
    assert PubAck(7) != PubRec(7)
    assert hash(Point(1, 2)) == hash(Point(1, 2))
    assert len({Point(1, 2), Point(1, 2), Point(2, 1)}) == 2
    assert {Publish("a", b"x", 1, packet_id=3): 1}[Publish("a", b"x", 1, packet_id=3)] == 1


def test_frozen() -> None:
    p = Point(1, 2)
    with pytest.raises(FrozenInstanceError, match="'x'"):
        p.x = 5  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del p.y  # type: ignore[misc]
    assert p == Point(1, 2)


def test_repr_names_every_field() -> None:
    assert repr(Point3(1, 2, 3)) == "Point3(x=1, y=2, z=3)"
    assert repr(Normalised([1])) == "Normalised(items=(1,))"
    assert repr(PubAck(5)) == "PubAck(packet_id=5, reason_code=0, properties=Properties())"


def test_post_init_runs_and_replace_goes_through_init() -> None:
    assert Normalised([1, 2]).items == (1, 2)
    assert replace(Normalised(), items=[3]).items == (3,)
    assert replace(Point3(1, 2, 3), y=9) == Point3(1, 9, 3)
    assert Connect(protocol_version=3).protocol_name == "MQIsdp"
    assert replace(Connect(), protocol_version=3, protocol_name="").protocol_name == "MQIsdp"
    with pytest.raises(TypeError, match="'w'"):
        replace(Point(1), w=2)


def test_pickle_and_copy_keep_value_and_class() -> None:
    for value in (Point3(1, 2, 3), Subscribe(4, (Subscription("a/#", 1),)), Publish("t", b"\x00", 2, packet_id=9)):
        assert pickle.loads(pickle.dumps(value)) == value
        assert copy.deepcopy(value) == value
        assert type(copy.copy(value)) is type(value)


def test_match_by_position() -> None:
    match Publish("a/b", b"hi", 1, packet_id=4):
        case Publish(topic, payload, qos):
            assert (topic, payload, qos) == ("a/b", b"hi", 1)
        case _:
            pytest.fail("no match")


def test_fast_constructor_builds_equal_frozen_instances() -> None:
    build = fast_constructor(Publish)
    fast = build("t", b"p", 1, False, False, 5, Publish("x").properties)
    assert type(fast) is Publish
    assert fast == Publish("t", b"p", 1, packet_id=5)
    with pytest.raises(FrozenInstanceError):
        fast.qos = 2  # type: ignore[misc]
    assert fast_constructor(PubAck)(3, 0, PubAck(1).properties) == PubAck(3)


def test_a_field_without_default_after_one_with_is_refused() -> None:
    with pytest.raises(TypeError, match="'b'"):

        @record
        class Bad:
            a: int = 0
            b: int


def test_dataclass_rules_for_defaults_and_hash() -> None:
    @record
    class Base:
        a: int
        b: int = 1

    @record
    class Child(Base):
        b: int = 2  # an inherited field with another default

    assert Child(0) == Child(0, 2) and fields(Child) == ("a", "b")
    with pytest.raises(ValueError, match="mutable default"):

        @record
        class Shared:
            items: list[int] = []  # noqa: RUF012 - the mistake this refuses

    @record
    class WithEq:
        x: int

        def __eq__(self, other: object) -> bool:
            return isinstance(other, WithEq) and self.x == other.x

    assert hash(WithEq(1)) == hash(WithEq(1))


@record(frozen=False)
class Settings:
    name: str = ""
    where: Point = Point(0)  # a frozen record: one shared default is safe
    tries: int = 3


def test_mutable_record_is_assignable_unhashable_and_compares_by_value() -> None:
    s = Settings("a")
    assert s == Settings("a", Point(0), 3) and s != Settings("b")
    assert repr(s) == "Settings(name='a', where=Point(x=0, y=0), tries=3)"
    s.tries = 5
    assert s.tries == 5 and s != Settings("a")
    with pytest.raises(TypeError):
        hash(s)
    with pytest.raises(AttributeError):
        s.other = 1  # type: ignore[attr-defined]
    assert pickle.loads(pickle.dumps(s)) == s
    assert replace(s, name="b") == Settings("b", Point(0), 5)
    with pytest.raises(ValueError, match="mutable default"):

        @record(frozen=False)
        class Shared:
            items: list[int] = []  # noqa: RUF012


def _shapes() -> tuple[type, type, type, type]:
    """Record classes of one shape and more, made afresh (so their __init__ are still the generic ones)."""

    @record
    class Pair:
        left: int
        right: str = "r"

    @record
    class Other:
        first: int
        second: str = "s"

    @record
    class Empty:
        pass

    @record
    class Checked:
        items: tuple[int, ...]

        def __post_init__(self) -> None:
            if not isinstance(self.items, tuple):
                raise TypeError("items: a tuple")

    return Pair, Other, Empty, Checked


def _build_same_shape(pair: Any, other: Any, empty: Any, checked: Any) -> None:
    assert pair(1) == pair(left=1, right="r") and pair(right="x", left=2).right == "x"
    assert other(second="t", first=3) == other(3, "t") and other(3).second == "s"
    assert empty() == empty() and fields(empty) == ()
    assert checked((1,)).items == (1,)
    with pytest.raises(TypeError, match="a tuple"):
        checked([1])
    with pytest.raises(TypeError, match="unexpected keyword argument 'right'"):
        other(1, right="x")
    with pytest.raises(TypeError, match="multiple values for argument 'first'"):
        other(1, first=2)
    with pytest.raises(TypeError, match="'first'"):
        other(second="t")
    with pytest.raises(TypeError, match="positional argument"):
        other(1, "t", 3)
    with pytest.raises(TypeError):
        empty(1)
    twin = fast_constructor(pair)(5, "m")
    assert type(twin) is pair and twin == pair(5, "m")


def test_records_take_and_set_their_own_fields_before_and_after_their_init_is_compiled() -> None:
    # A class starts with a generic __init__ and gets compiled code shared by its shape at its COMPILE_AFTER-th
    # instance (records.py): both must take and set its own fields, and refuse the same wrong calls.
    pair, other, empty, checked = _shapes()
    _build_same_shape(pair, other, empty, checked)
    assert other.__init__.__qualname__.endswith("Other.__init__")
    assert other.__init__.__code__.co_varnames[:1] == ("self",) and other.__init__.__code__.co_argcount == 1
    for cls, args in ((pair, (1,)), (other, (1,)), (empty, ()), (checked, ((1,),))):
        for _ in range(COMPILE_AFTER):
            cls(*args)
    build_pair = fast_constructor(pair)  # (its mutable twin's __init__ too)
    for _ in range(COMPILE_AFTER):
        build_pair(1, "r")
    assert mutable_twin(pair).__init__.__code__.co_varnames == ("self", "left", "right")
    assert other.__init__.__code__.co_varnames == ("self", "first", "second")
    assert pair.__init__.__code__.co_varnames == ("self", "left", "right")
    assert other.__init__.__qualname__.endswith("Other.__init__")
    _build_same_shape(pair, other, empty, checked)


def test_compile_waiting_gives_every_class_its_compiled_init_at_once() -> None:
    # (What the broker calls at start: no compiling in the middle of its traffic.)
    pair, other, empty, checked = _shapes()
    assert other.__init__.__code__.co_argcount == 1  # the generic one: (self, *args, **kwargs)
    compile_waiting()
    assert other.__init__.__code__.co_varnames == ("self", "first", "second")
    assert pair.__init__.__code__.co_varnames == ("self", "left", "right")
    _build_same_shape(pair, other, empty, checked)
