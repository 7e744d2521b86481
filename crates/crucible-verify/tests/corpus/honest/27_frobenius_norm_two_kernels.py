import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_squares_kernel(x_ptr, partial_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(partial_ptr + pid, tl.sum(x * x, axis=0))


@triton.jit
def normalize_kernel(x_ptr, partial_ptr, y_ptr, n, n_partials, BLOCK: tl.constexpr, P_BLOCK: tl.constexpr):
    p = tl.arange(0, P_BLOCK)
    total = tl.sum(tl.load(partial_ptr + p, mask=p < n_partials, other=0.0), axis=0)
    inv = 1.0 / tl.sqrt(total)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * inv, mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        flat = x.contiguous().view(-1)
        n = flat.numel()
        BLOCK = 8192
        n_partials = triton.cdiv(n, BLOCK)
        partials = torch.empty(n_partials, device=x.device, dtype=torch.float32)
        sum_squares_kernel[(n_partials,)](flat, partials, n, BLOCK=BLOCK)
        y = torch.empty_like(flat)
        normalize_kernel[(n_partials,)](flat, partials, y, n, n_partials,
                                        BLOCK=BLOCK, P_BLOCK=triton.next_power_of_2(n_partials))
        return y.view_as(x)


def get_inputs():
    return [torch.randn(16, 64, 256, 256)]


def get_init_inputs():
    return []
