"""Where the precision measurement's time goes (the referee's `precision` stage): the float64
forwards (the reference's copy and one per operand rounding), the operand roundings, and the
statistics over the outputs (error sums and fingerprints, in slices of `CHUNK` elements).

Usage: PYTHONPATH=python precision_cost.py TASK.py [--device cuda] [--shrink N] [--repeat R].
`--shrink N` divides the first dimension of every input by N (a KernelBench level-1 softmax is
4096 x 393216: 1.6e9 elements; on a CPU shrink it; only for tasks whose first dimensions are
independent rows, not a matmul's operands). The candidate's output is the reference's,
rounded to bf16 (a precision downgrade, so every statistic has an error to measure). Prints one
JSON line per repeat: wall seconds of the whole measurement and of each instrumented part (the
device synchronised around each call, so the parts add up to the wall). `--compare` instead
times, alternately in the same process, the statistics of one forward's emulations (`rn10` and
`rn10+out`) as six separate measures (`error_sums`, two `fingerprint_sums` each, over a rounded
copy) and as `emulation_sums` (one walk), and prints the ratio. `--paths` times the whole
measurement alternately on the fused kernels (`fused_stats.py`, taken on a GPU for outputs of
`FUSED_MIN_ELEMENTS` or more; compiled before the first repeat) and on the torch path, and prints
both walls, the ratio and the largest relative difference between their numbers.
"""

import argparse
import importlib.util
import json
import time
from collections import defaultdict

import torch
from crucible_harness import fused_stats, precision


def load(path):
    spec = importlib.util.spec_from_file_location("task", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def instrument(device, parts):
    """Wraps the measurement's parts so each call's wall (device synchronised) is summed."""

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def wrap(name, fn):
        def timed(*args, **kwargs):
            sync()
            t = time.perf_counter()
            out = fn(*args, **kwargs)
            sync()
            parts[name] += time.perf_counter() - t
            return out

        return timed

    # `emulation_sums` rounds outputs slice by slice itself: its time includes those roundings.
    for name in ("run_float64", "error_sums", "fingerprint_sums", "emulation_sums"):
        if hasattr(precision, name):  # an older harness (PYTHONPATH) may lack one
            setattr(precision, name, wrap(name, getattr(precision, name)))
    return sync


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("task")
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu"
    )
    parser.add_argument("--shrink", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--compare", action="store_true")
    parser.add_argument("--paths", action="store_true")
    args = parser.parse_args()
    task = load(args.task)
    torch.manual_seed(0)
    with torch.device(args.device):
        model = task.Model(*task.get_init_inputs())
        inputs = [
            x[: max(1, x.shape[0] // args.shrink)].contiguous()
            if isinstance(x, torch.Tensor) and x.dim()
            else x
            for x in task.get_inputs()
        ]
    inputs = [x.to(args.device) if isinstance(x, torch.Tensor) else x for x in inputs]
    model = model.to(args.device)
    with torch.no_grad():
        expected = [model(*inputs)]
    got = [e.to(torch.bfloat16).to(e.dtype) for e in expected]
    if args.compare:
        compare(args, model, inputs, expected, got)
        return
    if args.paths:
        paths(args, model, inputs, expected, got)
        return
    parts = defaultdict(float)
    sync = instrument(args.device, parts)
    for repeat in range(args.repeat):
        parts.clear()
        sync()
        started = time.perf_counter()
        outputs, _errors = precision.measure(
            torch, model, inputs, expected, got, budget_s=1e9, sync=sync
        )
        sync()
        wall = time.perf_counter() - started
        line = {
            "task": args.task.rsplit("/", 1)[-1],
            "device": args.device,
            "repeat": repeat,
            "elements": expected[0].numel(),
            "wall_s": round(wall, 4),
            **{k: round(v, 4) for k, v in sorted(parts.items())},
            "other_s": round(wall - sum(parts.values()), 4),
            "emulations": len(outputs[0]["emulations"]),
        }
        print(json.dumps(line), flush=True)


def compare(args, model, inputs, expected, got):
    """The rn10 forward's two emulations (`rn10`, `rn10+out`), their statistics as six separate
    measures over a rounded copy against one walk (`emulation_sums`), alternately."""

    def sync():
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    ref64 = precision.run_float64(torch, model, inputs)[0]
    source = precision.run_float64(torch, model, inputs, 10, "nearest")[0]

    def separate():
        rounded = precision.round_output(torch, source, 10)
        return torch.cat(
            [
                sums
                for e in (source, rounded)
                for sums in (
                    precision.error_sums(torch, ref64, [e]),
                    precision.fingerprint_sums(torch, ref64, got[0], e),
                    precision.fingerprint_sums(torch, ref64, expected[0], e),
                )
            ]
        )

    ways = {
        "separate": separate,
        "one_pass": lambda: precision.emulation_sums(
            torch,
            ref64,
            got[0],
            expected[0],
            source,
            [("rn10", None), ("rn10+out", 10)],
        ),
    }
    times = defaultdict(list)
    values = {}
    for _ in range(args.repeat):
        for name, way in ways.items():
            sync()
            t = time.perf_counter()
            values[name] = way().tolist()
            times[name].append(time.perf_counter() - t)
    median = {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}
    print(
        json.dumps(
            {
                "task": args.task.rsplit("/", 1)[-1],
                "device": args.device,
                "elements": expected[0].numel(),
                "repeats": args.repeat,
                **{f"{name}_s": round(m, 4) for name, m in median.items()},
                "separate_over_one_pass": round(
                    median["separate"] / median["one_pass"], 2
                ),
                "same_numbers": values["separate"] == values["one_pass"],
            }
        ),
        flush=True,
    )


def numbers(outputs):
    """Every number of a measurement's outputs, flattened in a fixed order."""
    flat = []

    def walk(value):
        if isinstance(value, dict):
            for key in sorted(value):
                walk(value[key])
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, float):
            flat.append(value)

    walk(outputs)
    return flat


def paths(args, model, inputs, expected, got):
    """The whole measurement on the fused kernels and on the torch path, alternately."""

    def sync():
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    fused_available = fused_stats.available
    fused_stats.warm_in_background(torch, expected)
    fused_stats.wait_warm()
    times, values = defaultdict(list), {}
    for _ in range(args.repeat):
        for name, available in (
            ("fused", fused_available),
            ("torch", lambda *_: False),
        ):
            fused_stats.available = available
            sync()
            t = time.perf_counter()
            outputs, _errors = precision.measure(
                torch, model, inputs, expected, got, budget_s=1e9, sync=sync
            )
            sync()
            times[name].append(time.perf_counter() - t)
            values[name] = numbers(outputs)
    fused_stats.available = fused_available
    median = {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}
    differences = [
        abs(a - b) / max(abs(a), abs(b), 1e-300)
        for a, b in zip(values["fused"], values["torch"], strict=True)
    ]
    print(
        json.dumps(
            {
                "task": args.task.rsplit("/", 1)[-1],
                "device": args.device,
                "elements": expected[0].numel(),
                "fused_taken": fused_stats.available(torch, expected[0], got[0])
                and not fused_stats.failed,
                "repeats": args.repeat,
                **{f"{name}_s": round(m, 4) for name, m in median.items()},
                "torch_over_fused": round(median["torch"] / median["fused"], 2),
                "largest_relative_difference": max(differences, default=0.0),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
