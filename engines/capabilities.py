"""What an engine under test supports, declared by the engine itself (its factory).

The fuzzer's swarm draws only what an engine declares, `replay` refuses a flag or a request
the engine does not support (exit 2, naming it), and the conformance kit runs only the
scenarios the engine can run. A factory declares its capabilities with `declare`::

    @declare(Capabilities(cache_salt=False, block_sizes=(8, 16, 32)))
    def make_engine(config: EngineConfig) -> MyEngine: ...

(or, when the factory is the engine class, with a `capabilities` class attribute).

`Capabilities()` describes a full-featured engine. An engine that declares nothing gets
`UNDECLARED`: the conservative subset (no cache salts, no priorities, no draft tokens, no
rejection of a prompt that can never fit, no EOS stops; the swarm leaves those out for it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from schedcheck.engines.protocol import EngineConfig

ConfigFitter = Callable[[EngineConfig], EngineConfig]
F = TypeVar("F")
ATTRIBUTE = "capabilities"  # where a factory (or engine class) carries its declaration


class EngineRefusal(ValueError):
    """The engine does not support an option or a request it was asked to run (bad input:
    exit 2, never a finding)."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    """One engine's declaration. Each tuple lists the values the engine accepts."""

    # the config nearest a drawn one that the engine's own validation accepts (None: any)
    fit_config: ConfigFitter | None = None
    block_sizes: tuple[int, ...] | None = None  # None: every block size >= 1
    enable_prefix_caching: tuple[bool, ...] = (True, False)
    enable_chunked_prefill: tuple[bool, ...] = (True, False)
    block_managers: tuple[str, ...] = ("hashed",)  # the first is the default
    # EngineConfig.extra keys the swarm draws, each with its values (first = default)
    extra_options: tuple[tuple[str, tuple[str, ...]], ...] = ()
    cache_salt: bool = True  # EngineRequest.cache_salt keys the block hash
    priorities: bool = True  # EngineRequest.priority is read (the swarm draws priorities)
    aborts: bool = True  # abort_request of a waiting or running request
    later_turns: bool = True  # a request whose prompt extends a finished one's history
    eos: bool = True  # EngineRequest.eos_token_id stops a request ("stop"; the swarm draws it)
    lookahead_tokens: bool = True  # num_lookahead_tokens > 0 (draft KV slots)
    # the engine refuses, through rejected_req_ids, a request that can never fit the cache
    rejects_oversize: bool = True
    # KV is allocated for the last sampled token too (a request needs prompt + max_tokens
    # slots; False: one fewer, as the reference engine never runs its last sampled token)
    kv_of_last_token: bool = True
    spare_blocks: int = 0  # blocks beyond a request's own KV to run it alone (a null block)
    # decode tokens count against max_num_batched_tokens (False: by design they do not, as
    # nano-vllm's decode steps run every running request whatever the budget; the budget
    # check then counts prompt tokens only)
    decodes_within_budget: bool = True

    def __post_init__(self) -> None:
        assert self.spare_blocks >= 0, "spare_blocks >= 0"
        assert self.block_sizes is None or all(b >= 1 for b in self.block_sizes)
        assert self.block_sizes is None or self.block_sizes, "block_sizes: None or some"
        assert self.enable_prefix_caching and self.enable_chunked_prefill
        assert self.block_managers, "at least one block manager"

    def accepts_block_size(self, block_size: int) -> bool:
        return self.block_sizes is None or block_size in self.block_sizes

    def fit(self, config: EngineConfig) -> EngineConfig:
        """`config` as the engine accepts it (unchanged without a fitter)."""
        return config if self.fit_config is None else self.fit_config(config)


UNDECLARED = Capabilities(
    cache_salt=False, priorities=False, lookahead_tokens=False, rejects_oversize=False, eos=False
)


def declare(capabilities: Capabilities) -> Callable[[F], F]:
    """Attach `capabilities` to an engine factory (a decorator)."""

    def mark(factory: F) -> F:
        setattr(factory, ATTRIBUTE, capabilities)
        return factory

    return mark


def capabilities_of(factory: Any) -> Capabilities:
    """The factory's declaration, or `UNDECLARED`."""
    declared = getattr(factory, ATTRIBUTE, None)
    if declared is None:
        return UNDECLARED
    if not isinstance(declared, Capabilities):
        raise TypeError(f"{factory!r}.{ATTRIBUTE} is {type(declared).__name__}, not Capabilities")
    return declared


def config_refusals(caps: Capabilities, config: EngineConfig) -> list[str]:
    """What in `config` the engine does not support: one line per option (empty: none)."""
    out = []
    if not caps.accepts_block_size(config.block_size):
        out.append(f"--block-size {config.block_size}: accepted {list(caps.block_sizes or ())}")
    if config.enable_prefix_caching not in caps.enable_prefix_caching:
        out.append(_flag("prefix caching", config.enable_prefix_caching))
    if config.enable_chunked_prefill not in caps.enable_chunked_prefill:
        out.append(_flag("chunked prefill", config.enable_chunked_prefill))
    default = EngineConfig().block_manager  # "the engine's default" to every engine
    if config.block_manager not in (*caps.block_managers, default):
        out.append(f"--block-manager {config.block_manager}: accepted {list(caps.block_managers)}")
    if config.num_lookahead_tokens and not caps.lookahead_tokens:
        out.append(f"--num-lookahead-tokens {config.num_lookahead_tokens}: no draft tokens")
    return out


def _flag(what: str, on: bool) -> str:
    return f"{what} {'on' if on else 'off'}: the engine runs only with it {'off' if on else 'on'}"


def request_refusal(
    caps: Capabilities,
    request_id: str,
    cache_salt: str | None,
    has_parent: bool,
    aborts: bool,
) -> str | None:
    """Why the engine cannot run this trace request (None: it can). A priority is never
    refused: an engine without priorities runs the request as any other, while a salt it
    ignored would share KV across salts."""
    if cache_salt is not None and not caps.cache_salt:
        return f"request {request_id}: cache_salt {cache_salt!r}, the engine has no cache salts"
    if has_parent and not caps.later_turns:
        return f"request {request_id}: a later turn, the engine declares no later turns"
    if aborts and not caps.aborts:
        return f"request {request_id}: abort_time_s set, the engine declares no aborts"
    return None
