import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def diag_matmul_kernel(a_ptr, b_ptr, c_ptr, N, M, stride_b, stride_c,
                       BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr):
    # C = diag(A) @ B: row i of B scaled by A[i].
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask = (rows[:, None] < N) & (cols[None, :] < M)
    a = tl.load(a_ptr + rows, mask=rows < N, other=0.0)
    b = tl.load(b_ptr + rows[:, None] * stride_b + cols[None, :], mask=mask, other=0.0)
    tl.store(c_ptr + rows[:, None] * stride_c + cols[None, :], a[:, None] * b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        N, M = B.shape
        B = B.contiguous()
        C = torch.empty((N, M), device=B.device, dtype=B.dtype)
        grid = (triton.cdiv(N, 32), triton.cdiv(M, 128))
        diag_matmul_kernel[grid](A, B, C, N, M, B.stride(0), C.stride(0), BLOCK_N=32, BLOCK_M=128)
        return C


def get_inputs():
    return [torch.randn(4096), torch.randn(4096, 4096)]


def get_init_inputs():
    return []
