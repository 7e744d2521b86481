import torch
import torch.nn as nn


class Model(nn.Module):
    """(A @ B) * scale + R."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, A, B, R):
        return torch.matmul(A, B) * self.scale + R


M = 4096
N = 4096
K = 2048
scale = 0.125

PROFILES = {"small": {"M": 32, "N": 64, "K": 32}}
GENERALIZE = True


def get_inputs():
    return [torch.rand(M, K), torch.rand(K, N), torch.randn(M, N)]


def get_init_inputs():
    return [scale]
