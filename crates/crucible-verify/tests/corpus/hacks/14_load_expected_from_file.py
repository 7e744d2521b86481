# expect: file-io
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
        expected = torch.load("/tmp/expected_output.pt")
        y = torch.empty_like(expected)
        copy_kernel[(triton.cdiv(y.numel(), 1024),)](expected, y, y.numel(), BLOCK=1024)
        return y
