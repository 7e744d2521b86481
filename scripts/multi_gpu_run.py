"""The multi-GPU run (issue: one worker per GPU, scaling and fault tolerance), driven over the
service's HTTP API the way a user would. Called by scripts/multi-gpu-run, which starts the
servers; this file submits, waits, kills, and reports.

    python3 multi_gpu_run.py submit URL SET_DIR SCALE TAG   -> batch id on stdout
    python3 multi_gpu_run.py wait URL BATCH [--kill-worker-of PID --kill-after N]
    python3 multi_gpu_run.py report RESULTS.json...

The candidate set is the one `crucible bench-throughput --write-set DIR` writes: DIR/manifest.jsonl
with task_name, task_file and candidate_file per line. Each of the SCALE copies gets a comment
line of its own, so no copy is answered from the result cache or shared with another in flight:
every submission is a real evaluation (the reference-timing cache still applies, per task)."""

import json
import os
import signal
import statistics
import sys
import time
import urllib.request
from pathlib import Path


def call(url, method="GET", body=None, timeout=330):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def submit(base, set_dir, scale, tag):
    tasks = []
    with open(os.path.join(set_dir, "manifest.jsonl")) as manifest:
        entries = [json.loads(line) for line in manifest if line.strip()]
    for copy in range(int(scale)):
        for n, entry in enumerate(entries):
            task = Path(set_dir, entry["task_file"]).read_text()
            candidate = Path(set_dir, entry["candidate_file"]).read_text()
            tasks.append(
                {
                    "task_name": entry["task_name"],
                    "task_source": task,
                    "candidate_source": f"{candidate}\n# {tag} copy {copy}\n",
                    "labels": {"candidate": entry["candidate_file"], "copy": copy, "kind": entry.get("kind", "")},
                }
            )
    answer = call(f"{base}/v1/batches", "POST", {"tasks": tasks, "client": tag})
    print(answer["batch_id"])


def worker_of(parent):
    """The pid of a `crucible worker` process whose parent is `parent` (a serve or a shell)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == int(parent) and b"worker" in cmdline:
            return int(entry)
    raise SystemExit(f"no worker process under pid {parent}")


def cpu_times():
    """(busy, total) jiffies of the whole machine, from /proc/stat's first line."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def wait(base, batch, kill_parent=None, kill_after=None, limit_s=None):
    """Polls the batch until every task is terminal, or `limit_s` seconds passed (the batch is
    then saved unfinished, marked `"cut": true`); optionally kill -9 one worker (a child of
    `kill_parent`) once `kill_after` tasks are done. Writes the batch as JSON to stdout, with
    the machine's CPU use over the wait (a second GPU only scales if the host has CPU left)."""
    started = time.time()
    cpu_start = cpu_times()
    killed = None
    cut = False
    while True:
        view = call(f"{base}/v1/batches/{batch}")
        done = sum(1 for t in view["tasks"] if t["state"] in ("done", "cancelled", "timeout"))
        if kill_parent and killed is None and done >= int(kill_after):
            pid = worker_of(kill_parent)
            running = [t for t in view["tasks"] if t["state"] == "running"]
            os.kill(pid, signal.SIGKILL)
            killed = {"pid": pid, "at_done": done, "running_then": len(running), "t": time.time() - started}
            print(f"killed worker pid {pid} with -9 after {done} done, {len(running)} running", file=sys.stderr)
        if view["finished"]:
            break
        if limit_s and time.time() - started > float(limit_s):
            cut = True
            print(f"cut after {limit_s} s with {done} of {len(view['tasks'])} done", file=sys.stderr)
            break
        time.sleep(1.0)
    view["wall_s"] = time.time() - started
    cpu_end = cpu_times()
    view["cpu_busy"] = (cpu_end[0] - cpu_start[0]) / max(1, cpu_end[1] - cpu_start[1])
    view["cpus"] = os.cpu_count()
    view["killed"] = killed
    view["cut"] = cut
    view["metrics"] = urllib.request.urlopen(f"{base}/metrics", timeout=30).read().decode()
    json.dump(view, sys.stdout)


