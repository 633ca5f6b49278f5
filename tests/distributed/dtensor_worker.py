"""One rank of the DTensor checks; launched by test_dtensor.py with ``torch.distributed.run``.

Every check runs on every rank; each rank writes ``{check: "ok" | traceback}`` as JSON to
``<outdir>/rank<r>.json``. Ops and most rules are declared BEFORE ``torch.distributed.tensor``
is imported, so the checks also cover rules applied by the import hook.

``OPREG_DIST_DEVICE=cuda``: one GPU per rank (``LOCAL_RANK``) and NCCL instead of CPU and
gloo, plus the checks that the Triton kernels run on each rank's own GPU under its guard.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

import opreg_core
from opreg_core import (
    CustomSharding,
    RowwiseSharding,
    register_sharding_rule,
    register_vmap_op,
    unregister,
)

DTENSOR_IMPORTED_EARLY = "torch.distributed.tensor" in sys.modules


def _mul_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * 2 + y


def _two(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x - y, x * y


def _rows(seeds: torch.Tensor, n: int) -> torch.Tensor:
    """Row i depends only on seeds[i] (like philox_*)."""
    columns = torch.arange(n, dtype=torch.double, device=seeds.device)
    return torch.sin(seeds.unsqueeze(-1).double() * 0.37 + columns)


def _rows_fake(seeds: torch.Tensor, n: int) -> torch.Tensor:
    return seeds.new_empty((*seeds.shape, n), dtype=torch.double)


def _scale_rows(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Every row reads the whole ``w``."""
    return x * w.sum()


def _row_sum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(-1)


def _like(x: torch.Tensor, *_: object) -> torch.Tensor:
    return torch.empty_like(x)


mul_add = register_vmap_op(
    _mul_add, fake_fn=_like, vmap_fn=_mul_add, fake_vmap_fn=_like, name="dist_test::mul_add"
)
register_sharding_rule(mul_add, "elementwise")
two = register_vmap_op(
    _two, fake_fn=lambda x, y: (torch.empty_like(x), torch.empty_like(x)), name="dist_test::two"
)
register_sharding_rule(two, "elementwise")
rows = register_vmap_op(
    _rows, fake_fn=_rows_fake, vmap_fn=_rows, fake_vmap_fn=_rows_fake, name="dist_test::rows"
)
register_sharding_rule(rows, "rowwise")
scale_rows = register_vmap_op(_scale_rows, fake_fn=_like, name="dist_test::scale_rows")
register_sharding_rule(scale_rows, RowwiseSharding(replicated=("w",)))
row_sum = register_vmap_op(
    _row_sum, fake_fn=lambda x: x.new_empty(x.shape[:-1]), name="dist_test::row_sum"
)
replicated_row_sum = register_vmap_op(
    _row_sum, fake_fn=lambda x: x.new_empty(x.shape[:-1]), name="dist_test::replicated_row_sum"
)
register_sharding_rule(replicated_row_sum, "replicate")
no_rule = register_vmap_op(_mul_add, fake_fn=_like, name="dist_test::no_rule")
autocast_mul_add = register_vmap_op(
    _mul_add,
    fake_fn=_like,
    name="dist_test::autocast_mul_add",
    sharding="elementwise",
    autocast="lower_precision",
)

DTENSOR_IMPORTED_BY_RULES = "torch.distributed.tensor" in sys.modules

import torch.distributed as dist  # noqa: E402
from torch.distributed.tensor import (  # noqa: E402
    DTensor,
    Replicate,
    Shard,
    distribute_tensor,
    init_device_mesh,
)

DEVICE = os.environ.get("OPREG_DIST_DEVICE", "cpu")
if DEVICE == "cuda":
    LOCAL_RANK = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(LOCAL_RANK)
    dist.init_process_group("nccl", device_id=torch.device("cuda", LOCAL_RANK))
else:
    dist.init_process_group("gloo")
MESH = init_device_mesh(DEVICE, (dist.get_world_size(),))
torch.manual_seed(0)  # the same global tensors on every rank
X = torch.randn(5, 6, dtype=torch.double).to(DEVICE)  # 5 rows: uneven over 2 ranks
Y = torch.randn(5, 6, dtype=torch.double).to(DEVICE)
SEEDS = torch.tensor([3, 1, 4, 1, 5, 9, 2], dtype=torch.int64, device=DEVICE)


