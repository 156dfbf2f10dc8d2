"""Whether an engine meets a runtime protocol, remembered per class for this package's
engines.

Python 3.11 looks a runtime protocol's members up again at every isinstance check (about
20 us for SpecDecodeEngine, which repeats Engine's members); a simulation asks its engine
three or four times, a fuzz campaign builds one simulation an example. The engines of this
package meet the same protocols in every instance, whatever their config, so the answer is
their class's (tests/engines/test_meets.py); any other engine is checked every time, as
isinstance checks it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeGuard, TypeVar, cast

P = TypeVar("P")
_OWN_MODULES = "schedcheck.engines."  # the engines whose answers are their class's
_ANSWERS: dict[tuple[type, type], bool] = {}  # (engine class, protocol) -> meets it


def meets(engine: object, protocol: Callable[..., P]) -> TypeGuard[P]:
    """isinstance(engine, protocol), for a runtime-checkable protocol (typed as a callable:
    mypy takes no protocol class where a concrete type[P] is expected)."""
    checked = cast(type, protocol)
    kind = type(engine)
    if not kind.__module__.startswith(_OWN_MODULES):
        return isinstance(engine, checked)
    key = (kind, checked)
    answer = _ANSWERS.get(key)
    if answer is None:
        answer = _ANSWERS[key] = isinstance(engine, checked)
    return answer
