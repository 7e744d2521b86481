import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def transpose_kernel(src, dst, M, N, s_m, s_n, d_m, d_n, BM: tl.constexpr, BN: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tile = tl.load(src + rm[:, None] * s_m + rn[None, :] * s_n, mask=mask)
    tl.store(dst + rn[None, :] * d_m + rm[:, None] * d_n, tile, mask=mask)


@triton.jit
def add_scalar_kernel(x_ptr, n, value, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) + value, mask=m)


class ModelNew(nn.Module):
    """out = x.T + 1, as a tiled transpose followed by an in-place scalar add."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        M, N = x.shape
        out = torch.empty((N, M), dtype=x.dtype, device=x.device)
        transpose_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](
            x, out, M, N, x.stride(0), x.stride(1), out.stride(0), out.stride(1), BM=32, BN=32
        )
        add_scalar_kernel[(triton.cdiv(out.numel(), 1024),)](out, out.numel(), 1.0, BLOCK=1024)
        return out


def get_inputs():
    return [torch.randn(4096, 2048)]


def get_init_inputs():
    return []
