import torch
import torch.nn as nn


class Model(nn.Module):
    """softmax(x / temperature) over the last dimension, then a learned per-column scale."""

    def __init__(self, dim, temperature):
        super().__init__()
        self.temperature = temperature
        self.col_scale = nn.Parameter(torch.rand(dim) * 4)

    def forward(self, x):
        return torch.softmax(x / self.temperature, dim=-1) * self.col_scale


batch_size = 8192
dim = 2048
temperature = 0.5

PROFILES = {"small": {"batch_size": 8, "dim": 64}}
GENERALIZE = True


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, temperature]
