"""The referee: builds the reference, draws the inputs, holds the expected outputs, compares.

It is trusted and never runs candidate code. The judge (Rust) drives it over its channel, one
request at a time; every reply is `{"ok": true, ...}` or `{"ok": false, "error": ...}` (an
infrastructure or task fault, never the candidate's).
"""

import contextlib
import gc
import json
import os
import sys
import time
import traceback
import warnings

from crucible_harness import common, fused_stats, precision
from crucible_harness.common import compare

# Trials this large spare memory at some cost in time. A kept trial whose pristine inputs and
# expected outputs hold this many bytes or more keeps neither for the precision measurement: it
# draws them again from the trial's seed (held from the first trial to the measurement, they were
# a third of 23_Softmax's referee there, 6 GiB tensors and 48.7 GiB from the second trial on,
# which ran out of memory beside three other evaluations on an 80 GiB H100). And a trial's drawn
# inputs of this size go back to the driver as soon as the expected outputs are computed.
LARGE_TRIAL_BYTES = 1 << 30


class Referee:
    def __init__(self, torch, chan):
        self.torch = torch
        self.chan = chan
        self.trials = {}  # trial index -> (inputs, pristine inputs, expected, shared descriptors)
        self.kept = None  # the candidate's outputs of the first trial, for the repeat check
        # (pristine inputs, expected, candidate outputs, seed), for `measure_precision`; the first
        # two None where they are to be drawn again from the seed (`LARGE_TRIAL_BYTES`)
        self.precision_trial = None
        self.seeds = {}  # trial index -> its seed, where the task's own reference drew it
        self.ahead = None  # the precision measurement's float64 forwards, begun by `start_precision`

    def init(self, msg):
        torch = self.torch
        self.device = msg["device"]
        self.transport = msg["transport"]
        self.shared_dir = msg["shared_dir"]
        self.tolerance = msg["tolerance"]
        self.inputs_on_host = msg.get("inputs_on_host", False)
        # CUDA IPC maps a whole cudaMalloc segment, not just the shared tensor, and the caching
        # allocator packs small tensors into shared segments: what the candidate maps must come
        # from segments that never hold the expected outputs.
        self.share_pool = torch.cuda.MemPool() if self.transport == "cuda_ipc" else None
        # Standing shares: "in0", "out0", ... -> (the tensor shared, its descriptor), written
        # again by each later trial whose tensor there has the same shape, dtype and device, and
        # kept mapped by the candidate (`_share_standing`); None: every trial shares anew.
        self.standing = {} if msg.get("standing_shares") else None
        profile = msg["profile"]
        if profile == "auto":
            # Small sizes on the CPU (the Triton interpreter is slow), the file as written on a GPU.
            has_small = "small" in (getattr(common.peek_profiles(msg["task_path"]), "keys", list)())
            profile = "small" if self.device == "cpu" and has_small else "full"
        self.profile = profile
        self.module = common.load_module(msg["task_path"], "crucible_task", profile)
        for name in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(self.module, name):
                raise AttributeError(f"task file defines no `{name}`")
        init_inputs, self.model = self.build(self.module, msg["init_seed"])
        return {
            "env": common.env_info(torch, self.device),
            "init_inputs": common.b64_pickle(init_inputs),
            "profile": self.profile,
            "sizes": self.trial_sizes(init_inputs) if msg["size_trials"] else None,
        }

    def trial_sizes(self, init_inputs):
        """What each trial will hold, from shapes alone, before any trial draws: the bytes
        `prepare` will report and the outputs' elements. The judge keeps a task whose trials are
        large apart from other large work from its first trial on, not from its first trial's
        end (two 23_Softmax evaluations, neither yet known large, ran out of memory together on
        an 80 GiB H100). Drawn on the meta device, with a model built there, so nothing is
        allocated; None where the task's code cannot run there (data-dependent shapes, `.item()`,
        an explicit device)."""
        torch = self.torch
        try:
            # The forward's own warnings (a shape it would warn of) come again in the trials.
            with torch.device("meta"), torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                inputs = list(self.module.get_inputs())
                outputs = common.as_output_list(torch, self.module.Model(*init_inputs)(*inputs))
        except Exception:
            return None
        tensors = [x for x in (*inputs, *outputs) if isinstance(x, torch.Tensor)]
        if any(x.device.type != "meta" for x in tensors):
            return None
        fused_stats.warm_ahead(torch, outputs, self.device)
        return {
            "trial_bytes": self.trial_bytes(common.tensor_bytes(torch, inputs), common.tensor_bytes(torch, outputs)),
            "output_elements": sum(x.numel() for x in outputs if isinstance(x, torch.Tensor)),
        }

    def build(self, module, init_seed):
        """The task's init inputs and its `Model` on the device, seeded."""
        torch = self.torch
        with common.device_context(torch, self.device):
            init_inputs = list(module.get_init_inputs())
            common.seed_all(torch, init_seed)
            # No .eval(): KernelBench runs the reference in the module's default mode.
            model = module.Model(*init_inputs).to(self.device)
        return init_inputs, model

    def draw_inputs(self, seed):
        torch = self.torch
        common.seed_all(torch, seed)
        if self.inputs_on_host:
            # What KernelBench does: draw on the CPU, then copy. Kept only to measure the cost.
            inputs = list(self.module.get_inputs())
            return [x.to(self.device) if isinstance(x, torch.Tensor) else x for x in inputs]
        with common.device_context(torch, self.device):
            return list(self.module.get_inputs())

    def shared_memory(self):
        """Allocations the candidate will map (inputs, output slots) happen inside this."""
        if self.share_pool is None:
            return contextlib.nullcontext()
        return self.torch.cuda.use_mem_pool(self.share_pool)

    def prepare(self, msg):
        """Draws fresh inputs for one trial, computes the expected outputs, and shares copies of
        the inputs plus NaN-poisoned output slots with the candidate.

        The expected outputs and the pristine copy come from inputs drawn in memory the
        candidate never maps. Over CUDA IPC what it maps is a copy, in segments that only ever
        hold shared tensors: a segment of an earlier trial's, which a mapping kept past its
        trial (with its reference count forged in /dev/shm) could still reach, may be reused
        there, and anything written through it then changes only the candidate's own inputs,
        which the check compares with the pristine copy."""
        torch = self.torch
        index = msg["trial"]
        drawn = self.draw_inputs(msg["seed"])
        pristine = [x.clone() if isinstance(x, torch.Tensor) else x for x in drawn]
        with torch.no_grad():
            expected = common.as_output_list(torch, self.model(*drawn))
        input_bytes = common.tensor_bytes(torch, drawn)
        del drawn  # the forward may have changed it: the candidate gets the pristine values
        if input_bytes >= LARGE_TRIAL_BYTES:
            # Its memory goes back to the driver now, not cached here through the candidate's
            # run (the shared copy below comes from another pool and cannot reuse it): one
            # input's worth less beside the candidate's outputs (6 GiB for 23_Softmax).
            self.release_device_memory()
        for out in expected:
            if type(out) is not torch.Tensor:
                raise TypeError(f"reference returned {type(out).__name__}; only tensors are supported")
        # A large trial's shared copies go back to the driver after its check, never standing;
        # nor does a trial prepared while another is outstanding overwrite that one's.
        standing = self.standing is not None and not self.trials
        if standing and common.tensor_bytes(torch, [*pristine, *expected]) < LARGE_TRIAL_BYTES:
            inputs, shared_inputs, slots = self._share_standing(index, pristine, expected)
        else:
            inputs, shared_inputs, slots = self._share_anew(index, pristine, expected)
        # Large outputs are compared and measured by kernels that compile on a thread meanwhile.
        fused_stats.warm_in_background(torch, expected)
        input_descs = [
            {"value": x} if desc is None else {"tensor": common.public_desc(desc)}
            for x, desc in zip(inputs, shared_inputs, strict=True)
        ]
        slot_descs = [
            {"desc": common.public_desc(desc), "shape": list(exp.shape), "dtype": common.dtype_name(exp.dtype)}
            for (_slot, desc), exp in zip(slots, expected, strict=True)
        ]
        self.trials[index] = (inputs, pristine, expected, shared_inputs, slots)
        self.seeds[index] = msg["seed"]
        payload = common.b64_pickle({"inputs": input_descs, "outputs": slot_descs})
        output_bytes = common.tensor_bytes(torch, expected)
        return {"payload": payload, "tensor_bytes": self.trial_bytes(input_bytes, output_bytes)}

    def trial_bytes(self, input_bytes, output_bytes):
        """What a trial holds, so the judge can keep two large trials apart on one device: the
        drawn inputs (freed, and cached by the allocator until the check unless large), the
        pristine copy, the shared one over CUDA IPC, the expected outputs and the slots (each
        the shape and dtype of an expected output)."""
        copies = 2 if self.share_pool is None else 3
        return copies * input_bytes + 2 * output_bytes

    def _share_anew(self, index, pristine, expected):
        """The trial's inputs as the candidate sees them, their descriptors (None for a value
        that is not a tensor) and its output slots `(slot, descriptor)`, all shared for this
        trial alone: over CUDA IPC copies in the share pool, over shm files of the trial's own."""
        torch = self.torch
        if self.share_pool is None:
            inputs = pristine  # shm: `share_tensor` copies them into files of this trial's own
        else:
            with self.shared_memory():
                inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in pristine]
        common.sync(torch, self.device)
        shared_inputs = [
            common.share_tensor(torch, x, self.transport, self.shared_dir, f"t{index}_in{i}")
            if isinstance(x, torch.Tensor)
            else None
            for i, x in enumerate(inputs)
        ]
        slots = []
        for j, exp in enumerate(expected):
            with self.shared_memory():
                slot = torch.full_like(exp, poison_for(exp))
            slots.append((slot, common.share_tensor(torch, slot, self.transport, self.shared_dir, f"t{index}_out{j}")))
        return inputs, shared_inputs, slots

    def _share_standing(self, index, pristine, expected):
        """`_share_anew`'s three, through standing shares: where a tensor of the same shape,
        dtype and device was shared under the same key ("in0", "out0", ...) before, that
        memory is written with this trial's values and its descriptor says `reuse`, so the
        candidate's process uses its mapping of it again instead of opening one (over CUDA IPC
        each open and close is a wait for the device, and beside other busy processes every
        such wait also waits for their time slices, `scripts/probe/trial_parts.py`). What the
        candidate could do with a mapping it keeps it could do before, by keeping one past its
        trial (see `prepare`): its writes to its inputs show against the pristine copy, to its
        slots after its run against the snapshot, and every trial poisons the slots again."""
        torch = self.torch
        written = []
        inputs = [
            self._standing_tensor(f"in{i}", x, written) if isinstance(x, torch.Tensor) else x
            for i, x in enumerate(pristine)
        ]
        slot_tensors = [self._standing_tensor(f"out{j}", exp, written) for j, exp in enumerate(expected)]
        # Written again, not shared again: no event of a share orders these writes before the
        # candidate's reads, so they are over before the reply.
        common.sync(torch, self.device)
        descs = {}
        for key, tensor, signature in written:
            if key in self.standing:
                desc = self.standing[key][1]
                if desc["kind"] == "shm":
                    common.write_shared(desc, tensor)
                descs[key] = {**desc, "reuse": True}
            else:
                desc = common.share_tensor(torch, tensor, self.transport, self.shared_dir, f"t{index}_{key}")
                desc["standing"] = key
                # Over shm the file stands, not the tensor it was first written from.
                self.standing[key] = (tensor if self.share_pool is not None else None, desc, signature)
                descs[key] = desc
        shared_inputs = [descs.get(f"in{i}") if isinstance(x, torch.Tensor) else None for i, x in enumerate(inputs)]
        slots = [(tensor, descs[f"out{j}"]) for j, tensor in enumerate(slot_tensors)]
        return inputs, shared_inputs, slots

    def _standing_tensor(self, key, like, written):
        """The tensor shared under `key` for this trial, with `like`'s values for an input
        ("in0", ...) and poisoned for an output slot ("out0", ...): over CUDA IPC the standing
        one written again where `like` fits it (same shape, dtype and device), else a new one
        in the share pool; over shm a tensor of this trial's, which is copied into the file.
        Appends `(key, tensor, signature)` to `written`; a standing share that no longer fits
        stands no more."""
        torch = self.torch
        signature = (tuple(like.shape), like.dtype, like.device)
        kept = self.standing.get(key)
        if kept is not None and kept[2] != signature:
            del self.standing[key]
            kept = None
        is_input = key.startswith("in")
        if self.share_pool is None:
            tensor = like if is_input else torch.full_like(like, poison_for(like))
        elif kept is not None:
            tensor = kept[0]
            if is_input:
                tensor.copy_(like)
            else:
                tensor.fill_(poison_for(like))
        else:
            with self.shared_memory():
                tensor = like.clone() if is_input else torch.full_like(like, poison_for(like))
        written.append((key, tensor, signature))
        return tensor

    def _slot_value(self, slot, desc):
        if desc["kind"] == "shm":
            mapped = desc["mapped"][: desc["numel"]].view(desc["shape"])
            return mapped.to(self.device)
        return slot

    def _shared_input_value(self, x, desc):
        if desc is None or desc["kind"] != "shm" or self.device != "cpu":
            return x
        return desc["mapped"][: desc["numel"]].view(desc["shape"])

    def check(self, msg):
        """Compares the candidate's outputs (already in the shared slots) with the expected ones.

        The judge has stopped the candidate's processes for the duration; what is compared is a
        snapshot, and the slots must still hold it afterwards (nothing may write them late).

        A large trial's memory goes back to the driver once the comparison returned: while it
        runs, its locals (the expected outputs, the snapshot, the pristine inputs) are alive, and
        a release from inside it kept them cached here (an H100's 23_Softmax referee reserved 36
        GiB after each check with 6 allocated; other evaluations shared the device). A smaller
        one's stays cached for the next trial, whose tensors have the same sizes: emptying the
        cache frees every block (`cudaFree`, which waits for the device) and the next trial
        allocates them again, and beside other busy processes every such wait also waits for
        their time slices (`scripts/probe/sync_latency.py`)."""
        reply, trial_bytes = self._check(msg)
        if trial_bytes >= LARGE_TRIAL_BYTES:
            self.release_device_memory()
        return reply

    def device_memory_held_elsewhere(self):
        """Device memory in use that this referee's allocator does not hold: its own CUDA
        context, the candidate's process, anything else on the device (None on the CPU). Read
        after this referee's cached blocks went back, so that only what others hold is left."""
        if not self.device.startswith("cuda"):
            return None
        torch = self.torch
        self.release_device_memory()
        free, total = torch.cuda.mem_get_info(self.device)
        return max(total - free - torch.cuda.memory_reserved(self.device), 0)

    def release_device_memory(self):
        """Memory this referee no longer holds goes back to the driver, for the other processes
        on the device; a no-op on the CPU."""
        if self.device.startswith("cuda"):
            self.torch.cuda.empty_cache()

    def _check(self, msg):
        torch = self.torch
        index = msg["trial"]
        inputs, pristine, expected, shared_inputs, slots = self.trials.pop(index)
        seed = self.seeds.pop(index, None)
        # No synchronize first: the candidate's process waited for its device before it replied,
        # and this process's own work is ordered on its stream; each wait for the device beside
        # other busy processes also waits for their time slices.
        snapshot = [self._slot_value(slot, desc).clone() for slot, desc in slots]
        comparisons = [
            common.Comparison(torch, exp, got, *common.tolerance_for(torch, self.tolerance, exp))
            for exp, got in zip(expected, snapshot, strict=True)
        ]
        repeat = msg.get("against_kept") and self.kept is not None
        against_kept = [
            common.Comparison(torch, first, again, *common.tolerance_for(torch, self.tolerance, first))
            for first, again in (zip(self.kept, snapshot, strict=True) if repeat else [])
        ]
        tensors = [
            (i, self._shared_input_value(x, desc), orig)
            for i, (x, orig, desc) in enumerate(zip(inputs, pristine, shared_inputs, strict=True))
            if isinstance(orig, torch.Tensor)
        ]
        input_pairs = [(now, orig) for _i, now, orig in tensors]
        # The comparisons' statistics and the inputs' flags in one transfer.
        fetched = fetch_at_once(
            torch,
            [
                *(c.statistics for c in comparisons),
                *(c.statistics for c in against_kept),
                common.bitwise_flags(torch, input_pairs),
            ],
        )
        outputs, problems, repeat_problems = [], [], []
        for j, comparison in enumerate(comparisons):
            stats, problem = comparison.result(fetched.pop(0))
            stats["index"] = j
            outputs.append(stats)
            if problem:
                problems.append(f"output {j}: {problem}")
        if msg.get("keep"):
            self.kept = snapshot
        trial_bytes = common.tensor_bytes(torch, [*pristine, *expected])
        if msg.get("precision") and not problems:
            if seed is not None and trial_bytes >= LARGE_TRIAL_BYTES:
                self.precision_trial = (None, None, snapshot, seed)
            else:
                self.precision_trial = (pristine, expected, snapshot, seed)
        if self.ahead is not None and self.ahead.trial == index and (problems or not msg.get("precision")):
            self.ahead = None  # this trial will not be measured: its float64 copies go now
        for j, comparison in enumerate(against_kept):
            _stats, problem = comparison.result(fetched.pop(0))
            if problem:
                repeat_problems.append(f"output {j}, second run vs first: {problem}")
        if repeat:
            # The repeat is its only use: held through the timed phases it was one more output's
            # worth of memory there (a 6 GiB softmax output on an 80 GiB H100, where the timed
            # reference's forward then ran out of memory with the evaluation alone on the device).
            self.kept = None
        flags = common.bitwise_result(input_pairs, fetched.pop(0))
        mutated = [i for (i, _now, _orig), flag in zip(tensors, flags, strict=True) if flag]
        # Read again after that wait for the device: a write landing since the snapshot shows.
        flags = common.differ_bitwise(
            torch, [(self._slot_value(slot, desc), snap) for (slot, desc), snap in zip(slots, snapshot, strict=True)]
        )
        changed = [j for j, flag in enumerate(flags) if flag]
        # Evaluations share the GPU: a large trial's memory goes back to the driver once this
        # returns (`check`) rather than staying in this process's cache (a task with 6 GiB
        # tensors left over 100 GiB cached here, and a referee beside it ran out of memory).
        return {
            "outputs": outputs,
            "problems": problems,
            "mutated_inputs": mutated,
            "changed_after_return": changed,
            "repeat_problems": repeat_problems,
        }, trial_bytes

    # --- the generalization trial ---------------------------------------------------------

    def generalize_plan(self, msg):
        """Decides whether the generalization trial runs and with which values, from the task
        as loaded (size profile applied). Loads nothing."""
        declared = getattr(self.module, "GENERALIZE", None)
        if msg["mode"] == "auto" and declared is None:
            return {"requested": False, "source": None, "constants": [], "skip": None, "opted_out": False}
        if declared is False:
            return {
                "requested": True,
                "source": "task",
                "constants": [],
                "skip": "the task opts out (GENERALIZE = False)",
                "opted_out": True,
            }
        source = "task" if isinstance(declared, dict) else "auto"
        if declared not in (None, True) and source == "auto":
            return {
                "requested": True,
                "source": "task",
                "constants": [],
                "skip": f"GENERALIZE must be True, False or a dict of int values, not {declared!r}",
                "opted_out": False,
            }
        try:
            changes = (
                explicit_perturbation(self.module, declared) if source == "task" else auto_perturbation(self.module)
            )
        except Exception as exc:
            skip = f"{type(exc).__name__}: {exc}"
            return {"requested": True, "source": source, "constants": [], "skip": skip, "opted_out": False}
        self.generalize_changes = changes
        constants = [{"name": name, "from": old, "to": new} for name, (old, new) in changes.items()]
        skip = None
        if not changes:
            skip = (
                "GENERALIZE changes no constant"
                if source == "task"
                else "the task has no module-level int size constant (>= 2) that get_inputs or get_init_inputs reads"
            )
        return {"requested": True, "source": source, "constants": constants, "skip": skip, "opted_out": False}

    def generalize(self, msg):
        """Loads a second task instance with the perturbed constants and builds its reference
        with the same init seed. The reference must run, and give finite outputs, on the
        trial's own inputs first: a task that cannot take other sizes is skipped, never
        charged to the candidate."""
        torch = self.torch
        changes = self.generalize_changes
        try:
            module = common.load_module(msg["task_path"], "crucible_task_generalized", self.profile)
            for name, (_old, new) in changes.items():
                setattr(module, name, new)
            perturbed_shapes = input_shapes(torch, module)
            if perturbed_shapes is not None and perturbed_shapes == input_shapes(torch, self.module):
                return {
                    "skip": "the perturbed constants do not change the task's inputs (get_inputs and "
                    "get_init_inputs return the same shapes and values)",
                    "init_inputs": None,
                }
            init_inputs, model = self.build(module, msg["init_seed"])
            common.seed_all(torch, msg["seed"])
            with common.device_context(torch, self.device):
                inputs = list(module.get_inputs())
            with torch.no_grad():
                outputs = common.as_output_list(torch, model(*inputs))
            for j, out in enumerate(outputs):
                if type(out) is not torch.Tensor:
                    return {
                        "skip": f"the reference returns a {type(out).__name__} at the perturbed sizes",
                        "init_inputs": None,
                    }
                if out.is_floating_point() and not bool(torch.isfinite(out).all()):
                    return {
                        "skip": f"the reference's output {j} is not finite at the perturbed sizes",
                        "init_inputs": None,
                    }
            del inputs, outputs
        except Exception as exc:
            return {
                "skip": f"the reference fails at the perturbed sizes: {type(exc).__name__}: {exc}",
                "init_inputs": None,
            }
        self.generalized = (module, model)
        return {"skip": None, "init_inputs": common.b64_pickle(init_inputs)}

    def prepare_generalized(self, msg):
        """`prepare`, with the perturbed task instance and its reference. The expected outputs
        are all the trial needs afterwards: the second reference is released (on a GPU its
        weights would otherwise stay through timing)."""
        saved = self.module, self.model
        self.module, self.model = self.generalized
        try:
            return self.prepare(msg)
        finally:
            self.module, self.model = saved
            self.generalized = None
            self.seeds.pop(msg["trial"], None)  # not this reference's: never drawn again

    def start_precision(self, msg):
        """Begins the float64 forwards of the precision measurement of `trial` (its pristine
        inputs) on a thread, while the candidate's process compiles and runs it: none of them
        needs the candidate's outputs. Only where their copies fit `max_bytes`, since they are
        held until the measurement, through the later trials. The judge holds a share of the
        device until `await_precision` returns, so this work never overlaps a timed phase."""
        self.settle()
        torch = self.torch
        _inputs, pristine, expected, _shared, _slots = self.trials[msg["trial"]]
        held_bytes = float64_forwards_bytes(torch, expected)
        if held_bytes == 0 or held_bytes > msg["max_bytes"]:
            return {"started": False, "held_bytes": held_bytes}

        def sync():
            common.sync(torch, self.device)

        self.ahead = precision.Ahead(torch, msg["trial"], self.model, pristine, msg["budget_s"], sync)
        return {"started": True, "held_bytes": held_bytes}

    def await_precision(self, _msg):
        """Waits for the forwards `start_precision` began: after this, the referee does nothing
        on the device until the judge asks again."""
        ahead = self.ahead
        if ahead is None:
            return {"precomputed": False, "seconds": 0.0, "error": None}
        precomputed = ahead.wait() is not None
        if not precomputed:
            self.ahead = None
            self.release_device_memory()
        return {"precomputed": precomputed, "seconds": ahead.seconds, "error": ahead.error}

    def settle(self):
        """Waits for any work begun on a thread, so that a request never overlaps it."""
        if self.ahead is not None:
            self.ahead.wait()

    def time_reference(self, msg):
        """The reference's timed loop on fresh inputs; its inputs and outputs go back to the
        driver afterwards (an H100's 23_Softmax referee kept 30 GiB reserved past it, into the
        timed phase of its evaluation)."""
        reply = self._time_reference(msg)
        self.release_device_memory()
        return reply

    def _time_reference(self, msg):
        torch = self.torch
        inputs = self.draw_inputs(msg["seed"])
        # `precision` (a measured class) runs the reference at the candidate's precision.
        with torch.no_grad(), precision.matched(torch, msg.get("precision"), self.device):
            outputs = common.as_output_list(torch, self.model(*inputs))
            samples = common.time_forward(
                torch, self.model, inputs, msg["warmup"], msg["iters"], msg["flush_bytes"], self.device
            )
        # The least traffic any implementation needs: read every input and write every output once.
        return {"samples_ms": samples, "io_bytes": common.tensor_bytes(torch, inputs + outputs)}

    def measure_precision(self, msg):
        """The candidate's and the reference's errors against a float64 copy of the reference,
        on the trial the judge marked. Anything that prevents it (an op without float64, out of
        memory, a reference that fixes its dtype) leaves the precision unmeasured, with the
        reason: it is neither the judge's failure nor the candidate's. Running out of memory
        says so (`out_of_memory`) and keeps the trial: on a device other evaluations share, the
        judge asks again after a pause, then retries the evaluation alone."""
        torch = self.torch
        kept, self.precision_trial = self.precision_trial, None
        ahead, self.ahead = self.ahead, None
        ahead = None if ahead is None else ahead.wait()
        if kept is None:
            return precision_reply(unmeasured="no passing trial was kept for the measurement")
        inputs, expected, got, seed = kept
        del kept
        redrawn = inputs is None
        # Small measurements leave their blocks cached, as a small trial's check does.
        large = redrawn or float64_forwards_bytes(torch, got) >= LARGE_TRIAL_BYTES
        out_of_memory = False

        def sync():
            common.sync(torch, self.device)

        if redrawn:
            # The same draws from the seed as `prepare` made, each held only while used.
            trial = precision.DrawnAgain(torch, self.model, lambda: self.draw_inputs(seed))
        else:
            trial = precision.Held(inputs, expected)
        try:
            outputs, errors = precision.measure_trial(torch, self.model, trial, got, msg["budget_s"], sync, ahead)
            return precision_reply(outputs=outputs, errors=errors)
        except precision.Unmeasured as exc:
            out_of_memory = exc.out_of_memory
            held_elsewhere = None
            if out_of_memory:
                # Kept for another attempt: beside other evaluations the memory may free up.
                self.precision_trial = (None, None, got, seed) if redrawn else (inputs, expected, got, seed)
                held_elsewhere = self.device_memory_held_elsewhere()
            return precision_reply(
                unmeasured=str(exc),
                errors=exc.errors,
                out_of_memory=out_of_memory,
                held_elsewhere_bytes=held_elsewhere,
            )
        except Exception as exc:
            why = f"the float64 reference could not be computed: {type(exc).__name__}: {exc}"
            return precision_reply(unmeasured=why)
        finally:
            del inputs, expected, got, ahead, trial
            if large or out_of_memory:
                self.release_device_memory()


