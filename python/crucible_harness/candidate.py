"""The candidate process: loads one untrusted `ModelNew`, runs it, reports what it observed.

One process per evaluation, never reused. It never sees the expected outputs: it maps the
inputs and output slots the referee shared, runs forward, and copies the outputs into the slots.
Everything it reports is treated by the judge as a claim, not a fact.
"""

import collections
import contextlib
import functools
import hashlib
import os
import sys
import threading
import traceback

from crucible_harness import common, protocol

CANDIDATE_MODULE = "crucible_candidate"

# After a run, blocks the candidate's allocator keeps cached beyond this go back to the driver:
# the referee's checks and precision measurement need the device next, and device memory held
# outside the referee beyond the processes' contexts reads as the candidate hoarding it (the
# judge's `HELD_ELSEWHERE_ALLOWANCE`; an honest KernelBench 23_Softmax kept 6.9 GiB cached). A
# small task's blocks stay cached for its next trial, as the referee's do.
RELEASE_CACHED_BYTES = 1 << 30


class LaunchRecorder:
    """Counts Triton launches per kernel function, wrapping the launch path at class level, so a
    kernel that is defined but never launched shows up as missing."""

    def __init__(self):
        self.calls = collections.Counter()
        self.compiled_names = collections.defaultdict(set)
        self.modules = {}
        self.autotune = {}

    def install(self, triton):
        from triton.runtime import autotuner, jit

        recorder = self

        def wrap_run(original):
            def run(self, *args, **kwargs):
                result = original(self, *args, **kwargs)
                if not kwargs.get("warmup", False):
                    fn = getattr(self, "fn", None)
                    name = getattr(fn, "__name__", "?")
                    recorder.calls[name] += 1
                    recorder.modules[name] = getattr(fn, "__module__", "?")
                    compiled = getattr(result, "name", None)
                    if isinstance(compiled, str):
                        recorder.compiled_names[name].add(compiled)
                return result

            return run

        jit.JITFunction.run = wrap_run(jit.JITFunction.run)
        if os.environ.get("TRITON_INTERPRET") == "1":
            from triton.runtime import interpreter

            interpreter.InterpretedFunction.run = wrap_run(interpreter.InterpretedFunction.run)
            # The interpreter has no driver to benchmark configs with ("0 active drivers").
            # Every config then "takes" the same time and `min` keeps the first: configs[0],
            # deterministically. The choice is recorded below.
            autotuner.Autotuner._bench = lambda self, *args, config, **meta: [0.0, 0.0, 0.0]

        original_autotune_run = autotuner.Autotuner.run

        def autotune_run(self, *args, **kwargs):
            result = original_autotune_run(self, *args, **kwargs)
            recorder.autotune[self.base_fn.__name__] = str(self.best_config)
            return result

        autotuner.Autotuner.run = autotune_run

    def report(self):
        return [
            {
                "kernel": name,
                "module": self.modules.get(name, "?"),
                "calls": count,
                "compiled_names": sorted(self.compiled_names.get(name, ())),
                "autotune_config": self.autotune.get(name),
            }
            for name, count in sorted(self.calls.items())
        ]