def dt(t: torch.Tensor, placement: object) -> DTensor:
    return distribute_tensor(t, MESH, [placement])  # type: ignore[list-item]


def check(result: object, expected: torch.Tensor, placement: object) -> None:
    assert isinstance(result, DTensor), type(result)
    assert tuple(result.placements) == (placement,), result.placements
    torch.testing.assert_close(result.full_tensor(), expected, rtol=0, atol=0)


def check_lazy_import() -> None:
    assert not DTENSOR_IMPORTED_EARLY
    assert not DTENSOR_IMPORTED_BY_RULES, "declaring a rule imported torch.distributed.tensor"


def check_elementwise() -> None:
    for p in (Shard(0), Shard(1), Replicate()):
        check(mul_add(dt(X, p), dt(Y, p)), _mul_add(X, Y), p)
    # mixed: the cheapest declared placement wins, the values stay exact
    out = mul_add(dt(X, Shard(1)), dt(Y, Replicate()))
    torch.testing.assert_close(out.full_tensor(), _mul_add(X, Y), rtol=0, atol=0)
    # broadcasting: y of shape (6,) stays replicated while x is split on rows
    check(mul_add(dt(X, Shard(0)), dt(Y[0], Replicate())), _mul_add(X, Y[0]), Shard(0))


def check_elementwise_two_outputs() -> None:
    a, b = two(dt(X, Shard(1)), dt(Y, Shard(1)))
    check(a, X - Y, Shard(1))
    check(b, X * Y, Shard(1))


def check_elementwise_vmap() -> None:
    out = torch.vmap(mul_add)(dt(X, Shard(1)), dt(Y, Shard(1)))
    check(out, _mul_add(X, Y), Shard(1))
    assert mul_add.vmap_stats is not None


def check_rowwise() -> None:
    expected = _rows(SEEDS, 4)
    for p in (Shard(0), Replicate()):  # replicated seeds are split: rows computed once
        check(rows(dt(SEEDS, p), 4), expected, Shard(0))
    seeds2 = SEEDS[:6].reshape(3, 2)
    check(rows(dt(seeds2, Shard(1)), 3), _rows(seeds2, 3), Shard(0))


def check_rowwise_vmap() -> None:
    seeds2 = SEEDS[:6].reshape(3, 2)
    check(torch.vmap(rows, in_dims=(0, None))(dt(seeds2, Shard(0)), 3), _rows(seeds2, 3), Shard(0))
    check(torch.vmap(rows, in_dims=(0, None))(dt(seeds2, Shard(1)), 3), _rows(seeds2, 3), Shard(1))


def check_rowwise_replicated_arg() -> None:
    w = torch.randn(3, dtype=torch.double, device=DEVICE)
    check(scale_rows(dt(X, Shard(0)), dt(w, Shard(0))), _scale_rows(X, w), Shard(0))


def check_replicate() -> None:
    for p in (Shard(0), Shard(1), Replicate()):
        check(replicated_row_sum(dt(X, p)), X.sum(-1), Replicate())


def check_custom() -> None:
    def rule(x: object) -> list[tuple[list[object], list[object]]]:
        return [([Shard(0)], [Shard(0)]), ([Replicate()], [Replicate()])]

    register_sharding_rule(row_sum, rule)
    check(row_sum(dt(X, Shard(0))), X.sum(-1), Shard(0))
    check(row_sum(dt(X, Replicate())), X.sum(-1), Replicate())
    out = row_sum(dt(X, Shard(1)))  # redistributed to a declared placement (DTensor's choice)
    assert tuple(out.placements) in ((Shard(0),), (Replicate(),)), out.placements
    torch.testing.assert_close(out.full_tensor(), X.sum(-1), rtol=0, atol=0)
    register_sharding_rule(row_sum, CustomSharding(lambda x: [([Replicate()], [Replicate()])]))
    check(row_sum(dt(X, Shard(0))), X.sum(-1), Replicate())  # the new rule, not a cached one