def precision_reply(outputs=None, unmeasured=None, errors=(), out_of_memory=False, held_elsewhere_bytes=None):
    """One `measure_precision` reply, every field present (the judge refuses a missing one):
    `outputs` where measured, else why not (`unmeasured`), with the errors known so far."""
    return {
        "outputs": outputs,
        "unmeasured": unmeasured,
        "errors": list(errors),
        "out_of_memory": out_of_memory,
        "held_elsewhere_bytes": held_elsewhere_bytes,
    }


def fetch_at_once(torch, parts):
    """Each part's values (a list of rows for a matrix, of values for a vector; [] for None),
    fetched from the device in one transfer: beside other busy processes each wait for the
    device also waits for their time slices (see `common.compare`)."""
    present = [p for p in parts if p is not None]
    flat = torch.cat([p.reshape(-1).to(torch.float64) for p in present]).tolist() if present else []
    fetched, at = [], 0
    for part in parts:
        n = 0 if part is None else part.numel()
        values, at = flat[at : at + n], at + n
        if part is not None and part.dim() == 2:
            width = part.shape[1]
            values = [values[k : k + width] for k in range(0, n, width)]
        fetched.append(values)
    return fetched


def poison_for(tensor):
    """What an output slot holds until the candidate writes it: NaN, or for integers a value no
    honest output is likely to hold."""
    return float("nan") if tensor.is_floating_point() else -123457