class CompileNotes:
    """During a `run` request, tells the judge when Triton compiles (see protocol.rs, "Notes"):
    the judge lets its share of the GPU go while the compiler runs, so other evaluations' timed
    phases do not wait for it, and takes it back before it answers `compiled`, so no kernel of
    this process runs without it. Nested and concurrent compiles make one note pair.

    Compiling is `JITFunction._do_compile` and, at a compiled kernel's first launch,
    `CompiledKernel._init_handles` where its C launcher is not built yet: Triton builds it there
    with gcc (0.2 to 0.9 s a candidate on an H200, `scripts/probe/compile_cost.py`) and loads
    the module; no kernel runs in either. A launcher already built (by the seed, or for an
    earlier kernel with the same argument types) is only loaded, under the share."""

    def __init__(self, chan):
        self.chan = chan
        self.active = False
        self.depth = 0
        self.lock = threading.Lock()

    def install(self, jit):
        notes = self
        original = jit.JITFunction._do_compile

        def _do_compile(self, *args, **kwargs):
            notes.enter()
            try:
                return original(self, *args, **kwargs)
            finally:
                notes.leave()

        jit.JITFunction._do_compile = _do_compile
        try:
            from triton.compiler import compiler
        except ImportError:  # a Triton without it launches through other paths; nothing to note
            return
        original_init = compiler.CompiledKernel._init_handles

        def _init_handles(self):
            # Already loaded (a launch), or the launcher is already built (the seed's, or one an
            # earlier kernel of this process built, as every config of an autotuned kernel
            # shares one): only a load follows, no build. A note would cost a round trip and the
            # share taken again, behind any timed phase waiting for the GPU.
            if self.module is not None or launcher_built(self):
                return original_init(self)
            notes.enter(launcher=launcher_types(self))
            try:
                return original_init(self)
            finally:
                notes.leave()

        compiler.CompiledKernel._init_handles = _init_handles
        if os.environ.get("TRITON_INTERPRET") == "1":
            return  # the interpreter's autotuner benchmarks nothing (see `LaunchRecorder`)
        from triton.runtime import autotuner

        original_bench = autotuner.Autotuner._bench

        def _bench(self, *args, config, **meta):
            notes.pause()
            return original_bench(self, *args, config=config, **meta)

        autotuner.Autotuner._bench = _bench

    @contextlib.contextmanager
    def during(self):
        """Notes are sent only inside this block: no other request expects them."""
        self.active = True
        try:
            yield
        finally:
            self.active = False

    def enter(self, launcher=None):
        with self.lock:
            if not self.active:
                return
            if self.depth == 0:
                self.chan.send({"note": "compiling", **({"launcher": launcher} if launcher else {})})
            self.depth += 1

    def pause(self):
        """Before one of the autotuner's config benchmarks: the `yield` note, after which the
        judge lets a timed phase that waits for the GPU go first and answers once it holds its
        share again, so that phase waits for one config's benchmark, not for every config's.
        Not inside a compile, which holds no share."""
        with self.lock:
            if not self.active or self.depth:
                return
            self.chan.send({"note": "yield"})
            self.await_resumed()

    def await_resumed(self):
        answer = self.chan.recv()
        if answer != {"resumed": True}:
            raise protocol.ProtocolError(f"expected the judge's resumed, got {answer!r:.200}")

    def leave(self):
        with self.lock:
            if self.depth == 0:
                return
            self.depth -= 1
            if self.depth == 0:
                self.chan.send({"note": "compiled"})
                self.await_resumed()


def launcher_types(kernel):
    """The argument types Triton generates a compiled kernel's C launcher from (`CudaLauncher`:
    nothing else of the kernel reaches its source), for the judge's next Triton seed, so later
    candidates find that launcher built. None where the launcher depends on more (tensor
    descriptors) or the types are not plain names."""
    try:
        if getattr(kernel.metadata, "tensordesc_meta", None):
            return None
        types = list(kernel.src.signature.values())
    except Exception:
        return None
    if not types or not all(isinstance(t, str) and not t.startswith("tensordesc") for t in types):
        return None
    return types


def launcher_built(kernel):
    """Whether the kernel's C launcher is already in this process's Triton cache, found there
    as `CudaLauncher` finds it: by the hash of the source `make_launcher` generates. False
    where that cannot be told: the note is then sent, as it always was."""
    try:
        import sysconfig

        from triton.backends.nvidia import driver
        from triton.runtime.build import platform_key
        from triton.runtime.cache import get_cache_manager

        src = kernel.src
        constants = getattr(src, "constants", None) or {}
        # As `CudaLauncher.__init__` keys them: constants by argument index.
        constants = {((src.fn.arg_names.index(k),) if isinstance(k, str) else k): v for k, v in constants.items()}
        source = driver.make_launcher(constants, dict(src.signature), getattr(kernel.metadata, "tensordesc_meta", None))
        key = hashlib.sha256((source + platform_key()).encode("utf-8")).hexdigest()
        name = "__triton_launcher" + sysconfig.get_config_var("EXT_SUFFIX")
        return get_cache_manager(key).get_file(name) is not None
    except Exception:
        return False


