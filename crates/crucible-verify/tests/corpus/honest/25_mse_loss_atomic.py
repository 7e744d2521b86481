import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sq_diff_sum_kernel(a_ptr, b_ptr, acc_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    a = tl.load(a_ptr + offs, mask=m, other=0.0)
    b = tl.load(b_ptr + offs, mask=m, other=0.0)
    d = a - b
    tl.atomic_add(acc_ptr, tl.sum(d * d, axis=0))


@triton.jit
def divide_kernel(acc_ptr, out_ptr, inv_n):
    tl.store(out_ptr, tl.load(acc_ptr) * inv_n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        p = predictions.contiguous().view(-1)
        t = targets.contiguous().view(-1)
        n = p.numel()
        acc = torch.zeros(1, device=p.device, dtype=torch.float32)
        sq_diff_sum_kernel[(triton.cdiv(n, 4096),)](p, t, acc, n, BLOCK=4096)
        out = torch.empty((), device=p.device, dtype=predictions.dtype)
        divide_kernel[(1,)](acc, out, 1.0 / n)
        return out


def get_inputs():
    return [torch.randn(128, 4096), torch.randn(128, 4096)]


def get_init_inputs():
    return []
