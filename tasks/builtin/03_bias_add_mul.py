import torch
import torch.nn as nn


class Model(nn.Module):
    """(x + bias) * y, with a per-column bias broadcast over rows."""

    def __init__(self):
        super().__init__()

    def forward(self, x, y, bias):
        return (x + bias) * y


batch_size = 4096
dim = 8192

PROFILES = {"small": {"batch_size": 8, "dim": 64}}
GENERALIZE = True


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim), torch.randn(dim)]


def get_init_inputs():
    return []
