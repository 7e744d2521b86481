import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_gelu_kernel(x_ptr, b_ptr, y_ptr, n_cols, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    b = tl.load(b_ptr + offs % n_cols, mask=m)
    v = x + b
    y = 0.5 * v * (1.0 + tl.erf(v * 0.7071067811865476))
    tl.store(y_ptr + offs, y, mask=m)


class TritonBiasGelu(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        bias_gelu_kernel[(triton.cdiv(n, 1024),)](x, self.bias, y, x.shape[-1], n, BLOCK=1024)
        return y


class ModelNew(nn.Module):
    def __init__(self, features: int, depth: int = 2):
        super().__init__()
        self.blocks = nn.ModuleList([TritonBiasGelu(features) for _ in range(depth)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def get_inputs():
    return [torch.randn(128, 4096)]


def get_init_inputs():
    return [4096]
