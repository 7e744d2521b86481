import torch
import torch.nn as nn
import triton
import triton.language as tl


class ModelNew(nn.Module):
    """The kernel lives on the class and is launched through `self`."""

    def __init__(self):
        super().__init__()

    @triton.jit
    def _tanh_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m).to(tl.float32)
        e = tl.exp(-2.0 * tl.abs(x))
        t = (1.0 - e) / (1.0 + e)
        tl.store(y_ptr + offs, tl.where(x >= 0, t, -t), mask=m)

    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        self._tanh_kernel[(triton.cdiv(n, 2048),)](x, y, n, BLOCK=2048)
        return y


def get_inputs():
    return [torch.randn(16, 16384)]


def get_init_inputs():
    return []
