"""Triton: what ``Autotuner.run`` and ``Heuristics.run`` compute, for a launch that skips them."""

from __future__ import annotations

from typing import Any

#: Triton internals used here; checked only where Triton imports.
INTERNALS: tuple[str, ...] = (
    "triton.runtime.autotuner.Autotuner.cache",
    "triton.runtime.autotuner.Autotuner.configs",
    "triton.runtime.autotuner.Autotuner.keys",
    "triton.runtime.autotuner.Autotuner.arg_names",
    "triton.runtime.autotuner.Autotuner.best_config",
    "triton.runtime.autotuner.Heuristics.values",
    "triton.runtime.autotuner.Heuristics.arg_names",
)


# Why: an autotuned kernel's launch depends on the config its autotuner chose for the call's
# key (the values of its ``key`` arguments and the dtypes of the arguments), which
# ``Autotuner.run`` computes inline and keeps in ``Autotuner.cache``; the fast path computes
# the same key (as ``Autotuner.run`` does) and reads the chosen config, and leaves every call
# whose key was never tuned to Triton. Checked on Triton 3.6, 3.8, 3.9 (the same key in each;
# 3.8 adds a cache entry without benchmarking where pruning leaves one config, which a later
# call reads here as any other). Public replacement: a public "config for these arguments"
# on Autotuner.


def autotuner_config(autotuner: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The config ``autotuner.run(*args, **kwargs)`` would launch with, or None if it would
    benchmark first (a key it has not tuned yet)."""
    configs = autotuner.configs
    if len(configs) <= 1:
        return configs[0]
    names = autotuner.arg_names
    given = dict(zip(names, args, strict=False))
    given.update((k, v) for k, v in kwargs.items() if k in names)
    key = [given[k] for k in autotuner.keys if k in given]
    key.extend(str(v.dtype) for v in given.values() if hasattr(v, "dtype"))
    return autotuner.cache.get(tuple(key))


# Why: ``Autotuner.run`` records the config it launches with in ``best_config``, where users
# read which config was chosen (``kernel.best_config``, as Triton's tutorials print it); a
# launch that skips ``Autotuner.run`` records it the same way. Checked on Triton 3.6, 3.8,
# 3.9. Public replacement: the public "config for these arguments" above, recording it as
# ``run`` does.


def set_autotuner_best_config(autotuner: Any, config: Any) -> None:
    """Record ``config`` as the one ``autotuner`` launched with, as ``Autotuner.run`` does."""
    autotuner.best_config = config


# Why: ``@triton.heuristics`` computes its meta-parameters inline in ``Heuristics.run``
# (each heuristic, in order, sees the arguments by name, ``arg_names``, and the values
# before it; ``values`` maps each name to its function); a launch that skips
# ``Heuristics.run`` computes the same values. Checked on Triton 3.6, 3.8, 3.9 (the same
# ``Heuristics.run`` in each). Public replacement: a public "meta-parameters for these
# arguments" on Heuristics.


def heuristics_options(
    heuristics: Any, args: tuple[Any, ...], options: dict[str, Any]
) -> dict[str, Any]:
    """A new dict: ``options`` (the keyword arguments of a launch) plus the value of each
    heuristic of a ``@triton.heuristics`` layer, as ``Heuristics.run`` adds them."""
    options = dict(options)
    named = dict(zip(heuristics.arg_names, args, strict=False))
    for name, heuristic in heuristics.values.items():
        options[name] = heuristic({**named, **options})
    return options
