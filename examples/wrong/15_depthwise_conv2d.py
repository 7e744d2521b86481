# WRONG: flips the filter (true convolution) while nn.Conv2d computes cross-correlation.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def depthwise_conv2d_kernel(x_ptr, w_ptr, b_ptr, y_ptr, C, H, W,
                            KS: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    # one program = one (batch, channel) plane x one BLOCK_H x BLOCK_W output tile
    plane = tl.program_id(0)
    c = plane % C
    oh = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    ow = tl.program_id(2) * BLOCK_W + tl.arange(0, BLOCK_W)
    base = x_ptr + plane.to(tl.int64) * H * W
    PAD: tl.constexpr = KS // 2
    acc = tl.zeros((BLOCK_H, BLOCK_W), dtype=tl.float32)
    for kh in tl.static_range(KS):
        ih = oh + (kh - PAD)
        h_ok = (ih >= 0) & (ih < H)
        for kw in tl.static_range(KS):
            iw = ow + (kw - PAD)
            w_ok = (iw >= 0) & (iw < W)
            wv = tl.load(w_ptr + c * KS * KS + (KS - 1 - kh) * KS + (KS - 1 - kw))
            v = tl.load(base + ih[:, None] * W + iw[None, :],
                        mask=h_ok[:, None] & w_ok[None, :], other=0.0)
            acc += v * wv
    acc += tl.load(b_ptr + c)
    out_mask = (oh[:, None] < H) & (ow[None, :] < W)
    tl.store(y_ptr + plane.to(tl.int64) * H * W + oh[:, None] * W + ow[None, :], acc, mask=out_mask)


class ModelNew(nn.Module):
    def __init__(self, channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size,
                              padding=kernel_size // 2, groups=channels, bias=True)

    def forward(self, x):
        x = x.contiguous()
        Nb, C, H, W = x.shape
        y = torch.empty_like(x)
        weight = self.conv.weight.contiguous()  # (C, 1, KS, KS)
        KS = weight.shape[-1]
        BLOCK_H, BLOCK_W = 16, 64
        grid = (Nb * C, triton.cdiv(H, BLOCK_H), triton.cdiv(W, BLOCK_W))
        depthwise_conv2d_kernel[grid](x, weight, self.conv.bias, y, C, H, W,
                                      KS=KS, BLOCK_H=BLOCK_H, BLOCK_W=BLOCK_W, num_warps=4)
        return y
