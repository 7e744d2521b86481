import functools

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scaled_tanh_kernel(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    tl.store(y_ptr + offs, alpha * tl.where(x >= 0, t, -t), mask=m)


def launch_scaled_tanh(x, alpha, block=1024):
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    scaled_tanh_kernel[(triton.cdiv(n, block),)](x, y, n, alpha, BLOCK=block)
    return y


class Launcher:
    """A plain callable object (not an nn.Module) that launches the kernel."""

    def __init__(self, alpha):
        self.alpha = alpha

    def __call__(self, x):
        return launch_scaled_tanh(x, self.alpha, block=2048)


class ModelNew(nn.Module):
    """Kernel wrappers stored on self: a functools.partial, a callable object, a plain
    function chosen at construction."""

    def __init__(self, alpha=1.7159, mode="partial"):
        super().__init__()
        self.op = functools.partial(launch_scaled_tanh, alpha=alpha)
        self.op_object = Launcher(alpha)
        self.op_function = launch_scaled_tanh
        self.mode = mode

    def forward(self, x):
        if self.mode == "partial":
            return self.op(x)
        if self.mode == "object":
            return self.op_object(x)
        return self.op_function(x, 1.7159)


def get_inputs():
    return [torch.randn(16, 16384)]


def get_init_inputs():
    return [1.7159, "partial"]