class AutotunePrecompile:
    """Compiles an autotuned kernel's configs on threads before Triton benchmarks them.

    Triton's autotuner compiles each config at its first benchmark call, one after another: the
    six configs of a KernelBench matmul solution took 5 s of its evaluation's wall on an H200
    (`bench-throughput`, "candidate compile"), while the machine had idle cores. Triton's compiler
    mostly runs without the GIL (MLIR passes, ptxas in a subprocess: six configs in 2.0 s on one
    thread, 1.1 s on two threads of a 2-core machine), and Triton's own `AsyncCompileMode` compiles
    on an executor. So at an autotuner's cache miss, its pruned configs are compiled here first,
    as one compile note (the judge lets the GPU go meanwhile); the benchmark then finds each one
    compiled. What is chosen and reported is unchanged: a config that fails to compile here is
    dropped silently and fails again where it always has, inside the autotuner's benchmark (a
    compile error, or a config benchmarked as infinitely slow)."""

    def __init__(self, notes, threads):
        self.notes = notes
        self.threads = threads
        self.busy = False

    @staticmethod
    def threads_available():
        """One thread per core this process may run on, at most 8 (a kernel rarely has more
        configs worth compiling at once)."""
        try:
            return min(8, len(os.sched_getaffinity(0)))
        except (AttributeError, OSError):
            return min(8, os.cpu_count() or 1)

    def install(self, autotuner):
        if self.threads < 2 or os.environ.get("TRITON_INTERPRET") == "1":
            return  # nothing to overlap, or no compiler (the interpreter)
        pre = self
        original = autotuner.Autotuner.prune_configs

        def prune_configs(self, kwargs):
            # Called by `Autotuner.run` only on a cache miss, with `self.nargs` set, right before
            # the configs are benchmarked (and by `Autotuner.warmup`, where compiling is the point).
            configs = original(self, kwargs)
            pre.compile_all(self, configs, kwargs)
            return configs

        autotuner.Autotuner.prune_configs = prune_configs

    def compile_all(self, tuner, configs, kwargs):
        if self.busy or len(configs) < 2 or tuner.nargs is None:
            return
        from concurrent.futures import ThreadPoolExecutor

        from triton.runtime._async_compile import AsyncCompileMode

        args = list(tuner.nargs.values())
        launch = {k: v for k, v in kwargs.items() if k != "warmup"}
        self.busy = True
        self.notes.enter()
        try:
            with (
                ThreadPoolExecutor(min(self.threads, len(configs))) as pool,
                AsyncCompileMode(pool, ignore_errors=True),
            ):
                for config in configs:
                    tuner.fn.warmup(*args, **launch, **config.all_kwargs())
        except Exception:
            # Only a head start lost: the benchmark compiles whatever is missing, as always.
            pass
        finally:
            self.busy = False
            self.notes.leave()


class AutotuneBudget:
    """The judge's benchmark budget for Triton's autotuner (`[warm-up, repetitions]` in ms, from
    the `load` request; `AutotuneBudget` in crucible-result says why). It replaces the benchmarker of an
    autotuner that brought none of its own: one built with `do_bench=`, `warmup=` or `rep=` keeps
    what the candidate asked for. Not on Triton's interpreter, which has no GPU to spare."""

    def __init__(self):
        self.ms = None

    def set(self, ms):
        self.ms = tuple(ms) if ms else None

    def install(self, autotuner):
        if os.environ.get("TRITON_INTERPRET") == "1":
            return
        budget = self
        # A `functools.cached_property` in Triton 3.6 (a `property` in some versions).
        original = autotuner.Autotuner.__dict__["do_bench"]
        tritons = getattr(original, "func", None) or original.fget

        def do_bench(self):
            own = getattr(self, "_do_bench", None) is not None
            if own or budget.ms is None:
                return tritons(self)
            from triton.runtime import driver

            warmup, rep = budget.ms
            return functools.partial(driver.active.get_benchmarker(), warmup=warmup, rep=rep)

        autotuner.Autotuner.do_bench = property(do_bench)


