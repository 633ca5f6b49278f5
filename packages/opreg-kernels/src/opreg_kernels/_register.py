"""``register_triton_op``: an opreg op whose Triton launcher serves chosen device types.

Builds on :func:`opreg_core.register_vmap_op` (the decorated function is the fallback
everywhere, and every keyword of that function means the same here) and adds one dispatcher
kernel (:func:`~opreg_kernels._dispatch_kernel.make_triton_kernel`) per Triton device type
through :meth:`opreg_core.VmapOp.register_kernel`.
"""

from collections.abc import Callable, Sequence
from typing import Annotated, Any, Final, ParamSpec, TypeVar, Unpack, cast, overload

from opreg_core import (
    Default,
    VmapOp,
    VmapOpOptions,
    default_name,
    device_type_name,
    option_values,
    register_vmap_op,
)

from ._availability import triton_device_types
from ._compiler_visible import add_decomposition_rules
from ._derivative_guard import guard_derivatives
from ._dispatch_kernel import Launcher
from ._kernel_info import EXTENSION_KEY, TritonKernelInfo

__all__ = ["TritonOpOptions", "register_triton_op"]

P = ParamSpec("P")
R = TypeVar("R")


class TritonOpOptions(VmapOpOptions, total=False):
    """The keywords of :func:`register_triton_op`: those of ``register_vmap_op`` (see
    :class:`~opreg_core.VmapOpOptions`) and the Triton ones below, each declared here once:
    its name, type, default (``Default(...)``; None without one) and meaning.
    ``triton_fn`` is required.
    """

    triton_fn: Launcher | None
    """The launcher, called with the op's arguments (plain tensors) on each Triton device
    type; it allocates the outputs and launches the kernel. A ``"package.module:function"``
    string is imported on the first launch, which keeps modules with ``@triton.jit`` kernels
    out of import time."""
    triton_device_types: str | Sequence[str] | None
    """Device types that get the launcher: None (default) for
    :func:`~opreg_kernels.triton_device_types` at registration time, a str, or a sequence of
    str. Types this torch build does not know are skipped (see :func:`triton_kernel_info`)."""
    triton_vmap_fn: Launcher | None
    """Optional launcher for the batched operator (``vmap_fn``'s signature), so that
    ``vmap(op)`` runs Triton too; needs ``vmap_fn``."""
    compiler_visible: Annotated[bool, Default(False)]
    """False (default): ``torch.compile``, ``torch.export`` and AOTInductor see the op as one
    opaque operator. True: the launcher calls each kernel as
    ``torch.library.wrap_triton(kernel)[grid](...)`` and uses only PyTorch operations
    otherwise; then, under ``torch.compile`` on a device type that runs the Triton launcher
    (Triton available, not interpreted), the op decomposes into its kernels, which Inductor
    launches from its own code (and AOTInductor compiles into its package, which then runs
    without opreg). On every other device, and in eager everywhere, the op behaves as with
    False (the fallback off the Triton devices), so compiled results equal eager ones there.
    ``torch.export`` keeps the op whole. The batched op is visible too when ``triton_vmap_fn``
    is given (it follows the same rules); otherwise ``vmap`` of the op runs ``vmap_fn`` as an
    opaque batched operator. A launcher that cannot be traced (e.g. a bare ``kernel[grid](...)``
    call) fails the compilation with an error that says so; it never runs silently."""


#: The keywords register_triton_op adds to register_vmap_op's (kept from it, not forwarded).
_TRITON_KEYS: Final = TritonOpOptions.__optional_keys__ - VmapOpOptions.__optional_keys__


def _split_options(options: TritonOpOptions) -> tuple[dict[str, Any], VmapOpOptions]:
    """``options`` checked against :class:`TritonOpOptions`: the Triton ones (every one, with
    its default where not given) and the rest, as given, for ``register_vmap_op``."""
    values = option_values(TritonOpOptions, options, "register_triton_op")
    triton = {key: values[key] for key in _TRITON_KEYS}
    core = {key: value for key, value in options.items() if key not in _TRITON_KEYS}
    return triton, cast(VmapOpOptions, core)


