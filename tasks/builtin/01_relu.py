import torch
import torch.nn as nn


class Model(nn.Module):
    """Elementwise ReLU."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 4096
dim = 8192

PROFILES = {"small": {"batch_size": 8, "dim": 64}}
GENERALIZE = True


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
