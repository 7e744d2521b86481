from collections import OrderedDict

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def affine_relu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n, n_cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    col = offs % n_cols
    v = tl.load(x_ptr + offs, mask=m) * tl.load(w_ptr + col, mask=m) + tl.load(b_ptr + col, mask=m)
    tl.store(y_ptr + offs, tl.maximum(v, 0.0), mask=m)


@triton.jit
def row_norm_kernel(x_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=m, other=0.0)
    rms = tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(y_ptr + row * n_cols + cols, x / rms, mask=m)


class AffineReLU(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.w = nn.Parameter(torch.ones(features))
        self.b = nn.Parameter(torch.zeros(features))

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        affine_relu_kernel[(triton.cdiv(n, 1024),)](x, self.w, self.b, y, n, x.shape[-1], BLOCK=1024)
        return y


class RowNorm(nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        row_norm_kernel[(rows,)](x, y, cols, self.eps, BLOCK=triton.next_power_of_2(cols))
        return y


def make_stage(features):
    return nn.Sequential(OrderedDict([("affine", AffineReLU(features)), ("norm", RowNorm())]))


class ModelNew(nn.Module):
    """Stages are nn.Sequential(OrderedDict(...)) inside an nn.ModuleList, built from a tuple."""

    def __init__(self, features, stages=2):
        super().__init__()
        self.stages = nn.ModuleList(
            [nn.Sequential(OrderedDict([("affine", AffineReLU(features)), ("norm", RowNorm())]))
             for _ in range(stages)]
        )
        self.head = (RowNorm(), AffineReLU(features))

    def forward(self, x):
        for stage in self.stages[:-1]:
            x = stage(x)
        x = self.stages[-1](x)
        for layer in self.head:
            x = layer(x)
        return x


def get_inputs():
    return [torch.randn(128, 1024)]


def get_init_inputs():
    return [1024, 2]
