import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def conv1d_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,
    C_in, L_in, C_out, L_out,
    K: tl.constexpr, STRIDE: tl.constexpr, HAS_BIAS: tl.constexpr,
    BLOCK_L: tl.constexpr, BLOCK_C: tl.constexpr,
):
    n = tl.program_id(0)
    co = tl.program_id(1)
    lo = tl.program_id(2) * BLOCK_L + tl.arange(0, BLOCK_L)
    acc = tl.zeros((BLOCK_L,), dtype=tl.float32)
    for ci0 in range(0, C_in, BLOCK_C):
        ci = ci0 + tl.arange(0, BLOCK_C)
        cmask = ci < C_in
        for k in tl.static_range(K):
            li = lo * STRIDE + k
            xv = tl.load(x_ptr + n * C_in * L_in + ci[:, None] * L_in + li[None, :],
                         mask=cmask[:, None] & (li[None, :] < L_in), other=0.0)
            wv = tl.load(w_ptr + co * C_in * K + ci * K + k, mask=cmask, other=0.0)
            acc += tl.sum(xv * wv[:, None], axis=0)
    if HAS_BIAS:
        acc += tl.load(b_ptr + co)
    tl.store(y_ptr + n * C_out * L_out + co * L_out + lo, acc, mask=lo < L_out)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, bias=False):
        super().__init__()
        # Holds the weights with the reference's initialization; never called.
        self.conv1d = nn.Conv1d(in_channels, out_channels, kernel_size, stride=stride, bias=bias)
        self.stride = stride

    def forward(self, x):
        x = x.contiguous()
        N, C_in, L_in = x.shape
        w = self.conv1d.weight.contiguous()
        C_out, _, K = w.shape
        L_out = (L_in - K) // self.stride + 1
        y = torch.empty((N, C_out, L_out), device=x.device, dtype=x.dtype)
        has_bias = self.conv1d.bias is not None
        b = self.conv1d.bias if has_bias else w
        grid = (N, C_out, triton.cdiv(L_out, 128))
        conv1d_kernel[grid](x, w, b, y, C_in, L_in, C_out, L_out,
                            K=K, STRIDE=self.stride, HAS_BIAS=has_bias, BLOCK_L=128, BLOCK_C=16)
        return y


def get_inputs():
    return [torch.randn(16, 3, 512)]


def get_init_inputs():
    return [3, 64, 3]
