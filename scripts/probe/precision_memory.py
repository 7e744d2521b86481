"""The precision measurement's peak memory, in units of one output's bytes (the referee's
`precision` stage; on a GPU beside other evaluations its peak is what runs out: a KernelBench
softmax's referee held 108 GiB of an H200 for a 6.4 GB output).

Usage: PYTHONPATH=python precision_memory.py [--rows R] [--cols C] [--device cpu|cuda]
[--trial held|drawn]. A softmax over R x C fp32 (the KernelBench task's shape, shrunk); the
candidate's output is the reference's rounded to bf16. On the CPU the peak is the process's
peak resident set above what it held before (reset through /proc/self/clear_refs), on a GPU
torch's peak allocated and reserved bytes. `held`: the trial's inputs and expected outputs are
held through the measurement, as a small trial's are, and count in the baseline with the
candidate's; `drawn`: they are drawn again from a seed whenever needed (`precision.DrawnAgain`,
a large trial's), and only the candidate's outputs are in the baseline. The figure to compare
is `total_x`, the baseline's outputs plus the peak above it.
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
    parser.add_argument("--trial", choices=("held", "drawn"), default="held")
    args = parser.parse_args()
    model = torch.nn.Softmax(dim=1).to(args.device)

    def draw():
        torch.manual_seed(3)
        return [torch.rand(args.rows, args.cols, device=args.device)]

    with torch.no_grad():
        expected = model(*draw())
    got = expected.to(torch.bfloat16).to(torch.float32)
    out_bytes = expected.numel() * expected.element_size()
    if args.trial == "held":
        trial = precision.Held(draw(), [expected])
        held_outputs = 3  # inputs, expected, the candidate's
    else:
        trial = precision.DrawnAgain(torch, model, draw)
        held_outputs = 1
    del expected
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # resets the peak resident set to the current one
        base = rss_bytes("VmRSS")
    outputs, _errors = precision.measure_trial(torch, model, trial, [got], budget_s=1e9)
    report = {
        "trial": args.trial,
        "output_bytes": out_bytes,
        "emulations": len(outputs[0]["emulations"]),
    }
    if cuda:
        torch.cuda.synchronize()
        report["peak_allocated_x"] = (
            torch.cuda.max_memory_allocated() - base
        ) / out_bytes
        report["peak_reserved_x"] = (
            torch.cuda.max_memory_reserved() - base
        ) / out_bytes
        report["reserved_after_x"] = (torch.cuda.memory_reserved() - base) / out_bytes
        report["total_x"] = held_outputs + report["peak_allocated_x"]
    else:
        report["peak_rss_x"] = (rss_bytes("VmHWM") - base) / out_bytes
        report["total_x"] = held_outputs + report["peak_rss_x"]
    print(json.dumps(report))


if __name__ == "__main__":
    main()
