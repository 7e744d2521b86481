# expect: torch-compute-in-forward
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def _normalize(t):
    return t / t.norm(dim=-1, keepdim=True)


def _prepare(x):
    return _normalize(x.contiguous())


class ModelNew(nn.Module):
    def _add(self, a, b):
        out = torch.empty_like(a)
        add_kernel[(triton.cdiv(a.numel(), 1024),)](a, b, out, a.numel(), BLOCK=1024)
        return out

    def forward(self, x, y):
        return self._add(_prepare(x), y)
