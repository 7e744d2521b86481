import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_mul_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    g = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    # fused in fp32, a single rounding to bf16 at the store
    tl.store(out_ptr + offs, (g * y).to(tl.bfloat16), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        x = x.contiguous()
        y = y.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        BLOCK = 4096
        gelu_mul_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK, num_warps=8)
        return out
