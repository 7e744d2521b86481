import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_residual_kernel(x_ptr, r_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    r = tl.load(r_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * scale + r, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, scaling_factor: float):
        super().__init__()
        self.scaling_factor = scaling_factor

    def _launch(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 1024),)
        scale_residual_kernel[grid](x, residual, out, n, self.scaling_factor, BLOCK=1024)
        return out

    def forward(self, x, residual):
        x = x.contiguous()
        residual = residual.contiguous()
        return self._launch(x, residual)


def get_inputs():
    return [torch.randn(128, 8192), torch.randn(128, 8192)]


def get_init_inputs():
    return [0.5]
