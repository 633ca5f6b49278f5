"""The lock of the op registry, below every module that takes it.

Held while an op is (re-)registered or unregistered and while a kernel is added to one
(``_kernels``), so that these stay consistent across threads. It lives apart from
``_registry`` (which holds the ops and so sits above ``_op``) because ``_op`` adds kernels.
"""

from __future__ import annotations

import threading

__all__ = ["registry_lock"]

_lock = threading.RLock()


def registry_lock() -> threading.RLock:
    """The registry's lock (re-entrant: a registration adds kernels while holding it)."""
    return _lock
