"""`async def` tests here run under trio.run (no plugin needed); each bounds its own waits with trio.fail_after."""

from __future__ import annotations

import functools
import inspect

import pytest
import trio


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    trio.run(functools.partial(pyfuncitem.obj, **args))
    return True