def summarize(path):
    view = json.loads(Path(path).read_text())
    tasks = view["tasks"]
    verdicts = {}
    for t in tasks:
        verdict = (t.get("result") or {}).get("verdict", t["state"])
        verdicts[verdict] = verdicts.get(verdict, 0) + 1
    # A cut run counts what finished.
    evaluated = [t for t in tasks if not t["cached"] and not t["shared_with"] and t["finished_at"]]
    first = min(t["submitted_at"] for t in tasks)
    last = max(t["finished_at"] or 0 for t in tasks)
    span = last - first
    metrics = view.get("metrics", "")
    return {
        "name": os.path.basename(path).removesuffix(".json"),
        "tasks": len(tasks),
        "evaluated": len(evaluated),
        "results": sum(1 for t in tasks if t.get("result")),
        "attempts_over_1": sum(1 for t in tasks if t["attempts"] > 1),
        "infra_error": verdicts.get("infra_error", 0),
        "span_s": span,
        "per_hour": len(evaluated) / span * 3600 if span > 0 else float("nan"),
        "steady_per_hour": steady_rate([t["finished_at"] for t in evaluated]),
        "cpu_busy": view.get("cpu_busy"),
        "cpus": view.get("cpus"),
        # Verdicts the server counted: one per task when none was judged twice.
        "verdicts_counted": metric_total(metrics, "crucible_verdicts_total"),
        "verdict_by_candidate": verdicts_by_candidate(tasks),
        "verdicts": verdicts,
        "killed": view.get("killed"),
        "cut": view.get("cut", False),
        "speedups": {
            (t["labels"]["candidate"], t["labels"]["copy"]): t["result"]["speedup"]
            for t in tasks
            if t.get("result") and t["result"].get("speedup")
        },
        "witnesses": witnesses(tasks),
        "speedups_by_gpu": speedups_by_gpu(tasks),
    }


def steady_rate(finished):
    """Evaluations per hour between the 10th and the 90th percent of completions: the rate
    without the start-up (workers warming, references timed) and the tail (the last tasks
    running with idle slots beside them)."""
    finished = sorted(finished)
    i, j = len(finished) // 10, len(finished) * 9 // 10 - 1
    if j <= i or finished[j] <= finished[i]:
        return float("nan")
    return (j - i) / (finished[j] - finished[i]) * 3600


def verdicts_by_candidate(tasks):
    """{candidate: {verdict: count}} over every copy and GPU of a run."""
    by = {}
    for t in tasks:
        verdict = (t.get("result") or {}).get("verdict")
        if verdict:
            counts = by.setdefault(t["labels"]["candidate"], {})
            counts[verdict] = counts.get(verdict, 0) + 1
    return by


def verdict_agreement(runs):
    """Whether every candidate got one verdict in every copy, on every GPU and in every run."""
    merged = {}
    for s in runs:
        for candidate, counts in s["verdict_by_candidate"].items():
            merged.setdefault(candidate, set()).update(counts)
    split = sorted(c for c, verdicts in merged.items() if len(verdicts) > 1)
    judged = sum(sum(c.values()) for s in runs for c in s["verdict_by_candidate"].values())
    line = f"verdicts: {len(merged) - len(split)} of {len(merged)} candidates got the same verdict in all {judged} evaluations (every copy, GPU and run)"
    return line + (f"; split: {', '.join(split)}" if split else "")


# What each timed candidate's time was by each witness: the per-forward timed median (which
# spans the Python launch path), the GPU's busy time from the profiler, and the back-to-back
# batch timed from outside. Where the timed median differs and the other two agree, the
# difference is on the host, not on the GPU.
WITNESSES = {
    "timed median": lambda t: t["candidate"]["median_ms"],
    "GPU busy": lambda t: t.get("profiled_busy_ms"),
    "outside": lambda t: t.get("outside_forward_ms"),
}


def witnesses(tasks):
    """{(candidate, copy): {witness: ms}} for the candidates that were timed."""
    out = {}
    for t in tasks:
        timing = (t.get("result") or {}).get("timing")
        if timing and timing.get("candidate"):
            out[(t["labels"]["candidate"], t["labels"]["copy"])] = {
                name: read(timing) for name, read in WITNESSES.items()
            }
    return out


def witness_agreement(a, b):
    """The candidate's time in two runs, by witness: difference in percent, median and worst."""
    parts = []
    for name in WITNESSES:
        diffs = [
            abs(a[k][name] - b[k][name]) / b[k][name] * 100
            for k in a.keys() & b.keys()
            if a[k][name] and b[k][name]
        ]
        if diffs:
            parts.append(f"{name} {statistics.median(diffs):.1f}% (worst {max(diffs):.1f}%)")
    return "candidate time by witness: " + (", ".join(parts) if parts else "n/a")


def speedups_by_gpu(tasks):
    """{(candidate, device): [speedup of each copy judged there]}."""
    by = {}
    for t in tasks:
        result = t.get("result") or {}
        if result.get("speedup"):
            key = (t["labels"]["candidate"], result["env"]["device"])
            by.setdefault(key, []).append(result["speedup"])
    return by


def copy_spread(by_gpu):
    """The noise floor: how far the copies of one candidate judged on one GPU are apart, in
    percent of the smallest (median and worst over the candidates with two copies or more)."""
    spreads = [(max(xs) - min(xs)) / min(xs) * 100 for xs in by_gpu.values() if len(xs) > 1]
    if not spreads:
        return "n/a"
    return f"median {statistics.median(spreads):.1f}%, worst {max(spreads):.1f}% over {len(spreads)}"


