import torch
import torch.nn as nn


class Model(nn.Module):
    """fp16 matrix multiplication C = A @ B, A: (M, K), B: (K, N), fp16 output."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


M = 4096
N = 4096
K = 4096

PROFILES = {"small": {"M": 64, "N": 32, "K": 48}}
GENERALIZE = True


def get_inputs():
    return [torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)]


def get_init_inputs():
    return []
