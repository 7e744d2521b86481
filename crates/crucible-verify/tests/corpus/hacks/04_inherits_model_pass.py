# expect: model-new-inherits-model, no-triton-kernel
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


class ModelNew(Model):
    pass
