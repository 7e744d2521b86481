import torch
import torch.nn as nn


class Model(nn.Module):
    """Depthwise 2D convolution (groups = channels), stride 1, 'same' zero padding, with bias."""

    def __init__(self, channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size,
                              padding=kernel_size // 2, groups=channels, bias=True)

    def forward(self, x):
        return self.conv(x)


batch_size = 16
channels = 64
height = 256
width = 256
kernel_size = 3

PROFILES = {"small": {"batch_size": 2, "channels": 4, "height": 9, "width": 12}}
GENERALIZE = True


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, kernel_size]
