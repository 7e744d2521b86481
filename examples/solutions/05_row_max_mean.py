import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_N": 1024}, num_warps=4),
        triton.Config({"BLOCK_N": 2048}, num_warps=8),
        triton.Config({"BLOCK_N": 4096}, num_warps=8),
    ],
    key=["N"],
)
@triton.jit
def row_max_mean_kernel(x_ptr, max_ptr, mean_ptr, N, stride_row, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row.to(tl.int64) * stride_row
    run_max = tl.full((BLOCK_N,), float("-inf"), dtype=tl.float32)
    run_sum = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        v = tl.load(base + cols, mask=mask, other=0.0)
        run_max = tl.maximum(run_max, tl.where(mask, v, float("-inf")))
        run_sum += v
    tl.store(max_ptr + row, tl.max(run_max, axis=0))
    tl.store(mean_ptr + row, tl.sum(run_sum, axis=0) / N)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        M, N = x.shape
        row_max = torch.empty((M,), device=x.device, dtype=x.dtype)
        row_mean = torch.empty((M,), device=x.device, dtype=x.dtype)
        row_max_mean_kernel[(M,)](x, row_max, row_mean, N, x.stride(0))
        return row_max, row_mean