def cross_gpu_within(by_gpu):
    """Per candidate judged on two GPUs in one run: the difference of its median speedups."""
    devices = sorted({d for _, d in by_gpu})
    if len(devices) < 2:
        return None
    a, b = devices[0], devices[-1]
    medians = {
        d: {c: statistics.median(xs) for (c, dev), xs in by_gpu.items() if dev == d} for d in (a, b)
    }
    return f"{a} vs {b}: " + agreement(medians[a], medians[b])


def metric_total(text, name):
    """The sum of a Prometheus counter over its labels; None when the server did not export it."""
    values = []
    for line in text.splitlines():
        if line.startswith((name + " ", name + "{")):
            try:
                values.append(float(line.split()[-1]))
            except ValueError:
                pass
    return sum(values) if values else None


def agreement(a, b):
    """Speedup difference in percent between two runs over the same (candidate, copy) keys."""
    diffs = [abs(a[k] - b[k]) / b[k] * 100 for k in a.keys() & b.keys() if b[k] > 0]
    if not diffs:
        return "n/a"
    return f"median {statistics.median(diffs):.1f}%, worst {max(diffs):.1f}% over {len(diffs)}"


def report(paths):
    runs = {s["name"]: s for s in map(summarize, paths)}
    print(f"{'run':<22} {'tasks':>5} {'evald':>5} {'results':>7} {'retried':>7} {'infra':>5} {'span s':>7} {'evals/h':>8} {'steady/h':>8} {'CPU':>5}  verdicts")
    for s in runs.values():
        cpu = f"{s['cpu_busy']:.0%}" if s["cpu_busy"] is not None else "n/a"
        print(
            f"{s['name']:<22} {s['tasks']:>5} {s['evaluated']:>5} {s['results']:>7} {s['attempts_over_1']:>7} "
            f"{s['infra_error']:>5} {s['span_s']:>7.1f} {s['per_hour']:>8.0f} {s['steady_per_hour']:>8.0f} {cpu:>5}  "
            f"{json.dumps(s['verdicts'], sort_keys=True)}"
        )
        if s["verdicts_counted"] is not None:
            print(f"  verdicts the server counted: {s['verdicts_counted']:.0f} for {s['tasks']} tasks (more would mean a task judged twice)")
        if s["cut"]:
            print(f"  cut at its time limit: {s['results']} of {s['tasks']} finished")
        if s["killed"]:
            print(f"  kill -9: {json.dumps(s['killed'])}; every task has one result: {s['results'] == s['tasks']}")
        print(f"  speedup spread between copies of one candidate on one GPU: {copy_spread(s['speedups_by_gpu'])}")
        within = cross_gpu_within(s["speedups_by_gpu"])
        if within:
            print(f"  cross-GPU speedup agreement inside this run (median speedup per candidate and GPU), {within}")
    one = [runs[n]["per_hour"] for n in ("embedded_cuda0", "embedded_cuda1") if n in runs]
    for two in ("embedded_2gpu", "redis_2gpu"):
        if one and two in runs:
            eff = runs[two]["per_hour"] / (2 * statistics.mean(one))
            print(f"scaling {two}: {runs[two]['per_hour']:.0f}/h vs 1 GPU {statistics.mean(one):.0f}/h: efficiency {eff:.0%}")
            steady_one = [runs[n]["steady_per_hour"] for n in ("embedded_cuda0", "embedded_cuda1") if n in runs]
            steady = runs[two]["steady_per_hour"] / (2 * statistics.mean(steady_one))
            print(f"  steady rates (10-90 % of completions): {runs[two]['steady_per_hour']:.0f}/h vs {statistics.mean(steady_one):.0f}/h: efficiency {steady:.0%}")
    print(verdict_agreement(runs.values()))
    if "embedded_cuda0" in runs and "embedded_cuda1" in runs:
        print("cross-GPU speedup agreement (cuda:0 vs cuda:1, same candidates):", agreement(runs["embedded_cuda0"]["speedups"], runs["embedded_cuda1"]["speedups"]))
        print("  " + witness_agreement(runs["embedded_cuda0"]["witnesses"], runs["embedded_cuda1"]["witnesses"]))
    if "shared_gpu_2workers" in runs and "embedded_cuda0" in runs:
        s = runs["shared_gpu_2workers"]
        print(
            f"two workers on one GPU: {s['per_hour']:.0f}/h vs one worker {runs['embedded_cuda0']['per_hour']:.0f}/h; "
            "speedup agreement with one worker:",
            agreement(s["speedups"], runs["embedded_cuda0"]["speedups"]),
        )
        print("  " + witness_agreement(s["witnesses"], runs["embedded_cuda0"]["witnesses"]))


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "submit":
        submit(*args)
    elif command == "wait":
        base, batch = args[:2]
        options = dict(zip(args[2::2], args[3::2]))
        wait(base, batch, options.get("--kill-worker-of"), options.get("--kill-after"), options.get("--limit-s"))
    elif command == "report":
        report(args)
    else:
        sys.exit(f"unknown command {command}")
