"""opreg ops on DTensor: ``torchrun --nproc-per-node 2 examples/distributed/dtensor_example.py``.

Uses NCCL when every rank has a GPU (NVLink multicast off), gloo on CPU otherwise. The op is
declared row-wise: each rank computes its own rows, and the result equals the unsharded call.
Then the same for opreg-kernels' ``philox_normal`` (if installed): each rank draws the rows of
its own seeds, with its Triton kernel on a GPU.
"""

from __future__ import annotations

import os

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

import torch
import torch.distributed as dist

from opreg_core import register_sharding_rule, register_vmap_op


@register_vmap_op(
    fake_fn=lambda x, scale: torch.empty_like(x), name="dtensor_example::softmax_rows"
)
def softmax_rows(x: torch.Tensor, scale: float) -> torch.Tensor:
    """Row-independent: each row's softmax reads only that row."""
    return torch.softmax(x * scale, dim=-1)


register_sharding_rule(softmax_rows, "rowwise")


def main() -> None:
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor, init_device_mesh

    use_cuda = torch.cuda.is_available() and torch.cuda.device_count() >= int(
        os.environ.get("LOCAL_WORLD_SIZE", "1")
    )
    device = "cuda" if use_cuda else "cpu"
    if use_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if use_cuda else "gloo")
    mesh = init_device_mesh(device, (dist.get_world_size(),))
    torch.manual_seed(0)  # the same global tensor on every rank
    x = torch.randn(10, 16, device=device)
    expected = softmax_rows(x, 0.5)
    for placement in (Shard(0), Shard(1), Replicate()):
        out = softmax_rows(distribute_tensor(x, mesh, [placement]), 0.5)
        same = torch.equal(out.full_tensor(), expected)
        if dist.get_rank() == 0:
            print(f"input {placement}: output {out.placements}, equals unsharded: {same}")
        assert same
    try:
        from opreg_kernels import philox_normal
    except ImportError:  # opreg-kernels is optional
        philox_normal = None
    if philox_normal is not None:
        seeds = torch.arange(1000, device=device)
        draws = philox_normal(distribute_tensor(seeds, mesh, [Shard(0)]), 256)
        same = torch.equal(draws.full_tensor(), philox_normal(seeds, 256))
        if dist.get_rank() == 0:
            print(f"philox_normal on seeds {draws.placements}: equals unsharded: {same}")
        assert same
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
