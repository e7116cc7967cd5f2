"""Chrome trace-event JSON of a bench run (opens in ui.perfetto.dev and chrome://tracing).

One process per decoding mode; each stage of docs/design.md §6 (and prompt lookup's `Lookup`) gets its
own thread track with complete ("X") slices; counters ("C") carry power, temperature, accepted
length and the accepted nodes per drafting source; controller decisions and thermal transitions
are instant ("i") events with their reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specdec.pipeline.devices.sensor_log import SensorLog
from specdec.pipeline.engine.stats import ACCEPT, STAGES, VERIFY

_PIDS = {"plain": 1, "speculative": 2}
_COUNTER_PID = 3


def _us(epoch_ns: int, origin_ns: int) -> float:
    return (epoch_ns - origin_ns) / 1e3


IN_GRAPH_NOTE = (f"verification ran inside the target graph (BlockSparseVerify): its time is part of "
                 f"{VERIFY}, so the {ACCEPT} track is empty")


def verified_in_graph(events: list[dict[str, Any]]) -> bool:
    """Whether speculative rounds verified inside the target graph: they ran, and none timed a host accept step."""
    rounds = [e for e in events if e.get("type") == "round" and e.get("kind") == "speculative" and e["slices"]]
    return bool(rounds) and not any(stage == ACCEPT for e in rounds for stage, _, _ in e["slices"])


def build_trace(events: list[dict[str, Any]], sensors: SensorLog | None,
                instants: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    start = next((e["epoch_ns"] for e in events if e.get("type") == "start"), None)
    origin = int(start if start is not None else min((s[1] for e in events if e.get("type") == "round"
                                                      for s in e["slices"]), default=0))
    in_graph = verified_in_graph(events)
    trace: list[dict[str, Any]] = []
    for mode, pid in _PIDS.items():
        trace.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"{mode} decoding"}})
        for tid, stage in enumerate(STAGES, start=1):
            name = f"{stage} (in {VERIFY}: verified in the graph)" if in_graph and stage == ACCEPT else stage
            trace.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
    trace.append({"ph": "M", "name": "process_name", "pid": _COUNTER_PID, "args": {"name": "device"}})
    tids = {stage: tid for tid, stage in enumerate(STAGES, start=1)}
    for event in events:
        if event.get("type") == "round":
            pid = _PIDS[event["mode"]]
            for stage, begin, duration in event["slices"]:
                trace.append({"ph": "X", "name": stage, "cat": event["kind"], "pid": pid, "tid": tids[stage],
                              "ts": _us(begin, origin), "dur": duration / 1e3,
                              "args": {"prompt": event["prompt"], "round": event["round"],
                                       "tree_size": event["tree_size"]}})
            if event["kind"] == "speculative" and event["slices"]:
                end = max(b + d for _, b, d in event["slices"])
                trace.append({"ph": "C", "name": "accepted_len", "pid": _COUNTER_PID, "ts": _us(end, origin),
                              "args": {"accepted_len": event["accepted_len"]}})
                if "by_source" in event:
                    trace.append({"ph": "C", "name": "accepted_by_source", "pid": _COUNTER_PID,
                                  "ts": _us(end, origin),
                                  "args": {name: c["accepted"] for name, c in event["by_source"].items()}})
            for decision in event.get("events", []):
                trace.append({"ph": "i", "s": "g", "name": decision.get("controller", "controller"),
                              "pid": pid, "tid": tids["Prune_Controller"], "ts": _us(int(decision["ts_ns"]), origin)
                              if "ts_ns" in decision else _us(event["slices"][0][1], origin) if event["slices"] else 0,
                              "args": decision})
        elif event.get("type") == "reply":
            trace.append({"ph": "X", "name": f"reply p{event['prompt']}", "pid": _PIDS[event["mode"]], "tid": 0,
                          "ts": _us(event["start_ns"], origin), "dur": (event["end_ns"] - event["start_ns"]) / 1e3,
                          "args": {"tokens": event["new_tokens"], "ttft_ms": event["ttft_ns"] / 1e6}})
    if sensors is not None and sensors.start_epoch_s is not None:
        for sample in sensors.samples:
            ts = _us(int((sensors.start_epoch_s + sample.t_s) * 1e9), origin)
            power = sample.power_mw if sample.power_mw is not None else sample.rapl_power_mw
            if power is not None:
                trace.append({"ph": "C", "name": "power_mw", "pid": _COUNTER_PID, "ts": ts, "args": {"mW": power}})
            if sample.temps_c:
                trace.append({"ph": "C", "name": "temperature_c", "pid": _COUNTER_PID, "ts": ts,
                              "args": dict(sample.temps_c)})
    for instant in instants or []:
        trace.append({"ph": "i", "s": "g", "name": instant["name"], "pid": _COUNTER_PID,
                      "ts": _us(int(instant["ts_ns"]), origin), "args": instant})
    other: dict[str, Any] = {"origin_epoch_ns": origin}
    if in_graph:
        other["verification"] = IN_GRAPH_NOTE
    return {"traceEvents": trace, "displayTimeUnit": "ms", "otherData": other}


def write_trace(path: Path, trace: dict[str, Any]) -> None:
    path.write_text(json.dumps(trace))