def classify(exc, stage):
    """Maps an exception to a failure class by type and stage, never by message text."""
    import torch
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import InterpreterError

    if stage == "import" and isinstance(exc, SyntaxError):
        return "syntax_error"
    if stage == "import" and isinstance(exc, ImportError):
        return "import_error"
    if isinstance(exc, CompilationError):
        return "triton_compile_error"
    if isinstance(exc, InterpreterError) and raised_by_triton_frontend(exc.__cause__):
        # The interpreter has no compile step: what the compiler would reject (non-power-of-2
        # ranges, bad types) surfaces here as an error from triton.language's checks.
        return "triton_compile_error"
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return "out_of_memory"
    if isinstance(exc, torch.AcceleratorError):
        return "cuda_error"
    return "runtime_error"


def raised_by_triton_frontend(exc):
    if exc is None or exc.__traceback__ is None:
        return False
    innermost = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{os.sep}triton{os.sep}language{os.sep}" in innermost.filename


def describe(exc, path=None):
    """The exception plus the traceback frames from the candidate's own file: those are what a
    model can act on."""
    tb = traceback.extract_tb(exc.__traceback__)
    own = [f for f in tb if path and f.filename == path]
    lines = "".join(traceback.format_list(own or tb[-3:]))
    return f"{type(exc).__name__}: {exc}\n{lines}".strip()


def failure(exc, during, path):
    """The reply for a failure charged to the candidate (the judge knows the stage): `during` is
    what the process was doing (import, init, run, or the op), which `classify` reads."""
    return {"ok": False, "class": classify(exc, during), "message": describe(exc, path)}


def request_failure(exc, msg, path):
    """What the request loop replies when a request raises: the candidate's failure too."""
    return failure(exc, msg.get("op"), path)


