# WRONG: the GELU tanh approximation is missing the 0.044715 * x^3 term inside tanh.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _tanh(u):
    # overflow-free tanh: tanh(|u|) = (1 - e) / (1 + e) with e = exp(-2|u|)
    e = tl.exp(-2.0 * tl.abs(u))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(u >= 0, t, -t)


@triton.jit
def gelu_tanh_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    k0 = 0.7978845608028654  # sqrt(2 / pi)
    inner = k0 * x
    y = 0.5 * x * (1.0 + _tanh(inner))
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        BLOCK = 2048
        gelu_tanh_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK, num_warps=8)
        return y
