# expect: forbidden-call
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def noop_copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, a, b):
        fn = eval("torch." + "mat" + "mul")
        out = fn(a, b)
        y = torch.empty_like(out)
        noop_copy[(triton.cdiv(out.numel(), 1024),)](out, y, out.numel(), BLOCK=1024)
        return y
