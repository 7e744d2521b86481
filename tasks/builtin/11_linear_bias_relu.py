import torch
import torch.nn as nn


class Model(nn.Module):
    """relu(x @ W^T + b) with an nn.Linear layer."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


batch_size = 4096
in_features = 4096
out_features = 4096

PROFILES = {"small": {"batch_size": 16, "in_features": 32, "out_features": 48}}
GENERALIZE = True


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