class Candidate:
    def __init__(self, torch, chan, recorder, autotune):
        self.torch = torch
        # Taken before candidate code runs, which could replace torch's.
        self.empty_cache = torch.cuda.empty_cache
        reserved, allocated = torch.cuda.memory_reserved, torch.cuda.memory_allocated
        self.cached_bytes = lambda device: reserved(device) - allocated(device)
        self.autotune = autotune
        self.chan = chan
        self.recorder = recorder
        self.model = None
        self.path = None
        self.timed = None  # (inputs, slots) of the timed phase, from `time_open`
        self.kept = {}  # the checked timed iteration's output, for `time_deliver`
        self.standing = {}  # a standing share's key -> (what `open_shared` gave, its descriptor)

    def load(self, msg):
        self.device = msg["device"]
        self.path = msg["candidate_path"]
        self.autotune.set(msg["autotune_ms"])
        try:
            module = common.load_module(msg["candidate_path"], CANDIDATE_MODULE, "full")
        except BaseException as exc:  # SystemExit from a hostile import is the candidate's fault too
            return failure(exc, "import", self.path)
        model_cls = getattr(module, "ModelNew", None)
        if not isinstance(model_cls, type):
            return {
                "ok": False,
                "class": "missing_model_new",
                "message": "the file defines no class `ModelNew`; define `class ModelNew(nn.Module)` "
                "with the same constructor arguments as `Model`",
            }
        self.model_cls = model_cls  # the generalization trial builds a second one (`reload`)
        try:
            self.model = self.build(msg)
        except BaseException as exc:
            return failure(exc, "init", self.path)
        return {}

    def build(self, msg):
        """`ModelNew(*init_inputs)` on the device, seeded like the reference."""
        torch = self.torch
        init_inputs = common.b64_unpickle(msg["init_inputs"])
        with common.device_context(torch, self.device):
            common.seed_all(torch, msg["init_seed"])
            model = self.model_cls(*init_inputs)
            if isinstance(model, torch.nn.Module):
                model = model.to(self.device)
        return model

    def reload(self, msg):
        """A second `ModelNew`, from the perturbed init inputs of the generalization trial, in
        this same process: the module stays imported, so whatever it fixed at import (or cached
        in the first run) stays fixed. The first model is kept for timing."""
        try:
            self.generalized = self.build(msg)
        except BaseException as exc:
            return failure(exc, "init", self.path)
        return {}

    def run_generalized(self, msg):
        """`run`, once, with the second model; then it is released, and timing uses the first."""
        saved = self.model
        self.model = self.generalized
        try:
            return self.run(msg)
        finally:
            self.model = saved
            self.generalized = None

    def open_payload(self, payload):
        desc = common.b64_unpickle(payload)
        inputs = []
        for item in desc["inputs"]:
            if "tensor" in item:
                tensor, _host = self.open_shared(item["tensor"])
                inputs.append(tensor)
            else:
                inputs.append(item["value"])
        slots = [(self.open_shared(o["desc"]), o) for o in desc["outputs"]]
        return inputs, slots

    def open_shared(self, desc):
        """`common.open_shared`, keeping what a standing share opened (its descriptor names a
        key, `standing`) for the later trials whose descriptor says `reuse`: the referee wrote
        their values into the same memory. Over shm to a GPU the device copy is made anew from
        the file each time, since the file is what was written."""
        key = desc.get("standing")
        if desc.get("reuse"):
            if key not in self.standing:
                raise RuntimeError(f"the referee reused a share never opened here: {key!r}")
            opened, first = self.standing[key]
            if first["kind"] == "shm" and first["device"] != "cpu":
                return common.open_shared(self.torch, first)
            return opened
        opened = common.open_shared(self.torch, desc)
        if key is not None:
            self.standing[key] = (opened, desc)
        return opened

    def run(self, msg):
        torch = self.torch
        inputs, slots = self.open_payload(msg["payload"])
        input_ptrs = {x.data_ptr() for x in inputs if isinstance(x, torch.Tensor) and x.numel()}
        # Launches are counted per run, so a kernel that runs only in one grad mode shows.
        self.recorder.calls.clear()
        try:
            with torch.set_grad_enabled(bool(msg.get("grad", False))):
                out = self.model(*inputs)
            outputs = common.as_output_list(torch, out)
            aliased = [
                j
                for j, value in enumerate(outputs)
                if isinstance(value, torch.Tensor) and value.numel() > 0 and value.data_ptr() in input_ptrs
            ]
            # One wait for the forward and the copies together: the copies queue behind the
            # forward's kernels, a fault of which surfaces here all the same, and beside other busy
            # processes every wait for the device also waits for their time slices.
            problem = self.deliver(outputs, slots)
            del out, outputs
            self.release_cached_memory()
        except BaseException as exc:
            reply = failure(exc, "run", self.path)
            if reply["class"] == "cuda_error":
                # A sticky CUDA error aborts the process when the next tensor is freed, which
                # would lose this diagnostic: report now, then leave without cleanup.
                self.chan.send(reply)
                os._exit(0)
            return reply
        return {"aliased_outputs": aliased, "problem": problem, "launches": self.recorder.report()}

    def release_cached_memory(self):
        """Cached blocks beyond `RELEASE_CACHED_BYTES` back to the driver (GPU only)."""
        if self.device.startswith("cuda") and self.cached_bytes(self.device) >= RELEASE_CACHED_BYTES:
            self.empty_cache()

    def deliver(self, outputs, slots):
        """Copies the outputs into the referee's slots and waits for the device; returns what is
        wrong with them, if anything."""
        torch = self.torch
        problem = None
        if len(outputs) != len(slots):
            problem = f"forward returned {len(outputs)} outputs; the reference returns {len(slots)}"
        # Not strict: a count mismatch is the problem reported above, not an exception.
        for j, (value, ((slot, host), spec)) in enumerate(zip(outputs, slots, strict=False)):
            if problem:
                break
            if type(value) is not torch.Tensor:
                kind = f"{type(value).__module__}.{type(value).__qualname__}"
                problem = f"output {j} is a {kind}; it must be exactly torch.Tensor"
            elif list(value.shape) != spec["shape"]:
                problem = f"output {j} has shape {list(value.shape)}; expected {spec['shape']}"
            elif common.dtype_name(value.dtype) != spec["dtype"]:
                problem = f"output {j} has dtype {common.dtype_name(value.dtype)}; expected {spec['dtype']}"
            elif str(value.device) != str(slot.device):
                problem = f"output {j} is on {value.device}; expected {slot.device}"
            else:
                with torch.no_grad():
                    slot.copy_(value)
                    if host is not None:
                        host.copy_(slot)
        common.sync(self.torch, self.device)
        return problem

    def time_open(self, msg):
        """Maps the timed phase's inputs and slots. A request of its own, so that staging
        (through host memory with `shm`) stays out of the window the judge measures."""
        self.timed = self.open_payload(msg["payload"])
        return {}

    def time(self, msg):
        """The timed loop, and nothing else: the judge measures this request from outside. The
        output of the iteration the judge picked is kept for `time_deliver`."""
        inputs, _slots = self.timed
        picked = msg.get("check_iteration")
        self.kept = {}

        def keep(iteration, out):
            if iteration == picked:
                self.kept["out"] = common.as_output_list(self.torch, out)

        samples = common.time_forward(
            self.torch, self.model, inputs, msg["warmup"], msg["iters"], msg["flush_bytes"], self.device, keep
        )
        return {"samples_ms": samples}

    def time_deliver(self, msg):
        """Hands the picked iteration's output to the referee's slots, so a candidate that only
        computes when it is checked is caught."""
        _inputs, slots = self.timed
        problem = "the picked iteration produced no output"
        if "out" in self.kept:
            problem = self.deliver(self.kept["out"], slots)
        return {"problem": problem}

    def time_batch(self, msg):
        """`count` forwards back to back on the timed inputs, then one synchronize (or one
        after each forward, `synchronize_each`): the judge times this request from outside, as
        a witness the candidate cannot edit (timing.rs)."""
        inputs, _slots = self.timed
        torch, device, each = self.torch, self.device, msg["synchronize_each"]
        with torch.no_grad():
            for _ in range(msg["count"]):
                self.model(*inputs)
                if each:
                    common.sync(torch, device)
        common.sync(torch, device)
        return {}

    def profile(self, msg):
        """Profiled forwards: GPU time per kernel name, and each forward's busy time (the union
        of its device activity intervals), from the profiler's device records (CUPTI)."""
        torch = self.torch
        from torch.profiler import ProfilerActivity, profile

        inputs, _slots = self.open_payload(msg["payload"])
        busy_us, kernels = [], None
        with torch.no_grad():
            self.model(*inputs)  # warm: compilation and autotuning stay out of the profile
            common.sync(self.torch, self.device)
            for _ in range(msg.get("forwards", 1)):
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    self.model(*inputs)
                    common.sync(self.torch, self.device)
                records = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
                busy_us.append(union_length([(e.time_range.start, e.time_range.end) for e in records]))
                if kernels is None:
                    kernels = collections.defaultdict(lambda: [0, 0.0])
                    for event in records:
                        entry = kernels[event.name]
                        entry[0] += 1
                        entry[1] += event.time_range.elapsed_us()
        return {
            "kernels": [{"name": n, "calls": c, "gpu_time_us": t} for n, (c, t) in sorted((kernels or {}).items())],
            "busy_us": busy_us,
            "launches": self.recorder.report(),
        }


