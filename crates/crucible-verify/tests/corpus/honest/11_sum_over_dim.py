import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_dim_kernel(x_ptr, out_ptr, R, inner, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    # x viewed as (outer, R, inner); reduce over R.
    pid_o = tl.program_id(0)
    pid_i = tl.program_id(1)
    offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    acc = tl.zeros((BLOCK_I,), dtype=tl.float32)
    base = x_ptr + pid_o * R * inner
    for r0 in range(0, R, BLOCK_R):
        offs_r = r0 + tl.arange(0, BLOCK_R)
        tile = tl.load(base + offs_r[:, None] * inner + offs_i[None, :],
                       mask=(offs_r[:, None] < R) & (offs_i[None, :] < inner), other=0.0)
        acc += tl.sum(tile, axis=0)
    tl.store(out_ptr + pid_o * inner + offs_i, acc, mask=offs_i < inner)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        shape = list(x.shape)
        d = self.dim % x.dim()
        R = shape[d]
        outer = 1
        for s in shape[:d]:
            outer *= s
        inner = x.numel() // (outer * R)
        out = torch.empty(outer * inner, device=x.device, dtype=x.dtype)
        grid = (outer, triton.cdiv(inner, 128))
        sum_dim_kernel[grid](x, out, R, inner, BLOCK_R=32, BLOCK_I=128)
        shape[d] = 1
        return out.view(shape)


def get_inputs():
    return [torch.randn(16, 256, 256)]


def get_init_inputs():
    return [1]
