import torch
import torch.nn as nn
import triton
import triton.language as tl

# C = A * s: a pure streaming kernel (read 4 B + write 4 B per element).
# Flat 1-D view of the contiguous tensor, 16 B vector accesses, block size autotuned
# (1024 / 4 warps measured best on H200), int64 offsets for > 2^31 element tensors.


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 1024}, num_warps=4),
        triton.Config({"BLOCK": 2048}, num_warps=8),
        triton.Config({"BLOCK": 4096}, num_warps=8),
        triton.Config({"BLOCK": 16384}, num_warps=16),
    ],
    key=["n_elements"],
)
@triton.jit
def _scale_kernel(x_ptr, y_ptr, s, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * s, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, A: torch.Tensor, s: float) -> torch.Tensor:
        x = A.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        grid = lambda META: (triton.cdiv(n, META["BLOCK"]),)
        _scale_kernel[grid](x, out, s, n)
        return out