def union_length(intervals):
    """Total length covered by (start, end) intervals: overlapping kernels count once."""
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def warm_up(torch, device):
    """Before the hello, on a GPU: what every candidate process would otherwise do inside its
    first trial (Triton's key and driver) or its profile stage (the profiler, when asked)."""
    if device.startswith("cuda"):
        common.settle_triton_key()
        # What a process's first compile imports (the code generator, Gluon with it): 0.08 s.
        import triton.compiler.code_generator  # noqa: F401
    start_triton_driver(device)
    warm_profiler(torch, device)


def start_triton_driver(device):
    """Triton builds its CUDA utilities with gcc (`driver.c`, -O3) the first time a process
    touches its driver: otherwise at the candidate's first launch, inside trial 0 and under the
    evaluation's share of the GPU, which a timed phase of another evaluation then waits for.
    A failure here is only a lost head start: the same build fails again at the first launch,
    where it always has."""
    if not device.startswith("cuda"):
        return
    try:
        from triton.runtime import driver

        driver.active.utils  # noqa: B018 - the lazy driver is built on first access
    except Exception as exc:
        print(f"Triton driver warm-up failed: {exc}", file=sys.stderr)


def warm_profiler(torch, device):
    """One tiny profiled op, when the judge asked for it (a GPU evaluation that will time): the
    profiler's first start in a process costs seconds (CUPTI and Kineto start-up, 3.7-4.4 s on
    an H200) and later ones about a millisecond, so a process started ahead of its evaluation
    pays it off the critical path. It runs before any candidate code and records nothing the
    judge reads."""
    if os.environ.get("CRUCIBLE_WARM_PROFILER") != "1":
        return
    start_profiler(torch, device)


