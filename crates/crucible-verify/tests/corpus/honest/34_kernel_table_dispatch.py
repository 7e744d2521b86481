import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def exp_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.exp(tl.load(x_ptr + offs, mask=m)), mask=m)


@triton.jit
def log_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.log(tl.load(x_ptr + offs, mask=m)), mask=m)


def launch_unary(kernel, x):
    y = torch.empty_like(x)
    n = x.numel()
    kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
    return y


class ModelNew(nn.Module):
    """exp(x) or log(x), chosen at construction; the kernel is passed to a launcher."""

    def __init__(self, op: str = "exp"):
        super().__init__()
        self.kernel = exp_kernel if op == "exp" else log_kernel

    def forward(self, x):
        return launch_unary(self.kernel, x.contiguous())


def get_inputs():
    return [torch.rand(16, 16384) + 0.5]


def get_init_inputs():
    return ["exp"]
