import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,
    M, N, K,
    stride_xm, stride_wn, stride_ym,
    APPLY_RELU: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + offs_k
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + ks[None, :],
                    mask=(offs_m[:, None] < M) & (ks[None, :] < K), other=0.0)
        w = tl.load(w_ptr + offs_n[None, :] * stride_wn + ks[:, None],
                    mask=(offs_n[None, :] < N) & (ks[:, None] < K), other=0.0)
        acc = tl.dot(x, w, acc)
    acc += tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0)[None, :]
    if APPLY_RELU:
        acc = tl.maximum(acc, 0.0)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


class TritonLinear(nn.Module):
    """y = x @ W.T + b (optionally ReLU), in one Triton kernel."""

    def __init__(self, in_features, out_features, relu=False):
        super().__init__()
        lin = nn.Linear(in_features, out_features)
        self.weight = nn.Parameter(lin.weight.detach().clone())
        self.bias = nn.Parameter(lin.bias.detach().clone())
        self.relu = relu

    def forward(self, x):
        x = x.contiguous()
        M, K = x.shape
        N = self.weight.shape[0]
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
        grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
        linear_kernel[grid](
            x, self.weight, self.bias, y, M, N, K,
            x.stride(0), self.weight.stride(0), y.stride(0),
            APPLY_RELU=self.relu, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32,
        )
        return y


class ModelNew(nn.Module):
    """KernelBench level 3 MLP: the layer list is built in a loop and unpacked into
    nn.Sequential, as the reference does."""

    def __init__(self, input_size, layer_sizes, output_size):
        super().__init__()
        layers = []
        current = input_size
        for size in layer_sizes:
            layers.append(TritonLinear(current, size, relu=True))
            current = size
        layers.append(TritonLinear(current, output_size))
        self.network = nn.Sequential(*layers)

    def forward(self, x):
        return self.network(x)


def get_inputs():
    return [torch.randn(1, 1000)]


def get_init_inputs():
    return [1000, [400, 800], 500]
