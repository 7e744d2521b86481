import torch
import torch.nn as nn
import triton
import triton.language as tl

# C[M, N] = A[M, K] @ B[K, N] with small M, N and a huge K (256 x 256 x 524288).
# Only a handful of output tiles exist, so K is split across programs (split-K):
# program (tile, s) computes the partial product over K-range s with TF32 tl.dot
# and writes it to a fp32 workspace [SPLIT, M, N]; a second kernel sums the
# partials in a fixed order (deterministic, no atomics). The tile index is the
# fastest grid axis so the programs sharing an A/B K-slab run together (L2 reuse).

_K_PER_SPLIT = 4096  # multiple of every BLOCK_K below; ~128 splits for K = 524288


def _configs():
    # (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps); 256 x 128 (all of M per tile, so
    # each B slab is read once) measured best on H200 for 256 x 256 x 524288.
    cfgs = [
        (256, 128, 32, 3, 8),
        (256, 128, 32, 4, 8),
        (128, 256, 32, 3, 8),
        (256, 64, 32, 4, 8),
        (128, 128, 64, 3, 8),
        (128, 64, 32, 4, 4),
    ]
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
                      num_stages=s, num_warps=w)
        for bm, bn, bk, s, w in cfgs
    ]


@triton.autotune(configs=_configs(), key=["M", "N", "K", "K_PER_SPLIT"])
@triton.heuristics({"EVEN_K": lambda a: (a["K"] % a["BLOCK_K"] == 0) and (a["K_PER_SPLIT"] % a["BLOCK_K"] == 0)})
@triton.jit
def _matmul_splitk_kernel(a_ptr, b_ptr, p_ptr, M, N, K, K_PER_SPLIT,
                          stride_am, stride_ak, stride_bk, stride_bn,
                          stride_ps, stride_pm, stride_pn,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
    pid = tl.program_id(0)
    pid_s = tl.program_id(1)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    k_start = pid_s * K_PER_SPLIT
    k_end = tl.minimum(K, k_start + K_PER_SPLIT)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_am = tl.max_contiguous(tl.multiple_of(offs_m % M, BLOCK_M), BLOCK_M)
    offs_bn = tl.max_contiguous(tl.multiple_of(offs_n % N, BLOCK_N), BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_am[:, None].to(tl.int64) * stride_am + (k_start + offs_k[None, :]).to(tl.int64) * stride_ak)
    b_ptrs = b_ptr + ((k_start + offs_k[:, None]).to(tl.int64) * stride_bk + offs_bn[None, :].to(tl.int64) * stride_bn)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_start, k_end, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_rem = k_end - k
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_rem, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_rem, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    p_ptrs = (p_ptr + pid_s.to(tl.int64) * stride_ps
              + offs_m[:, None].to(tl.int64) * stride_pm + offs_n[None, :].to(tl.int64) * stride_pn)
    p_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(p_ptrs, acc.to(p_ptr.dtype.element_ty), mask=p_mask)


@triton.jit
def _splitk_reduce_kernel(p_ptr, c_ptr, M, N, SPLIT, stride_cm, stride_cn,
                          BLOCK_S: tl.constexpr, BLOCK: tl.constexpr):
    # p is our contiguous [SPLIT, M, N] workspace: sum over SPLIT, BLOCK_S rows at a time.
    pid = tl.program_id(0)
    MN = M * N
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    offs_s = tl.arange(0, BLOCK_S)
    acc = tl.zeros((BLOCK_S, BLOCK), dtype=tl.float32)
    for s0 in range(0, SPLIT, BLOCK_S):
        ptrs = p_ptr + (s0 + offs_s[:, None]).to(tl.int64) * MN + offs[None, :]
        m2 = ((s0 + offs_s[:, None]) < SPLIT) & mask[None, :]
        acc += tl.load(ptrs, mask=m2, other=0.0)
    out = tl.sum(acc, axis=0)
    om = offs // N
    on = offs % N
    tl.store(c_ptr + om.to(tl.int64) * stride_cm + on.to(tl.int64) * stride_cn,
             out.to(c_ptr.dtype.element_ty), mask=mask)


def _matmul_splitk(a, b):
    M, K = a.shape
    K2, N = b.shape
    assert K == K2
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    split = triton.cdiv(K, _K_PER_SPLIT)
    if split == 1:
        grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"]), 1)
        _matmul_splitk_kernel[grid](a, b, c, M, N, K, _K_PER_SPLIT,
                                    a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                    0, c.stride(0), c.stride(1))
        return c
    part = torch.empty((split, M, N), device=a.device, dtype=torch.float32)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"]), split)
    _matmul_splitk_kernel[grid](a, b, part, M, N, K, _K_PER_SPLIT,
                                a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                part.stride(0), part.stride(1), part.stride(2))
    RBLOCK, RBS = 256, 16
    _splitk_reduce_kernel[(triton.cdiv(M * N, RBLOCK),)](
        part, c, M, N, split, c.stride(0), c.stride(1),
        BLOCK_S=RBS, BLOCK=RBLOCK, num_warps=4)
    return c


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return _matmul_splitk(A, B)
