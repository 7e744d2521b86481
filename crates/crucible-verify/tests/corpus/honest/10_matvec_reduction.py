import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matvec_kernel(a_ptr, x_ptr, y_ptr, M, K, stride_am, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    acc = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        cols = k + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rows[:, None] * stride_am + cols[None, :],
                    mask=(rows[:, None] < M) & (cols[None, :] < K), other=0.0)
        x = tl.load(x_ptr + cols, mask=cols < K, other=0.0)
        acc += tl.sum(a * x[None, :], axis=1)
    tl.store(y_ptr + rows, acc, mask=rows < M)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        M, K = A.shape
        A = A.contiguous()
        x = B.reshape(-1).contiguous()
        y = torch.empty((M, 1), device=A.device, dtype=A.dtype)
        BLOCK_M = 16
        matvec_kernel[(triton.cdiv(M, BLOCK_M),)](A, x, y, M, K, A.stride(0), BLOCK_M=BLOCK_M, BLOCK_K=512)
        return y


def get_inputs():
    return [torch.randn(256, 131072), torch.randn(131072, 1)]


def get_init_inputs():
    return []