def check_no_rule_fails() -> None:
    try:
        no_rule(dt(X, Shard(0)), dt(Y, Shard(0)))
    except NotImplementedError as exc:
        assert "does not have a sharding strategy registered" in str(exc), str(exc)
    else:
        raise AssertionError("an op without a sharding rule ran on DTensors")


def check_autocast() -> None:
    """Under autocast an op with a rule casts its DTensor arguments (a DTensor ``.to``, each
    shard cast), as an ATen op of the same policy (``mm``) does on DTensors."""
    xf, yf = X.float(), Y.float()
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        out = autocast_mul_add(dt(xf, Shard(0)), dt(yf, Shard(0)))
        aten = torch.mm(dt(xf, Shard(0)), dt(yf.T.contiguous(), Replicate()))
    assert out.dtype == aten.dtype == torch.bfloat16, (out.dtype, aten.dtype)
    assert out._local_tensor.dtype == torch.bfloat16
    check(out, _mul_add(xf.to(torch.bfloat16), yf.to(torch.bfloat16)), Shard(0))
    assert autocast_mul_add(dt(xf, Shard(0)), dt(yf, Shard(0))).dtype == torch.float32


def check_reregistration() -> None:
    name = "dist_test::again"
    try:
        op = register_vmap_op(_mul_add, fake_fn=_like, name=name)
        register_sharding_rule(op, "elementwise")
        register_sharding_rule(op, "elementwise")  # twice: harmless
        check(op(dt(X, Shard(0)), dt(Y, Shard(0))), _mul_add(X, Y), Shard(0))
        op2 = register_vmap_op(_two, fake_fn=lambda x, y: (_like(x), _like(x)), name=name)
        register_sharding_rule(op2, "replicate")
        a, b = op2(dt(X, Shard(0)), dt(Y, Shard(0)))
        check(a, X - Y, Replicate())
        check(b, X * Y, Replicate())
        op3 = register_vmap_op(_mul_add, fake_fn=_like, name=name)  # no rule this time
        register_sharding_rule(op3, None)  # what register_vmap_op(..., sharding=None) does
        try:
            op3(dt(X, Shard(0)), dt(Y, Shard(0)))
        except NotImplementedError:
            pass
        else:
            raise AssertionError("the re-registered op kept the earlier op's rule")
    finally:
        unregister(name)


def check_shipped_philox() -> None:
    try:
        import opreg_kernels
    except Exception:  # opreg-kernels is optional here
        return
    for op in (opreg_kernels.philox_uniform, opreg_kernels.philox_normal):
        assert type(op.sharding).__name__ == "RowwiseSharding", op.sharding  # declared by the op
        expected = op(SEEDS, 9, counter=3)
        for p in (Shard(0), Replicate()):
            check(op(dt(SEEDS, p), 9, counter=3), expected, Shard(0))
    a = opreg_kernels.fused_add
    assert type(a.sharding).__name__ == "ElementwiseSharding", a.sharding
    for p in (Shard(0), Shard(1), Replicate()):
        check(a(dt(X, p), dt(Y, p)), X + Y, p)


