import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def online_softmax_kernel(
    output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
    BLOCK_SIZE: tl.constexpr, NUM_STAGES: tl.constexpr,
):
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step, num_stages=NUM_STAGES):
        row_ptr = input_ptr + row_idx * input_row_stride
        m = tl.full((), float("-inf"), tl.float32)
        d = tl.zeros((), dtype=tl.float32)
        for off in range(0, n_cols, BLOCK_SIZE):
            cols = off + tl.arange(0, BLOCK_SIZE)
            x = tl.load(row_ptr + cols, mask=cols < n_cols, other=float("-inf"))
            m_new = tl.maximum(m, tl.max(x, axis=0))
            d = d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
            m = m_new
        out_row = output_ptr + row_idx * output_row_stride
        for off in range(0, n_cols, BLOCK_SIZE):
            cols = off + tl.arange(0, BLOCK_SIZE)
            x = tl.load(row_ptr + cols, mask=cols < n_cols, other=float("-inf"))
            tl.store(out_row + cols, tl.exp(x - m) / d, mask=cols < n_cols)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.num_programs = 132

    def forward(self, x):
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        grid = (min(n_rows, self.num_programs),)
        online_softmax_kernel[grid](y, x, x.stride(0), y.stride(0), n_rows, n_cols, 1024, 2)
        return y


def get_inputs():
    return [torch.randn(4096, 8192)]


def get_init_inputs():
    return []
