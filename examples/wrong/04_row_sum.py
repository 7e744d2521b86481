# WRONG: off-by-one on the reduction loop bound - the last column block of every row is never summed.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, N, stride_row, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row.to(tl.int64) * stride_row
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, N - BLOCK_N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        acc += tl.load(base + cols, mask=cols < N, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        M, N = x.shape
        out = torch.empty((M,), device=x.device, dtype=x.dtype)
        BLOCK_N = min(2048, triton.next_power_of_2(N))
        row_sum_kernel[(M,)](x, out, N, x.stride(0), BLOCK_N=BLOCK_N, num_warps=8)
        return out
