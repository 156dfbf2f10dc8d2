"""Whether an engine or executor meets a runtime protocol, remembered per class for this
package's own.

Python 3.11 looks a runtime protocol's members up again at every isinstance check (about
20 us for SpecDecodeEngine, which repeats Engine's members); a simulation asks its engine
three or four times and its executor five, a fuzz campaign builds one simulation an
example. The engines of this package and its executors in sim/ (SymbolicExecutor,
HashModelExecutor) meet the same protocols in every instance, whatever their arguments, so
the answer is their class's (tests/engines/test_meets.py, tests/sim/test_executors.py);
any other object (a user's engine or executor, the tensor executor of gpu/) is checked
every time, as isinstance checks it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeGuard, TypeVar, cast

P = TypeVar("P")
# the modules whose classes' answers are their class's
_OWN_MODULES = ("schedcheck.engines.", "schedcheck.sim.")
_ANSWERS: dict[tuple[type, type], bool] = {}  # (class, protocol) -> meets it


def meets(obj: object, protocol: Callable[..., P]) -> TypeGuard[P]:
    """isinstance(obj, protocol), for a runtime-checkable protocol (typed as a callable:
    mypy takes no protocol class where a concrete type[P] is expected)."""
    checked = cast(type, protocol)
    kind = type(obj)
    if not kind.__module__.startswith(_OWN_MODULES):
        return isinstance(obj, checked)
    key = (kind, checked)
    answer = _ANSWERS.get(key)
    if answer is None:
        answer = _ANSWERS[key] = isinstance(obj, checked)
    return answer
