"""Attention backends by name; `auto` picks the best one that takes the configuration.

    name           module          what it runs
    flash-attn-4   flash_attn4     flash_attn.cute varlen, page_table + seqused_k (paged)
    flash-attn     flash_attn2     flash-attn 2.x varlen (paged iff block size % 256 == 0)
    torch-flash    torch_flash     aten._flash_attention_forward on gathered K/V
    sdpa           sdpa            scaled_dot_product_attention per request, lower-right mask
    torch-ref      torch_ref       gathered K/V, masked softmax in fp32/fp64 (the oracle)

`PREFERENCE` is the order `auto` tries them in on CUDA; on a CPU `auto` takes the oracle
(torch-ref) first, then sdpa. Modules are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from schedcheck.gpu.backends.base import AttentionBackend, BackendSpec

_CLASSES: dict[str, str] = {
    "flash-attn-4": "schedcheck.gpu.backends.flash_attn4:FlashAttn4Backend",
    "flash-attn": "schedcheck.gpu.backends.flash_attn2:FlashAttn2Backend",
    "torch-flash": "schedcheck.gpu.backends.torch_flash:TorchFlashBackend",
    "sdpa": "schedcheck.gpu.backends.sdpa:SdpaBackend",
    "torch-ref": "schedcheck.gpu.backends.torch_ref:TorchRefBackend",
}
PREFERENCE: tuple[str, ...] = tuple(_CLASSES)
CPU_PREFERENCE: tuple[str, ...] = ("torch-ref", "sdpa")
NAMES: tuple[str, ...] = (*PREFERENCE, "auto")


def get_backend(name: str) -> AttentionBackend:
    """A fresh backend instance by name (not `auto`); ValueError for an unknown name."""
    if name not in _CLASSES:
        raise ValueError(f"unknown backend {name!r}: use one of {', '.join(NAMES)}")
    module_name, _, attr = _CLASSES[name].partition(":")
    return getattr(importlib.import_module(module_name), attr)()


def choose_backend(name: str, spec: BackendSpec) -> AttentionBackend:
    """The named backend after checking it takes `spec`, or for `auto` the first that does.

    Raises BackendRefused with the backend's reason (for `auto`: every backend's reason).
    """
    from schedcheck.gpu.backends.base import BackendRefused

    if name != "auto":
        backend = get_backend(name)
        backend.check(spec)
        return backend
    reasons = []
    for candidate in _preference(spec):
        backend = get_backend(candidate)
        reason = backend.refusal(spec)
        if reason is None:
            return backend
        reasons.append(reason)
    raise BackendRefused("no backend takes this configuration: " + " | ".join(reasons))


def available_backends(spec: BackendSpec) -> list[str]:
    """Names of every backend that takes `spec` here, in preference order."""
    return [n for n in _preference(spec) if get_backend(n).refusal(spec) is None]


def _preference(spec: BackendSpec) -> tuple[str, ...]:
    return CPU_PREFERENCE if spec.device_type == "cpu" else PREFERENCE