def _device_type_set(qualname: str, value: object) -> frozenset[str]:
    """Normalise ``triton_device_types``: None (the global set), a str, or a sequence of str."""
    if value is None:
        return triton_device_types()
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, (list, tuple, set, frozenset)) or not all(
        isinstance(v, str) for v in items
    ):
        raise TypeError(
            f"opreg: {qualname}: triton_device_types must be None, a str or a sequence of str, "
            f"got {value!r}"
        )
    names = frozenset(device_type_name(v) for v in items)
    if "" in names:
        raise ValueError(f"opreg: {qualname}: triton_device_types contains an empty device type")
    return names


def _check_launcher(qualname: str, label: str, value: object) -> Launcher:
    """``value`` as a launcher, or a TypeError naming the op."""
    if callable(value):
        return cast(Launcher, value)
    if isinstance(value, str):
        module, sep, attr = value.partition(":")
        if module and sep and attr.isidentifier():
            return value
    raise TypeError(
        f"opreg: {qualname}: {label} must be a callable or a 'package.module:function' string, "
        f"got {value!r}"
    )


def _register(f: Callable[P, R], options: TritonOpOptions) -> VmapOp[P, R]:
    """Check the Triton options, register the op with core, then give it its Triton kernels."""
    triton, core_options = _split_options(options)
    triton_fn, triton_vmap_fn = triton["triton_fn"], triton["triton_vmap_fn"]
    devices_option, compiler_visible = triton["triton_device_types"], triton["compiler_visible"]
    name = core_options.get("name")
    qualname = name if isinstance(name, str) else default_name(f)
    launcher = _check_launcher(qualname, "triton_fn", triton_fn)
    if triton_vmap_fn is not None:
        _check_launcher(qualname, "triton_vmap_fn", triton_vmap_fn)
        if core_options.get("vmap_fn") is None:
            raise ValueError(f"opreg: {qualname}: triton_vmap_fn is given but vmap_fn is not")
    if not isinstance(compiler_visible, bool):
        raise TypeError(
            f"opreg: {qualname}: compiler_visible must be True or False, got {compiler_visible!r}"
        )
    devices = _device_type_set(qualname, devices_option)
    guard_derivatives(qualname, cast(dict[str, object], core_options))
    op = register_vmap_op(f, **core_options)
    info = TritonKernelInfo(op, launcher, triton_vmap_fn, devices, compiler_visible)
    op.extensions[EXTENSION_KEY] = info
    if compiler_visible:
        operators = [op.overload]
        if triton_vmap_fn is not None and op.batched_overload is not None:
            operators.append(op.batched_overload)
        add_decomposition_rules(info, operators)
    for device in sorted(devices):
        info.add_device_type(device)
    return op


@overload
def register_triton_op(
    fn: Callable[P, R], /, **options: Unpack[TritonOpOptions]
) -> VmapOp[P, R]: ...


@overload
def register_triton_op(
    fn: None = None, /, **options: Unpack[TritonOpOptions]
) -> Callable[[Callable[P, R]], VmapOp[P, R]]: ...


def register_triton_op(
    fn: Callable[P, R] | None = None, /, **options: Unpack[TritonOpOptions]
) -> VmapOp[P, R] | Callable[[Callable[P, R]], VmapOp[P, R]]:
    """Register an op with a PyTorch fallback and a Triton launcher for chosen device types.

    The keywords are those of :class:`TritonOpOptions`, each documented there: every keyword
    of :func:`opreg_core.register_vmap_op` means the same here (see
    :class:`~opreg_core.VmapOpOptions`), and the others are Triton's. The decorated function
    is the fallback and serves every device that has no Triton kernel, and every device while
    Triton is unavailable. With ``sharding``, on DTensor arguments the Triton kernel runs on
    each rank's local shard, under its device's guard.

    Every launch runs with the tensors' device made current; a kernel that fails to
    compile or launch raises :class:`~opreg_kernels.TritonKernelError`. The op's
    :class:`~opreg_kernels.TritonKernelInfo` lives with it (``triton_kernel_info(op)``):
    ``opreg_core.unregister`` and a re-registration of the name drop it.
    """
    _split_options(options)  # a wrong keyword is refused at once, in the decorator form too
    if fn is None:

        def decorator(f: Callable[P, R]) -> VmapOp[P, R]:
            return _register(f, options)

        return decorator
    return _register(fn, options)