def check_compiled() -> None:
    """torch.compile(fullgraph=True) over DTensor arguments: aot_eager on CPU (tracing through
    DTensor, the sharding rules and the fakes), Inductor on CUDA."""
    backend = "inductor" if DEVICE == "cuda" else "aot_eager"

    def f(a: torch.Tensor, b: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return mul_add(a, b) + 1, rows(s, 3) * 2

    torch._dynamo.reset()
    compiled = torch.compile(f, backend=backend, fullgraph=True)
    a, b = compiled(dt(X, Shard(0)), dt(Y, Shard(0)), dt(SEEDS, Shard(0)))
    check(a, _mul_add(X, Y) + 1, Shard(0))
    check(b, _rows(SEEDS, 3) * 2, Shard(0))
    try:
        import opreg_kernels
    except Exception:  # opreg-kernels is optional here
        return

    def g(a: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return opreg_kernels.fused_add(a, a) * 2, opreg_kernels.philox_normal(s, 5, 3) + 1

    torch._dynamo.reset()
    compiled = torch.compile(g, backend=backend, fullgraph=True)
    c, d = compiled(dt(X, Shard(1)), dt(SEEDS, Shard(0)))
    expected = g(X, SEEDS)
    check(c, expected[0], Shard(1))
    check(d, expected[1], Shard(0))


def cuda_check_triton_on_local_shard() -> None:
    """The shipped ops' Triton kernels (not their fallbacks) ran on this rank's GPU."""
    import opreg_kernels
    from opreg_kernels.ops.fused_add import triton_kernels as add
    from opreg_kernels.ops.philox import triton_kernels as philox

    for launcher in (add._launch_add, philox._long_rows, philox._short_rows):
        launcher.clear()
    seeds = torch.arange(4096, device=DEVICE) * 7 + 1  # long rows and short rows
    for n in (4096, 8):
        for op in (opreg_kernels.philox_uniform, opreg_kernels.philox_normal):
            out = op(dt(seeds, Shard(0)), n)
            assert out._local_tensor.device == torch.device("cuda", LOCAL_RANK)
            expected = op.fallback(seeds.cpu(), n).to(DEVICE)
            tolerance = 0 if op is opreg_kernels.philox_uniform else 4e-6
            torch.testing.assert_close(out.full_tensor(), expected, rtol=0, atol=tolerance)
    x = torch.randn(4096, 8, device=DEVICE)
    added = opreg_kernels.fused_add(dt(x, Shard(0)), dt(x, Shard(0)))
    torch.testing.assert_close(added.full_tensor(), x + x, rtol=0, atol=0)
    for launcher in (add._launch_add, philox._long_rows, philox._short_rows):
        devices = {key[1] if launcher is not add._launch_add else key[0] for key in launcher._cache}
        assert devices == {LOCAL_RANK}, (launcher.fn.__name__, devices)


def cuda_check_device_guard() -> None:
    """With another GPU current, each rank's shard still runs on its own GPU, and the
    current device is left as it was."""
    import opreg_kernels

    other = 1 - LOCAL_RANK
    seeds = torch.arange(64, device=DEVICE) + 11
    x = torch.randn(64, 16, device=DEVICE)
    expected_u = opreg_kernels.philox_uniform(seeds, 1000, 5)
    expected_n = opreg_kernels.philox_normal(seeds, 1000, 5)
    sharded_seeds, sharded_x = dt(seeds, Shard(0)), dt(x, Shard(0))
    torch.cuda.synchronize()
    torch.cuda.set_device(other)
    try:
        u = opreg_kernels.philox_uniform(sharded_seeds, 1000, 5)
        z = opreg_kernels.philox_normal(sharded_seeds, 1000, 5)
        a = opreg_kernels.fused_add(sharded_x, sharded_x)
        assert torch.cuda.current_device() == other
        local = (u._local_tensor, z._local_tensor, a._local_tensor)
        torch.cuda.synchronize(LOCAL_RANK)
    finally:
        torch.cuda.set_device(LOCAL_RANK)
    assert all(t.device == torch.device("cuda", LOCAL_RANK) for t in local)
    torch.testing.assert_close(u.full_tensor(), expected_u, rtol=0, atol=0)
    torch.testing.assert_close(z.full_tensor(), expected_n, rtol=0, atol=0)
    torch.testing.assert_close(a.full_tensor(), x + x, rtol=0, atol=0)


def _checks(prefix: str) -> dict[str, Callable[[], None]]:
    """The check functions named ``<prefix><check>``, by check name."""
    return {
        name[len(prefix) :]: fn
        for name, fn in dict(globals()).items()
        if name.startswith(prefix) and callable(fn)
    }


CHECKS = _checks("check_")
if DEVICE == "cuda":
    CHECKS.update(_checks("cuda_check_"))


def main() -> None:
    outdir = Path(sys.argv[1])
    results = {}
    for name, fn in CHECKS.items():
        try:
            fn()
            results[name] = "ok"
        except BaseException:
            results[name] = traceback.format_exc()
        dist.barrier()
    results["_opreg_core"] = opreg_core.__version__
    results["_device"] = str(X.device)
    (outdir / f"rank{dist.get_rank()}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
