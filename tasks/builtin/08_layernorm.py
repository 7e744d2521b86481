import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm over the last dimension (nn.LayerNorm with affine weight and bias)."""

    def __init__(self, dim):
        super().__init__()
        self.ln = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x):
        return self.ln(x)


batch_size = 8192
dim = 4096

PROFILES = {"small": {"batch_size": 8, "dim": 48}}
GENERALIZE = True


def get_inputs():
    return [torch.randn(batch_size, dim) * 2 + 1]


def get_init_inputs():
    return [dim]
