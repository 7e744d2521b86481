# expect: torch-compile, no-triton-kernel, torch-compute-in-forward
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.fn = torch.compile(lambda a, b: torch.relu(a @ b))

    @torch.compile(mode="max-autotune")
    def forward(self, a, b):
        return torch.relu(a @ b)
