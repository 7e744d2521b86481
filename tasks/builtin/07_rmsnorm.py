import torch
import torch.nn as nn


class Model(nn.Module):
    """RMSNorm over the last dimension with a learned weight."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))
        self.eps = eps

    def forward(self, x):
        rms = torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)
        return x / rms * self.weight


batch_size = 8192
dim = 4096
eps = 1e-6

PROFILES = {"small": {"batch_size": 8, "dim": 64}}
GENERALIZE = True


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, eps]
