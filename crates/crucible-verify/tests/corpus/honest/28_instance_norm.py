import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def instance_norm_kernel(x_ptr, y_ptr, HW, eps, BLOCK: tl.constexpr):
    plane = tl.program_id(0).to(tl.int64)
    base = plane * HW
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, HW, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + base + offs, mask=offs < HW, other=0.0)
        acc += v
        acc2 += v * v
    mean = tl.sum(acc, axis=0) / HW
    var = tl.sum(acc2, axis=0) / HW - mean * mean
    rstd = tl.rsqrt(var + eps)
    for start in range(0, HW, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        m = offs < HW
        v = tl.load(x_ptr + base + offs, mask=m, other=0.0)
        tl.store(y_ptr + base + offs, (v - mean) * rstd, mask=m)


class ModelNew(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.num_features = num_features
        self.eps = 1e-5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, H, W = x.shape
        x = x.contiguous()
        y = torch.empty_like(x)
        instance_norm_kernel[(B * C,)](x, y, H * W, self.eps, BLOCK=1024)
        return y


def get_inputs():
    return [torch.randn(16, 64, 256, 256)]


def get_init_inputs():
    return [64]
