import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, y_ptr, C, inner, eps, BLOCK_C: tl.constexpr):
    # One program per (batch, spatial) position; normalize over the channel dim.
    pid = tl.program_id(0)
    b = pid // inner
    s = pid % inner
    c = tl.arange(0, BLOCK_C)
    mask = c < C
    base = b * C * inner + s
    x = tl.load(x_ptr + base + c * inner, mask=mask, other=0.0).to(tl.float32)
    ms = tl.sum(x * x, axis=0) / C
    r = 1.0 / tl.sqrt(ms + eps)
    tl.store(y_ptr + base + c * inner, x * r, mask=mask)


def rms_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.contiguous()
    B, C = x.shape[0], x.shape[1]
    inner = x.numel() // (B * C)
    y = torch.empty_like(x)
    _rms_norm_kernel[(B * inner,)](x, y, C, inner, eps, BLOCK_C=triton.next_power_of_2(C))
    return y


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.eps)


def get_inputs():
    return [torch.randn(16, 64, 256, 256)]


def get_init_inputs():
    return [64]
