"""The precision measurement's peak memory, in units of one output's bytes (the referee's
`precision` stage; on a GPU beside other evaluations its peak is what runs out: a KernelBench
softmax's referee held 108 GiB of an H200 for a 6.4 GB output).

Usage: PYTHONPATH=python precision_memory.py [--rows R] [--cols C] [--device cpu|cuda].
A softmax over R x C fp32 (the KernelBench task's shape, shrunk); the candidate's output is the
reference's rounded to bf16. On the CPU the peak is the process's peak resident set above what
it held before (reset through /proc/self/clear_refs), on a GPU torch's peak allocated and
reserved bytes. The trial's kept tensors (inputs, expected, candidate's) count in the baseline.
"""

import argparse
import json

import torch

from crucible_harness import precision


def rss_bytes(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--cols", type=int, default=1 << 20)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    model = torch.nn.Softmax(dim=1).to(args.device)
    x = torch.rand(args.rows, args.cols, device=args.device)
    with torch.no_grad():
        expected = model(x)
    got = expected.to(torch.bfloat16).to(torch.float32)
    out_bytes = expected.numel() * expected.element_size()
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # resets the peak resident set to the current one
        base = rss_bytes("VmRSS")
    outputs, _errors = precision.measure(
        torch, model, [x], [expected], [got], budget_s=1e9
    )
    report = {"output_bytes": out_bytes, "emulations": len(outputs[0]["emulations"])}
    if cuda:
        torch.cuda.synchronize()
        report["peak_allocated_x"] = (
            torch.cuda.max_memory_allocated() - base
        ) / out_bytes
        report["peak_reserved_x"] = (
            torch.cuda.max_memory_reserved() - base
        ) / out_bytes
        report["reserved_after_x"] = (torch.cuda.memory_reserved() - base) / out_bytes
    else:
        report["peak_rss_x"] = (rss_bytes("VmHWM") - base) / out_bytes
    print(json.dumps(report))


if __name__ == "__main__":
    main()
