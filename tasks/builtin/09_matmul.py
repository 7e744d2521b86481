import torch
import torch.nn as nn


class Model(nn.Module):
    """fp32 matrix multiplication C = A @ B, A: (M, K), B: (K, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


M = 4096
N = 4096
K = 4096

PROFILES = {"small": {"M": 32, "N": 32, "K": 32}}
GENERALIZE = True


def get_inputs():
    return [torch.rand(M, K), torch.rand(K, N)]


def get_init_inputs():
    return []
