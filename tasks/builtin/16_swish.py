import torch
import torch.nn as nn


class Model(nn.Module):
    """Swish / SiLU with a fixed beta: x * sigmoid(beta * x)."""

    def __init__(self, beta):
        super().__init__()
        self.beta = beta

    def forward(self, x):
        return x * torch.sigmoid(self.beta * x)


batch_size = 4096
dim = 16384
beta = 1.5

PROFILES = {"small": {"batch_size": 8, "dim": 100}}
GENERALIZE = True


def get_inputs():
    return [torch.randn(batch_size, dim) * 3]


def get_init_inputs():
    return [beta]
