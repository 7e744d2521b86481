import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def conv2d_3x3_relu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, C_in, H, W, C_out, OH, OW,
                           BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    n = tl.program_id(0)
    co = tl.program_id(1)
    p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    oh = p // OW
    ow = p % OW
    pmask = p < OH * OW
    acc = tl.zeros((BLOCK_P,), dtype=tl.float32)
    for c0 in range(0, C_in, BLOCK_C):
        ci = c0 + tl.arange(0, BLOCK_C)
        cmask = ci < C_in
        for kh in tl.static_range(3):
            for kw in tl.static_range(3):
                xv = tl.load(x_ptr + ((n * C_in + ci[:, None]) * H + oh[None, :] + kh) * W + ow[None, :] + kw,
                             mask=cmask[:, None] & pmask[None, :], other=0.0)
                wv = tl.load(w_ptr + ((co * C_in + ci) * 3 + kh) * 3 + kw, mask=cmask, other=0.0)
                acc += tl.sum(xv * wv[:, None], axis=0)
    acc = acc + tl.load(b_ptr + co)
    acc = tl.maximum(acc, 0.0)
    tl.store(y_ptr + (n * C_out + co) * OH * OW + p, acc, mask=pmask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        assert kernel_size == 3
        # nn.Conv2d only holds weights with the reference's seeded init; it is never called.
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        x = x.contiguous()
        N, C_in, H, W = x.shape
        weight = self.conv.weight.detach().contiguous()
        bias = self.conv.bias.detach()
        C_out = weight.shape[0]
        OH, OW = H - 2, W - 2
        y = torch.empty((N, C_out, OH, OW), device=x.device, dtype=x.dtype)
        grid = (N, C_out, triton.cdiv(OH * OW, 128))
        conv2d_3x3_relu_kernel[grid](x, weight, bias, y, C_in, H, W, C_out, OH, OW, BLOCK_P=128, BLOCK_C=16)
        return y


def get_inputs():
    return [torch.randn(8, 16, 64, 64)]


def get_init_inputs():
    return [16, 32, 3]
