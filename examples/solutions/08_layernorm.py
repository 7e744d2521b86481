import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_stats_kernel(x_ptr, mean_ptr, rstd_ptr, N, stride_row, eps, BLOCK_N: tl.constexpr):
    # pass 1: per-row mean and 1/std (biased variance, like nn.LayerNorm)
    row = tl.program_id(0)
    base = x_ptr + row.to(tl.int64) * stride_row
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        acc += tl.load(base + cols, mask=cols < N, other=0.0)
    mean = tl.sum(acc, axis=0) / N
    acc_var = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        d = tl.where(mask, tl.load(base + cols, mask=mask, other=0.0) - mean, 0.0)
        acc_var += d * d
    var = tl.sum(acc_var, axis=0) / N
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, 1.0 / tl.sqrt(var + eps))


@triton.jit
def normalize_kernel(x_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, y_ptr, M, N, stride_row,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # pass 2: 2D tiles, y = (x - mean) * rstd * w + b
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = rows < M
    cmask = cols < N
    mask = rmask[:, None] & cmask[None, :]
    offs = rows[:, None].to(tl.int64) * stride_row + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    mean = tl.load(mean_ptr + rows, mask=rmask, other=0.0)
    rstd = tl.load(rstd_ptr + rows, mask=rmask, other=0.0)
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0)
    b = tl.load(b_ptr + cols, mask=cmask, other=0.0)
    y = (x - mean[:, None]) * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.ln = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x):
        x = x.contiguous()
        M, N = x.shape
        y = torch.empty_like(x)
        mean = torch.empty((M,), device=x.device, dtype=torch.float32)
        rstd = torch.empty((M,), device=x.device, dtype=torch.float32)
        BLOCK_STATS = min(4096, triton.next_power_of_2(N))
        row_stats_kernel[(M,)](x, mean, rstd, N, x.stride(0), self.ln.eps,
                               BLOCK_N=BLOCK_STATS, num_warps=8)
        BLOCK_M, BLOCK_N = 8, min(512, triton.next_power_of_2(N))
        grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
        normalize_kernel[grid](x, self.ln.weight, self.ln.bias, mean, rstd, y, M, N, x.stride(0),
                               BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=4)
        return y
