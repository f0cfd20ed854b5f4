"""`record`: frozen, slotted value classes, what `@dataclass(frozen=True, slots=True)` gives at a tenth of its cost.

Every command imports the packets and events (about 40 classes), and a dataclass costs about 0.9 ms to create
because each generated method is compiled by an `exec` of its own; that was a tenth of a one-shot `mqtt pub`.
`record` shares the other methods and compiles only `__init__`, once per shape, for a class only once it has
built a few instances (COMPILE_AFTER). Semantics follow dataclasses for what the core uses: fields from
annotations (ClassVar excluded) in base-first order, defaults, `__post_init__`, `__repr__`, `__eq__` (same class
only), `__hash__`, `__match_args__`, assignment refused, pickling. `fields` and `replace` stand in for their
dataclasses namesakes. `record(frozen=False)` makes a mutable one (no `__hash__`, as `@dataclass(slots=True)`),
for settings objects a one-shot client builds.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from itertools import pairwise
from operator import attrgetter
from types import CodeType, FunctionType
from typing import Any, TypeVar, dataclass_transform, overload

__all__ = [
    "COMPILE_AFTER",
    "FrozenInstanceError",
    "compile_waiting",
    "fast_constructor",
    "fields",
    "mutable_twin",
    "record",
    "replace",
]

_C = TypeVar("_C", bound=type)
_T = TypeVar("_T")


class FrozenInstanceError(AttributeError):
    """Assignment to a field of a record."""


def _own_fields(cls: type) -> list[str]:
    # The class's own annotations, as inspect.get_annotations(cls) gives them; importing inspect (ast, dis,
    # tokenize) would cost a one-shot client a few ms.
    annotations: dict[str, Any] = cls.__dict__.get("__annotations__", {})  # noqa: RUF063
    names = []
    for name, annotation in annotations.items():
        text = annotation if isinstance(annotation, str) else repr(annotation)
        if not text.startswith(("ClassVar", "typing.ClassVar")):
            names.append(name)
    return names


def fields(cls_or_record: Any) -> tuple[str, ...]:
    """The field names, in order."""
    names: tuple[str, ...] = cls_or_record.__record_fields__
    return names


def replace(obj: _T, **changes: Any) -> _T:
    """A copy of the record `obj` with some fields changed (through `__init__`, so `__post_init__` runs)."""
    values = {name: getattr(obj, name) for name in fields(obj)}
    unknown = changes.keys() - values.keys()
    if unknown:
        raise TypeError(f"{type(obj).__name__} has no field {sorted(unknown)[0]!r}")
    values.update(changes)
    return type(obj)(**values)


# Only __init__ is compiled per class (it needs the signature); compiling the rest too made a record cost half a
# dataclass. These read the fields through the class's attrgetter, which is as fast as generated code.


def _no_values(obj: object) -> tuple[()]:
    return ()


def __repr__(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__record_fields__)
    return f"{type(self).__qualname__}({shown})"


def __eq__(self: Any, other: object) -> bool:
    values = self._record_values  # read before the `is` test, which narrows `self` to `object` for mypy
    if other.__class__ is self.__class__:
        same: bool = values(self) == values(other)
        return same
    return NotImplemented


def __hash__(self: Any) -> int:
    return hash(self._record_values(self))


def __setattr__(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def __delattr__(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def __getstate__(self: Any) -> tuple[Any, ...]:
    return tuple(getattr(self, name) for name in self.__record_fields__)


def __setstate__(self: Any, state: tuple[Any, ...]) -> None:
    for name, value in zip(self.__record_fields__, state, strict=True):
        object.__setattr__(self, name, value)


# --- __init__ ----------------------------------------------------------------------------------------------
# Each record class needs an __init__ with its fields as parameters. Compiled code is the fastest, and it is
# compiled once per shape (number of fields, how they are set), with placeholder names, and each class gets a
# copy carrying its own names (CodeType.replace): the same bytecode as compiling its own source. Compiling one
# shape (parsing source) costs about as much as 50 instances built without it, and a one-shot client needs some
# 18 shapes, for a handful of instances each: so a class starts with a generic __init__ (the arguments bound in
# a loop) and gets its compiled one at its COMPILE_AFTER-th instance. The broker's and the
# clients' per-message records are compiled within their first messages; a one-shot command compiles none.

#: Instances a record class builds with the generic __init__ before its compiled one replaces it.
COMPILE_AFTER = 32

# What gives each class still on its generic __init__ its compiled one (a set, in the order the classes came).
_WAITING: dict[Callable[[], None], None] = {}


def compile_waiting() -> None:
    """Gives every record class made so far its compiled __init__ now. For a long-running process (the broker),
    at start: a compile costs ~1 ms, which would otherwise come at a class's COMPILE_AFTER-th instance, in the
    middle of its traffic."""
    waiting = list(_WAITING)
    _WAITING.clear()
    for switch in waiting:
        switch()


class _Init(Enum):
    """How an __init__ sets the fields."""

    SET = "set"  # each through object.__setattr__ (a frozen record)
    POST = "post"  # the same, then self.__post_init__()
    ASSIGN = "assign"  # self.name = name (a mutable twin)


_TEMPLATES: dict[tuple[_Init, int], CodeType] = {}


def _template(kind: _Init, n: int) -> CodeType:
    code = _TEMPLATES.get((kind, n))
    if code is None:
        if kind is _Init.ASSIGN:
            body = "".join(f"  self._f{i} = _p{i}\n" for i in range(n))
        else:
            body = "".join(f"  _set(self, '_f{i}', _p{i})\n" for i in range(n))
            body += "  self.__post_init__()\n" if kind is _Init.POST else ""
        scope: dict[str, Any] = {}
        exec(f"def __init__(self{''.join(f', _p{i}' for i in range(n))}):\n{body or '  pass'}\n", scope)
        code = _TEMPLATES[(kind, n)] = scope["__init__"].__code__
    return code


def _compiled_init(kind: _Init, names: tuple[str, ...], defaults: dict[str, Any], qualname: str) -> Callable[..., None]:
    """`def __init__(self, *names)` setting each field as `kind` says; `defaults` for the last parameters."""
    template = _template(kind, len(names))
    names_of = {f"_f{i}": name for i, name in enumerate(names)}
    if kind is _Init.ASSIGN:  # the attribute names are names the code refers to
        code = template.replace(co_names=tuple(names_of.get(x, x) for x in template.co_names))
    else:  # they are string constants
        consts = tuple(names_of.get(c, c) if type(c) is str else c for c in template.co_consts)
        code = template.replace(co_consts=consts)
    code = code.replace(co_varnames=("self", *names), co_qualname=qualname)
    given = tuple(defaults[name] for name in names if name in defaults)
    init: Callable[..., None] = FunctionType(code, {"_set": object.__setattr__}, "__init__", given or None)
    return init


def _lazy_init(
    kind: _Init, names: tuple[str, ...], defaults: dict[str, Any], qualname: str, owner: list[type]
) -> Callable[..., None]:
    """An __init__ taking and setting the fields as `_compiled_init`'s does, by a loop; at its COMPILE_AFTER-th
    call it puts the compiled one on the class (`owner[0]`, set once the class is made)."""
    count = len(names)
    at = {name: i for i, name in enumerate(names)}
    setter: Callable[[Any, str, Any], None] = setattr if kind is _Init.ASSIGN else object.__setattr__
    post = kind is _Init.POST
    name_of_call = qualname.removesuffix(".__init__") + "()"
    made = 0

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        nonlocal made
        given = len(args)
        if given > count:
            raise TypeError(f"{name_of_call} takes {count} positional arguments but {given} were given")
        for name, value in zip(names, args, strict=False):  # (fewer args than names: the rest below)
            setter(self, name, value)
        if given < count or kwargs:
            for name in names[given:]:
                if name in kwargs:
                    setter(self, name, kwargs.pop(name))
                elif name in defaults:
                    setter(self, name, defaults[name])
                else:
                    raise TypeError(f"{name_of_call} missing required argument: {name!r}")
            for name in kwargs:  # what is left: a field given twice, or no field
                if name in at:
                    raise TypeError(f"{name_of_call} got multiple values for argument {name!r}")
                raise TypeError(f"{name_of_call} got an unexpected keyword argument {name!r}")
        if post:
            self.__post_init__()
        made += 1
        if made == COMPILE_AFTER:
            _WAITING.pop(switch, None)
            switch()

    def switch() -> None:
        cls = owner[0]
        if cls.__dict__.get("__init__") is __init__:  # (not done yet)
            cls.__init__ = _compiled_init(kind, names, defaults, qualname)  # type: ignore[misc]

    __init__.__qualname__ = qualname
    _WAITING[switch] = None
    return __init__


_SHARED = (__repr__, __eq__, __hash__, __setattr__, __delattr__, __getstate__, __setstate__)
_SHARED_MUTABLE = (__repr__, __eq__, __getstate__, __setstate__)


@overload
def record(cls: _C, /) -> _C: ...


@overload
def record(*, frozen: bool = True) -> Callable[[_C], _C]: ...


@dataclass_transform(frozen_default=True)
def record(cls: _C | None = None, /, *, frozen: bool = True) -> _C | Callable[[_C], _C]:
    """Make `cls` a frozen, slotted record class (a new class, as `dataclass(slots=True)` makes); with
    `frozen=False` (`@record(frozen=False)`), one whose fields may be assigned and that has no hash."""
    if cls is None:
        return lambda c: _make(c, frozen)
    return _make(cls, frozen)


def _make(cls: _C, frozen: bool) -> _C:
    inherited: tuple[str, ...] = ()
    defaults: dict[str, Any] = {}
    for base in reversed(cls.__mro__[1:]):
        if "__record_fields__" in base.__dict__:
            inherited = base.__dict__["__record_fields__"]
            defaults.update(base.__dict__["__record_defaults__"])
    declared = _own_fields(cls)
    own = [name for name in declared if name not in inherited]
    names = (*inherited, *own)
    namespace = {k: v for k, v in cls.__dict__.items() if k not in ("__dict__", "__weakref__")}
    for name in declared:  # an inherited field declared again may change its default, as with dataclasses
        if name in namespace:
            value = defaults[name] = namespace.pop(name)
            if type(value) in (list, dict, set):
                raise ValueError(f"{cls.__name__}.{name}: a mutable default would be shared by every instance")
    if frozen and namespace.get("__hash__", ...) is None and "__eq__" in namespace:
        del namespace["__hash__"]  # Python's implicit None for a class defining __eq__: frozen records hash
    if not frozen:
        namespace.setdefault("__hash__", None)  # mutable and compared by value: unhashable, as with dataclasses
    namespace["__slots__"] = tuple(own)
    namespace["__record_fields__"] = names
    namespace["__record_defaults__"] = dict(defaults)
    namespace["__match_args__"] = names
    namespace["_record_values"] = staticmethod(attrgetter(*names) if names else _no_values)
    for method in _SHARED if frozen else _SHARED_MUTABLE:
        namespace.setdefault(method.__name__, method)  # what the class defines itself stays, as with dataclass

    for before, name in pairwise(names):
        if before in defaults and name not in defaults:
            raise TypeError(f"{cls.__name__}: field {name!r} without a default follows one with a default")
    kind = _Init.POST if hasattr(cls, "__post_init__") else _Init.SET
    owner: list[type] = []
    namespace["__init__"] = _lazy_init(kind, names, defaults, f"{cls.__qualname__}.__init__", owner)
    new = type(cls)(cls.__name__, cls.__bases__, namespace)
    new.__qualname__ = cls.__qualname__
    owner.append(new)
    made: _C = new
    return made


# --- fast construction for the decoder ---------------------------------------------------------------------
# A frozen record's __init__ sets each field through object.__setattr__, which costs about a microsecond per
# PUBLISH: half of the decoder's budget. The decoder instead builds a mutable twin (same slots, same layout) and
# then switches the instance's class, which CPython allows between classes of identical layout. The result is
# an ordinary frozen instance, equal to one built the normal way (tests check this).

_TWINS: dict[type, type] = {}


def mutable_twin(cls: type) -> type:
    """A plain slotted class with the same fields and layout as the record class `cls` (one per class)."""
    twin = _TWINS.get(cls)
    if twin is None:
        names = fields(cls)
        defaults: dict[str, Any] = vars(cls)["__record_defaults__"]
        owner: list[type] = []
        init = _lazy_init(_Init.ASSIGN, names, defaults, f"_Mutable{cls.__name__}.__init__", owner)
        twin = _TWINS[cls] = type(f"_Mutable{cls.__name__}", (), {"__slots__": names, "__init__": init})
        owner.append(twin)
    return twin


def fast_constructor(cls: type[_T]) -> Callable[..., _T]:
    """A function that builds instances of the record class `cls` without its per-field checks."""
    twin = mutable_twin(cls)

    def build(*args: Any) -> _T:
        obj = twin(*args)
        obj.__class__ = cls
        built: _T = obj
        return built

    return build
