# expect: no-kernel-launch
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(a_ptr + offs, mask=m) + tl.load(b_ptr + offs, mask=m), mask=m)


def triton_add(a, b):
    y = torch.empty_like(a)
    add_kernel[(triton.cdiv(a.numel(), 1024),)](a, b, y, a.numel(), BLOCK=1024)
    return y


class Block(nn.Module):
    """Reshapes only: the kernel launcher above is never called on the forward path."""

    def __init__(self, features):
        super().__init__()
        self.features = features

    def forward(self, x):
        return x.reshape(-1, self.features).contiguous()


class ModelNew(nn.Module):
    def __init__(self, features, depth=4):
        super().__init__()
        self.blocks = nn.ModuleList()
        for _ in range(depth):
            self.blocks.append(Block(features))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x
