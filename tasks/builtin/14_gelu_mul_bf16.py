import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Gated GELU in bfloat16: gelu(x) * y (exact erf GELU)."""

    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return F.gelu(x) * y


batch_size = 4096
dim = 8192

PROFILES = {"small": {"batch_size": 8, "dim": 64}}
GENERALIZE = True


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=torch.bfloat16),
            torch.randn(batch_size, dim, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
