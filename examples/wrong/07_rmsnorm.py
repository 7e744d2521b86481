# WRONG: forgets to multiply by the learned weight (returns the plain normalized x).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, N, stride_row, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    offs = row.to(tl.int64) * stride_row + cols
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    mean_sq = tl.sum(x * x, axis=0) / N
    rstd = 1.0 / tl.sqrt(mean_sq + eps)
    tl.store(y_ptr + offs, x * rstd, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))
        self.eps = eps

    def forward(self, x):
        x = x.contiguous()
        M, N = x.shape
        y = torch.empty_like(x)
        BLOCK_N = triton.next_power_of_2(N)
        rmsnorm_kernel[(M,)](x, self.weight, y, N, x.stride(0), self.eps,
                             BLOCK_N=BLOCK_N, num_warps=8 if BLOCK_N >= 2048 else 4)
        return y