class ProfilerWarmUp:
    """The profiler's start-up on a thread of its own, for a process that did not warm it ahead:
    the judge asks for it (`warm_profiler`) once the candidate's first trial passed, so a
    candidate that fails to load or in that trial never pays its 4-5 CPU-seconds, and one that
    passes pays them while its later stages run. `start_profiler`, before the timed phases, waits for that thread."""

    def __init__(self, torch, device):
        self.torch = torch
        self.device = device
        self.thread = None

    def begin(self, _msg):
        if self.thread is None and self.device.startswith("cuda"):
            self.thread = threading.Thread(
                target=start_profiler, args=(self.torch, self.device), name="crucible-profiler-warm-up", daemon=True
            )
            self.thread.start()
        return {}

    def finish(self, _msg):
        if self.thread is not None:
            self.thread.join()
        # About a millisecond once started; the whole start-up where nothing warmed it.
        start_profiler(self.torch, self.device)
        return {}


def start_profiler(torch, device):
    """The profiler's start-up, on its own (the `start_profiler` request, before the timed phases
    of a process that did not warm it ahead, or the `warm_profiler` thread). Nothing on the
    CPU."""
    if not device.startswith("cuda"):
        return
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CUDA]):
            torch.ones(1, device=device).add_(1)
            common.sync(torch, device)
    except Exception as exc:
        # Only a head start: a profiler that fails here fails again in the profile stage, where
        # it always has, so the verdict is the same as without the warm-up.
        print(f"profiler warm-up failed: {exc}", file=sys.stderr)


def main():
    # Triton's launch path is wrapped before the hello, and the device brought up before any
    # candidate code runs: a failure there is the machine's (or the sandbox's), never the
    # candidate's, and the context start overlaps the referee's.
    import triton

    recorder = LaunchRecorder()
    recorder.install(triton)
    chan, torch, device = common.start("the candidate process", warm=warm_up)
    from triton.runtime import jit

    notes = CompileNotes(chan)
    notes.install(jit)
    from triton.runtime import autotuner

    AutotunePrecompile(notes, AutotunePrecompile.threads_available()).install(autotuner)
    autotune = AutotuneBudget()
    autotune.install(autotuner)
    candidate = Candidate(torch, chan, recorder, autotune)

    def run(msg):
        with notes.during():
            return candidate.run(msg)

    profiler = ProfilerWarmUp(torch, device)

    handlers = {
        "load": candidate.load,
        "run": run,
        "time_open": candidate.time_open,
        "time": candidate.time,
        "time_deliver": candidate.time_deliver,
        "time_batch": candidate.time_batch,
        "warm_profiler": profiler.begin,
        "start_profiler": profiler.finish,
        "profile": candidate.profile,
        "reload": candidate.reload,
        "run_generalized": candidate.run_generalized,
    }
    # BaseException: a SystemExit or KeyboardInterrupt raised by candidate code is its failure too.
    common.serve(
        chan, handlers, lambda exc, msg: request_failure(exc, msg, candidate.path), "candidate", catch=BaseException
    )


if __name__ == "__main__":
    sys.exit(main())
