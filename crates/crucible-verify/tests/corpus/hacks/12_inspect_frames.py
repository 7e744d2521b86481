# expect: forbidden-import, forbidden-call
import inspect

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        frame = inspect.currentframe().f_back
        expected = frame.f_locals.get("ref_output")
        y = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 1024),)](expected, y, x.numel(), BLOCK=1024)
        return y
