"""Triton availability: may a Triton kernel run here, and on which device types.

Answers "may a Triton kernel run here?" without paying for it at import time:
Triton is imported on the first question (or first kernel launch), never by
``import opreg_kernels``, and no GPU driver is touched. A Triton that is
absent, broken or disabled (``OPREG_DISABLE_TRITON=1``) makes every op use its
PyTorch fallback, reported once (a log line, or one warning when Triton is
installed but fails to import).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import warnings

import torch

from opreg_core import device_type_name

__all__ = [
    "DISABLE_ENV_VAR",
    "has_triton",
    "register_triton_device_type",
    "triton_device_types",
    "triton_supports_device",
    "unregister_triton_device_type",
]

#: Environment variable that switches every Triton kernel off ("1", "true", "yes", "on").
DISABLE_ENV_VAR = "OPREG_DISABLE_TRITON"

_TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
_logger = logging.getLogger("opreg_kernels")
_lock = threading.Lock()
_device_types: frozenset[str] = frozenset({"cuda"})
_available: bool | None = None  # None: not decided yet


def triton_device_types() -> frozenset[str]:
    """Device types that new Triton ops get a kernel for by default (initially ``{"cuda"}``)."""
    return _device_types


def register_triton_device_type(name: str) -> None:
    """Add ``name`` to the default Triton device types of ops registered from now on.

    The name is normalised by :func:`opreg_core.device_type_name` (``" CUDA:1 "`` ->
    ``"cuda"``); an empty name is ignored. Ops already
    registered keep their kernels (see :meth:`TritonKernelInfo.add_device_type`).
    """
    global _device_types
    if not isinstance(name, str):
        raise TypeError(
            f"opreg: register_triton_device_type expects a str, got {type(name).__name__}"
        )
    normalized = device_type_name(name)
    if not normalized:
        return
    with _lock:
        _device_types = _device_types | {normalized}


def unregister_triton_device_type(name: str) -> None:
    """Remove ``name`` from the default Triton device types (inverse of the register call).

    The name is normalised the same way (:func:`opreg_core.device_type_name`); a name not in the
    set (or empty) is ignored. Ops already registered keep their kernels.
    """
    global _device_types
    if not isinstance(name, str):
        raise TypeError(
            f"opreg: unregister_triton_device_type expects a str, got {type(name).__name__}"
        )
    normalized = device_type_name(name)
    with _lock:
        if normalized in _device_types:
            _device_types = _device_types - {normalized}


def _disabled_by_env() -> bool:
    return os.environ.get(DISABLE_ENV_VAR, "").strip().lower() in _TRUE_WORDS


def _detect() -> bool:
    """Import Triton once and decide; reports the outcome in at most one line."""
    if _disabled_by_env():
        _logger.info(
            "Triton disabled by %s; opreg ops use their PyTorch fallbacks.", DISABLE_ENV_VAR
        )
        return False
    try:
        import triton  # noqa: F401
    except ModuleNotFoundError as exc:
        if exc.name != "triton":
            _warn_broken(exc)
        else:
            _logger.info("Triton is not installed; opreg ops use their PyTorch fallbacks.")
        return False
    except Exception as exc:  # a broken install can raise anything while importing
        _warn_broken(exc)
        return False
    return True


def _warn_broken(exc: BaseException) -> None:
    warnings.warn(
        f"opreg: Triton is installed but failed to import ({type(exc).__name__}: {exc}); "
        f"opreg ops use their PyTorch fallbacks. Set {DISABLE_ENV_VAR}=1 to silence this.",
        RuntimeWarning,
        stacklevel=4,  # the caller of has_triton()
    )


def has_triton() -> bool:
    """True if Triton imports and is not disabled by ``OPREG_DISABLE_TRITON``.

    The first call imports Triton (and reads the environment variable); the
    answer is cached for the life of the process. Never raises, never touches
    a GPU driver.
    """
    global _available
    if _available is None:
        with _lock:
            if _available is None:
                _available = _detect()
    return _available


def triton_interpreted() -> bool:
    """Whether Triton runs kernels in its interpreter (``TRITON_INTERPRET``, as Triton reads it).

    False while Triton is not imported (``has_triton()`` imports it): never imports it itself.
    """
    triton = sys.modules.get("triton")
    knobs = getattr(triton, "knobs", None)
    return bool(knobs is not None and knobs.runtime.interpret)


def triton_supports_device(device: object) -> bool:
    """True if a Triton kernel may run on ``device`` by default.

    ``device`` is a :class:`torch.device` or a string such as ``"cuda:1"`` or
    ``"npu"``; anything else gives False. True means Triton is available and
    the device type is one of :func:`triton_device_types`. Never raises.
    """
    if not isinstance(device, (str, torch.device)):
        return False
    return device_type_name(device) in _device_types and has_triton()
