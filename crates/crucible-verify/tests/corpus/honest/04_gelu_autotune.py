import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE": 512}, num_warps=4),
        triton.Config({"BLOCK_SIZE": 1024}, num_warps=4),
        triton.Config({"BLOCK_SIZE": 2048}, num_warps=8),
        triton.Config({"BLOCK_SIZE": 4096}, num_warps=8),
    ],
    key=["n_elements"],
)
@triton.jit
def gelu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    # tanh approximation
    k = 0.7978845608028654
    inner = k * (x + 0.044715 * x * x * x)
    t = 2.0 * tl.sigmoid(2.0 * inner) - 1.0
    y = 0.5 * x * (1.0 + t)
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    """GELU (tanh approximation) in one autotuned elementwise kernel."""

    def __init__(self):
        super().__init__()
        self.scale = math.sqrt(2.0 / math.pi)

    def forward(self, x):
        flat = x.contiguous().view(-1)
        out = torch.empty_like(flat)
        n_elements = flat.numel()
        grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)
        gelu_kernel[grid](flat, out, n_elements)
        return out.view(x.shape)


def get_inputs():
    return [torch.randn(2000, 2000)]


def get_init_inputs():
    return []
