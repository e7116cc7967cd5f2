"""The bench runner that executes on the device: `python -m specdec.pipeline.engine.device_main RUN.json`.

Torch-free like the rest of the runtime. It decodes the same prompts plainly and speculatively
in one process (warm-up first, then alternating which mode goes first per prompt) and appends
one JSON event per line to `events.jsonl` as it goes, so a host that loses the device still
has every round up to that moment. Timestamps are the device's epoch nanoseconds, the clock
the sensor sampler uses too.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from specdec.pipeline.engine.bundle_info import read_bundle
from specdec.pipeline.engine.controllers import build_chain
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.graph import SessionOptions
from specdec.pipeline.engine.memory import kv_bytes_per_token, peak_rss_kb, reset_peak, rss_kb
from specdec.pipeline.engine.static import StaticRunner
from specdec.pipeline.engine.stats import Reply
from specdec.pipeline.engine.tune.measure import apply_choice, device_plan, kv_policy_of, run_request
from specdec.pipeline.records.codec import from_dict, to_dict
from specdec.pipeline.records.results import RunSpec

EVENTS = "events.jsonl"
MODES = ("plain", "speculative")


class Clock:
    """perf_counter_ns (monotonic, precise) mapped onto the epoch (comparable with the sensors)."""

    def __init__(self) -> None:
        self.epoch0 = time.time_ns()
        self.perf0 = time.perf_counter_ns()

    def epoch(self, perf_ns: int) -> int:
        return self.epoch0 + (perf_ns - self.perf0)

    def now(self) -> int:
        return self.epoch(time.perf_counter_ns())


class EventLog:
    def __init__(self, handle: TextIO, clock: Clock) -> None:
        self.handle = handle
        self.clock = clock

    def write(self, event: dict[str, Any]) -> None:
        self.handle.write(json.dumps(event, separators=(",", ":")) + "\n")
        self.handle.flush()

    def reply(self, mode: str, prompt: int, repeat: int, start_ns: int, reply: Reply,
              memory: dict[str, Any] | None = None) -> None:
        for stats in reply.rounds:
            self.write({
                "type": "round", "mode": mode, "prompt": prompt, "repeat": repeat, "round": stats.index,
                "kind": stats.kind, "tree_size": stats.tree_size, "tree_depth": stats.tree_depth,
                "accepted_len": stats.accepted_len, "draft_calls": stats.draft_calls, "bytes_out": stats.bytes_out,
                "wall_ns": stats.wall_ns,
                "by_source": {"model": {"proposed": stats.proposed_model, "accepted": stats.accepted_model},
                              "lookup": {"proposed": stats.proposed_lookup, "accepted": stats.accepted_lookup}},
                "slices": [[s.stage, self.clock.epoch(s.start_ns), s.duration_ns] for s in stats.slices],
                "events": stats.events,
            })
        self.write({
            "type": "reply", "mode": mode, "prompt": prompt, "repeat": repeat, "start_ns": start_ns,
            "end_ns": self.clock.now(), "ttft_ns": reply.ttft_ns, "total_ns": reply.total_ns,
            "prefill_ns": reply.prefill_ns, "new_tokens": len(reply.output_ids), "output_ids": reply.output_ids,
            "stop_reason": reply.stop_reason, "mean_accepted_len": reply.mean_accepted_len,
            "acceptance_rate": reply.acceptance_rate, **(memory or {}),
        })


def run(spec: RunSpec, workdir: Path, thermal_paths: list[str] | None = None,
        battery: tuple[str, str] | None = None) -> int:
    clock = Clock()
    # one chain for the whole run: heat and the learned beta carry over from reply to reply
    controller = build_chain(spec.controllers, thermal_paths or [], battery)
    engine = Engine(read_bundle(workdir / spec.bundle, spec.weight_format), SessionOptions(threads=spec.threads))
    configs = {mode: dataclasses.replace(spec.decode, speculative=mode == "speculative") for mode in MODES}
    prompts = spec.prompts
    repeats = spec.repeats
    runners = [runner for runner in (engine.target, engine.drafter.runner if engine.drafter else None) if runner]
    per_token = sum(kv_bytes_per_token(r.info.num_layers, r.info.num_kv_heads, r.info.head_dim, r.kv_dtype.itemsize)
                    for r in runners)
    peaks: list[int] = []  # each reply's peak: the run's peak is their maximum once peaks are reset
    with (workdir / EVENTS).open("w") as handle:
        log = EventLog(handle, clock)
        log.write({"type": "start", "epoch_ns": clock.epoch0, "prompts": len(prompts), "repeats": repeats,
                   "max_context": engine.max_context, "python": sys.version.split()[0],
                   "kv_bytes_per_token": per_token, "rss_kb": rss_kb()})
        if spec.tune is not None:  # measure this device and plan the tree before measuring anything else
            tuned = run_request(engine, spec.tune, configs["speculative"],
                                on_step=lambda step: print(f"progress tune {step}", flush=True))
            plan = device_plan(tuned, device=spec.tune.device, threads=spec.threads,
                               exact_layout=configs["speculative"].exact_layout,
                               created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                               kv_policy=kv_policy_of(engine.info))
            plan.weight_format = spec.weight_format  # the costs are this format's
            log.write({"type": "tune", "plan": to_dict(plan)})
            configs["speculative"] = apply_choice(configs["speculative"], tuned.plan.choice,
                                                  frozenset(spec.tune.pinned))
            if controller is not None and not spec.tune.pinned:  # the rounds are the plan's: judge them by it
                controller.follow_plan(plan.plain_step_ms if plan.choice.speculative else None)
            if spec.tune.only:
                log.write({"type": "done", "peak_rss_kb": peak_rss_kb(), "end_ns": clock.now(), "padding": {}})
                return 0

        def decode(mode: str, index: int, repeat: int, measured: bool) -> None:
            peaks.append(peak_rss_kb() or 0)
            reset = reset_peak()  # this reply's own peak, where the kernel lets it be reset
            start = clock.now()
            reply = engine.generate(prompts[index], configs[mode],
                                    controller=controller if mode == "speculative" and measured else None)
            peak = peak_rss_kb()
            peaks.append(peak or 0)
            if measured:
                memory = {"peak_rss_kb": peak, "peak_reset": reset, "rss_kb": rss_kb(),
                          "context_tokens": len(reply.prompt_ids) + len(reply.output_ids),
                          "kv_bytes": sum(r.kv_bytes for r in runners),
                          "kv_live_bytes": sum(r.kv_live_bytes for r in runners)}
                log.reply(mode, index, repeat, start, reply, memory)
            print(f"progress {mode} prompt={index} repeat={repeat} tokens={len(reply.output_ids)}", flush=True)

        warm_start = clock.now()
        for mode in MODES:  # warm-up: first-call allocation and graph loading stay out of the numbers
            decode(mode, 0, -1, measured=False)
        log.write({"type": "phase", "name": "warmup", "start_ns": warm_start, "end_ns": clock.now()})
        measure_start = clock.now()
        for repeat in range(repeats):
            for index in range(len(prompts)):
                order = MODES if (index + repeat) % 2 == 0 else MODES[::-1]  # alternate who goes first
                for mode in order:
                    decode(mode, index, repeat, measured=True)
        log.write({"type": "phase", "name": "measure", "start_ns": measure_start, "end_ns": clock.now()})
        roles = {"target": engine.target, "draft": engine.drafter.runner if engine.drafter else None}
        padding = {role: {"rows_padded": runner.padding_waste, "rows_computed": runner.rows_computed}
                   for role, runner in roles.items()
                   if isinstance(runner, StaticRunner)}  # compiled bundles pad each call up to a bucket
        peak = peak_rss_kb()
        log.write({"type": "done", "peak_rss_kb": max([*peaks, peak]) if peak is not None else None,
                   "end_ns": clock.now(), "padding": padding})
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="device_main", description="specdec bench runner (on the device)")
    parser.add_argument("spec", type=Path, help="run.json written by the host")
    parser.add_argument("--thermal-zone", action="append", default=[], help="thermal zone temp file to watch")
    parser.add_argument("--battery", nargs=2, metavar=("CURRENT_NOW", "VOLTAGE_NOW"), help="battery sysfs files")
    args = parser.parse_args(argv)
    try:
        spec = from_dict(RunSpec, json.loads(args.spec.read_text()))
        return run(spec, args.spec.parent, args.thermal_zone, tuple(args.battery) if args.battery else None)
    except Exception as exc:  # reported to the host through stderr and the exit code
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
