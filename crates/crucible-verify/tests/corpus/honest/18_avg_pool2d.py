import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def avg_pool2d_kernel(x_ptr, y_ptr, H, W, OH, OW,
                      KS: tl.constexpr, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    plane = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    oh = offs // OW
    ow = offs % OW
    mask = offs < OH * OW
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for kh in tl.static_range(KS):
        for kw in tl.static_range(KS):
            ih = oh * STRIDE + kh
            iw = ow * STRIDE + kw
            acc += tl.load(x_ptr + plane * H * W + ih * W + iw, mask=mask, other=0.0)
    tl.store(y_ptr + plane * OH * OW + offs, acc / (KS * KS), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int = None, padding: int = 0):
        super().__init__()
        assert padding == 0
        self.kernel_size = kernel_size
        self.stride = stride or kernel_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        B, C, H, W = x.size()
        OH = (H - self.kernel_size) // self.stride + 1
        OW = (W - self.kernel_size) // self.stride + 1
        y = x.new_empty((B, C, OH, OW))
        BLOCK = 256
        grid = (B * C, triton.cdiv(OH * OW, BLOCK))
        avg_pool2d_kernel[grid](x, y, H, W, OH, OW, KS=self.kernel_size, STRIDE=self.stride, BLOCK=BLOCK)
        return y


def get_inputs():
    return [torch.randn(16, 64, 256, 256)]


def get_init_inputs():
    return [3]
