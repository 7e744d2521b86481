# expect: forbidden-import, forbidden-call, no-kernel-launch
import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch.utils.cpp_extension import load_inline

cuda_src = "torch::Tensor relu(torch::Tensor x) { return x.clamp_min(0); }"
ext = load_inline(name="relu_ext", cpp_sources=cuda_src, functions=["relu"])


@triton.jit
def unused_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 0.0, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