def float64_forwards_bytes(torch, outputs):
    """What the precision measurement's float64 forwards hold for these outputs (their float
    ones), in bytes."""
    elements = sum(x.numel() for x in outputs if x.is_floating_point())
    return elements * torch.finfo(torch.float64).bits // 8 * precision.FORWARDS


def warm_up(torch, device):
    """After the hello, at the warm pool's request (`warm_up`): a first use, on small tensors, of
    what every trial runs (drawing inputs, a matmul, poisoned slots, the comparison) and of a
    precision measurement (`warm_up_precision`). A process's first launch of each kernel loads
    its module and its first matmul creates cuBLAS's handle, which would otherwise fall in the
    evaluation's first trial, under a share of the GPU."""
    if not device.startswith("cuda"):
        return
    # float32 only (what nearly every task outputs): the warm-up holds a share of the GPU, which
    # a timed phase waits for.
    a = torch.randn(64, 64, device=device)
    b = torch.rand(64, 64, device=device)
    expected = a @ b
    got = torch.full_like(expected, float("nan"))
    got.copy_(expected.clone())
    compare(torch, expected, got, 1e-2, 1e-2)
    common.differ_bitwise(torch, [(expected, got)])
    try:
        warm_up_precision(torch, device, a)
    except Exception as exc:  # only a head start lost: the measurement meets it and reports it
        print(f"precision warm-up failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    common.sync(torch, device)


# Far beyond what a 64x64 measurement takes: it only guards against a stuck device.
WARM_UP_PRECISION_BUDGET_S = 10.0


def warm_up_precision(torch, device, x):
    """A precision measurement of a small float32 linear layer on `x` (part of `warm_up`): its
    float64 copies of a model and its inputs, the operand roundings and the statistics launch
    kernels no trial launches, so the first measurement loaded their modules under trial 0's
    share (its forwards, begun during the trial) and in the `precision` stage (its statistics),
    which is the judge's time outside the trials. Returns what `precision.measure` returns."""
    linear = torch.nn.Linear(x.shape[-1], x.shape[-1], device=device)
    with torch.no_grad():
        expected = [linear(x)]
    return precision.measure(
        torch,
        linear,
        [x],
        expected,
        [expected[0].clone()],
        WARM_UP_PRECISION_BUDGET_S,
        lambda: common.sync(torch, device),
    )


# --- generalization: which constants change, and to what ---------------------------------------

# Module-level ints whose names contain one of these are hyperparameters, not sizes: changing
# them changes what the task computes (a 3x3 convolution is not a 1x1 one), so the automatic
# perturbation leaves them alone. A task that wants them changed declares `GENERALIZE = {...}`.
HYPERPARAMETER_FRAGMENTS = ("kernel", "stride", "pad", "dilation", "group", "axis", "head")


def is_batch_name(name):
    """Batch-like names shrink more than other sizes: a kernel that hard-codes its grid to the
    batch shows at a much smaller one."""
    low = name.lower()
    return low == "bs" or "batch" in low


def referenced_globals(module):
    """Names read by get_inputs and get_init_inputs, their nested code (comprehensions,
    lambdas) and the task's own functions they call."""
    import types

    names, seen = set(), set()
    todo = [fn.__code__ for fn in (module.get_inputs, module.get_init_inputs) if hasattr(fn, "__code__")]
    while todo:
        code = todo.pop()
        if code in seen:
            continue
        seen.add(code)
        for name in code.co_names:
            names.add(name)
            value = module.__dict__.get(name)
            if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
                todo.append(value.__code__)
        todo.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return names


def auto_perturbation(module):
    """{name: (value, perturbed)} for every module-level int n >= 2 that the input functions
    read, skipping hyperparameters: batch-like names become the largest odd number <= n // 2,
    other sizes become odd and smaller (n - 1 if n is even, else n - 2). Every value shrinks, so
    the trial never needs more memory than the task as loaded; equal constants get distinct
    values (the next odd number down) where they can, so a kernel that assumes M == K shows."""
    read = referenced_globals(module)
    changes, used = {}, set()
    for name, value in list(vars(module).items()):
        if name not in read or type(value) is not int or value < 2:
            continue
        if any(fragment in name.lower() for fragment in HYPERPARAMETER_FRAGMENTS):
            continue
        if is_batch_name(name):
            half = value // 2
            new = half if half % 2 else max(half - 1, 1)
        else:
            new = value - 1 if value % 2 == 0 else value - 2
        while new in used and new > 2:
            new -= 2
        used.add(new)
        changes[name] = (value, new)
    return changes


def explicit_perturbation(module, declared):
    """The task's own `GENERALIZE = {name: value}`, applied as written on top of the size
    profile in use (so its values must suit every profile: smaller than all of them is safe)."""
    changes = {}
    for name, new in declared.items():
        old = getattr(module, name, None)
        if type(old) is not int or type(new) is not int:
            raise ValueError(
                f"GENERALIZE sets {name!r} to {new!r}, but only module-level int constants can be "
                f"changed (the task has {name} = {old!r})"
            )
        if new != old:
            changes[name] = (old, new)
    return changes


def input_shapes(torch, module):
    """What get_inputs and get_init_inputs return, as shapes (tensors on the meta device, so
    nothing is allocated); None when they cannot run there."""

    def describe(value):
        return ("tensor", tuple(value.shape), str(value.dtype)) if isinstance(value, torch.Tensor) else repr(value)

    try:
        with torch.device("meta"):
            return [describe(x) for x in module.get_inputs()], [describe(x) for x in module.get_init_inputs()]
    except Exception:
        return None


def warm_meta(torch):
    """The meta device's first use imports about 490 modules (0.5 CPU-s on this machine's CPU),
    and its first arithmetic with a Python number 320 more (torch._dynamo among them, 0.44 s);
    the zygote pays both once for every referee it forks (`trial_sizes`)."""
    with torch.device("meta"):
        x = torch.randn(2, 2)
        (x @ x).softmax(1) * 2 - 1


def failure(exc, _msg):
    """A referee failure is the judge's (or the task's), never the candidate's."""
    return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": "".join(traceback.format_exception(exc))}


def main():
    # Not dumpable: a process without CAP_SYS_PTRACE (the candidate drops it) can neither trace
    # this one nor read its memory through /proc, where the expected outputs live.
    import ctypes

    PR_SET_DUMPABLE = 4
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    chan, torch, device = common.start("the referee")
    referee = Referee(torch, chan)
    handlers = {
        "init": referee.init,
        "prepare": referee.prepare,
        "check": referee.check,
        "time_reference": referee.time_reference,
        "generalize_plan": referee.generalize_plan,
        "generalize": referee.generalize,
        "prepare_generalized": referee.prepare_generalized,
        "measure_precision": referee.measure_precision,
    }
    # Whatever the judge asks, work begun on a thread is over first (`await_precision` is how
    # it asks for only that).
    handlers = {op: settled(referee, handler) for op, handler in handlers.items()}
    handlers["start_precision"] = referee.start_precision
    handlers["await_precision"] = referee.await_precision

    def warm(_msg):
        warm_up(torch, device)
        return {}

    handlers["warm_up"] = warm
    trace = os.environ.get(MEMORY_TRACE_ENV)
    if trace:
        handlers = {op: traced(referee, op, handler, trace) for op, handler in handlers.items()}
    common.serve(chan, handlers, failure, "referee")


MEMORY_TRACE_ENV = "CRUCIBLE_REFEREE_MEMORY_TRACE"


def live_tensor_bytes(torch, floor=0):
    """The bytes of every tensor storage of `floor` bytes or more that Python holds now (on the
    CPU, where torch keeps no allocator statistics)."""
    gc.collect()
    storages = {}
    for obj in gc.get_objects():
        # `type`, not `isinstance`: the latter reads `__class__`, on which deprecated objects warn.
        if issubclass(type(obj), torch.Tensor):
            storage = obj.untyped_storage()
            if storage.nbytes() >= floor:
                storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def memory_held(referee):
    """What this referee and its device hold now, in bytes: on a GPU torch's allocated and
    reserved memory (every pool), the reserve of the pool the candidate maps over CUDA IPC, and
    the device's free and total memory (every process's use); on the CPU the tensors alive."""
    torch = referee.torch
    device = getattr(referee, "device", "cpu")
    if not device.startswith("cuda"):
        return {"live_tensor_bytes": live_tensor_bytes(torch)}
    free, total = torch.cuda.mem_get_info()
    held = {
        "allocated": torch.cuda.memory_allocated(),
        "reserved": torch.cuda.memory_reserved(),
        "device_free": free,
        "device_total": total,
    }
    if referee.share_pool is not None:
        held["share_pool_reserved"] = sum(segment["total_size"] for segment in referee.share_pool.snapshot())
    return held


def traced(referee, op, handler, path):
    """`handler`, appending a line to `path` after each request: the request, the seconds it
    took to handle (not counting the trace's own reading), and `memory_held` once it was handled
    (whether or not it failed)."""

    def handle(msg):
        began = time.perf_counter()
        try:
            return handler(msg)
        finally:
            seconds = time.perf_counter() - began
            # A diagnostic: never the request's failure.
            try:
                line = {
                    "at": time.time(),  # to line up with samples of every process's use
                    "pid": os.getpid(),
                    "op": op,
                    "trial": msg.get("trial"),
                    "seconds": seconds,
                    **memory_held(referee),
                }
                with open(path, "a") as trace:
                    trace.write(json.dumps(line) + "\n")
            except Exception as exc:
                print(f"the memory trace failed: {type(exc).__name__}: {exc}", file=sys.stderr)

    return handle


def settled(referee, handler):
    def handle(msg):
        referee.settle()
        return handler(msg)

    return handle


if __name__ == "__main__":
    sys.exit(main())
