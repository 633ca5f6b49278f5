import runpy, json, torch, warnings
warnings.simplefilter("ignore")
from opreg_core import SampleInput
from opreg_testing import check_op
from opreg_kernels import triton_kernel_info
ex = runpy.run_path("examples/triton_rmsnorm.py")
op = ex["rms_norm"]
g = torch.Generator().manual_seed(0)
x = torch.randn(4, 96, generator=g).cuda(); w = torch.rand(96, generator=g).add(0.5).cuda()
before = sorted(triton_kernel_info(op).device_types)
r = check_op(op, [SampleInput((x, w, 1e-6))], checks="autograd", device="cuda")["autograd"]
print(json.dumps({"status": r.status, "reason": r.reason, "info": {k: str(v) for k, v in r.info.items()}, "notes": r.notes}, indent=1))
print("device types before/after", before, sorted(triton_kernel_info(op).device_types))
y = op(x, w, 1e-6); print("still triton after:", torch.allclose(y, torch.nn.functional.rms_norm(x, (96,), w, 1e-6), atol=1e-5))

# a register_kernel CUDA kernel computing in float32 (not Triton): finite differences on CPU copies
from opreg_core import register_vmap_op
def setup(ctx, inputs, output): ctx.save_for_backward(inputs[0])
def samples(device):
    yield SampleInput((torch.randn(3, 4, generator=torch.Generator().manual_seed(1)).to(device),))
for name, scale in (("right", 1.0), ("wrong", 0.5)):
    op2 = register_vmap_op(torch.sin, name=f"gpu_prec::sin_{name}", schema="(Tensor x) -> Tensor",
        fake_fn=torch.empty_like, backward=lambda ctx, g, s=scale: g * torch.cos(ctx.saved_tensors[0]) * s,
        setup_context=setup, sample_inputs=samples)
    op2.register_kernel("cuda", lambda x: torch.sin(x.float()).to(x.dtype))
    r = check_op(op2, checks="autograd", device="cuda")["autograd"]
    print(name, r.status, r.reason[:300], r.info.get("kernel_precision"), r.info.get("finite_differences_on"), r.notes)
