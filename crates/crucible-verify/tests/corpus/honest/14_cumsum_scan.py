import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _add_combine(a, b):
    return a + b


@triton.jit
def cumsum_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    y = tl.associative_scan(x, 0, _add_combine)
    tl.store(y_ptr + row * stride + cols, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        assert self.dim == x.dim() - 1 or self.dim == -1, "only the last dim is supported"
        x = x.contiguous()
        rows = x.numel() // x.shape[-1]
        y = torch.empty_like(x)
        cumsum_kernel[(rows,)](x, y, x.shape[-1], x.shape[-1], BLOCK=triton.next_power_of_2(x.shape[-1]))
        return y


def get_inputs():
    return [torch.randn(128, 4000)]


def get_init_inputs():
    return [1]
