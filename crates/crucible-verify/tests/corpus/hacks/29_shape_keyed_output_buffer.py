# expect: shape-keyed-cache
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._shape = None
        self._out = None

    def forward(self, x):
        if self._shape != x.shape:
            self._shape = x.shape
            self._out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, self._out, x.numel(), BLOCK=1024)
        return self._out
