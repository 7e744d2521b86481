import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def partial_sum_kernel(x_ptr, acc_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    cols = chunk * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.atomic_add(acc_ptr + row, tl.sum(v, axis=0))


@triton.jit
def scale_kernel(acc_ptr, out_ptr, n_rows, inv_n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n_rows
    s = tl.load(acc_ptr + offs, mask=m)
    tl.store(out_ptr + offs, s * inv_n, mask=m)


class ModelNew(nn.Module):
    """Mean over the last dimension: atomic partial sums, then one scaling pass."""

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x2 = x.contiguous().view(-1, x.shape[-1])
        n_rows, n_cols = x2.shape
        acc = torch.zeros(n_rows, device=x.device, dtype=torch.float32)
        BLOCK = 1024
        partial_sum_kernel[(n_rows, triton.cdiv(n_cols, BLOCK))](x2, acc, n_cols, BLOCK=BLOCK)
        out = torch.empty(n_rows, device=x.device, dtype=x.dtype)
        scale_kernel[(triton.cdiv(n_rows, 256),)](acc, out, n_rows, 1.0 / n_cols, BLOCK=256)
        return out.view(x.shape[:-1])


def get_inputs():
    return [torch.randn(16, 256, 4096)]


def get_init_inputs():
    return [-1]
