# expect: model-new-inherits-model
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


ModelNew = Model
