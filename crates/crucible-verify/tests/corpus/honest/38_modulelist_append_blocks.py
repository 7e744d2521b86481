import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_shift_gelu_kernel(x_ptr, s_ptr, t_ptr, y_ptr, n, n_cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    col = offs % n_cols
    v = tl.load(x_ptr + offs, mask=m) * tl.load(s_ptr + col, mask=m) + tl.load(t_ptr + col, mask=m)
    tl.store(y_ptr + offs, 0.5 * v * (1.0 + tl.erf(v * 0.7071067811865476)), mask=m)


@triton.jit
def residual_add_kernel(a_ptr, b_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(a_ptr + offs, mask=m) + tl.load(b_ptr + offs, mask=m), mask=m)


def residual_add(a, b):
    y = torch.empty_like(a)
    n = a.numel()
    residual_add_kernel[(triton.cdiv(n, 1024),)](a, b, y, n, BLOCK=1024)
    return y


class ScaleShiftGelu(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(features))
        self.shift = nn.Parameter(torch.zeros(features))

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        scale_shift_gelu_kernel[(triton.cdiv(n, 1024),)](
            x, self.scale, self.shift, y, n, x.shape[-1], BLOCK=1024
        )
        return y


class ResidualBlock(nn.Module):
    """The block's own forward launches through a submodule and a helper function."""

    def __init__(self, features):
        super().__init__()
        self.act = ScaleShiftGelu(features)

    def forward(self, x):
        return residual_add(x, self.act(x))


class ModelNew(nn.Module):
    def __init__(self, features, depth=3):
        super().__init__()
        self.blocks = nn.ModuleList()
        for _ in range(depth):
            self.blocks.append(ResidualBlock(features))

    def forward(self, x):
        for i, block in enumerate(self.blocks):
            x = block(x)
        return x


def get_inputs():
    return [torch.randn(64, 2048)]


def get_init_inputs():
    return [2048, 3]
