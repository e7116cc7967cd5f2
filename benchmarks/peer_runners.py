"""Workers of benchmarks/peers.py: decode prompts with one runtime in a fresh process, print JSON.

Each measurement runs in its own process so that no runtime's thread pool or allocator state
leaks into another's numbers. A worker reads a JSON job on argv (runtime, model path, prompts
as token ids, new tokens, threads, repeats), warms up on the first prompt, then decodes every
prompt greedily `repeats` times and prints {"seconds": [...], "outputs": [[ids], ...]}.

    python benchmarks/peer_runners.py '{"runtime": "genai", "model": DIR, ...}'

The optimum worker runs under another Python (optimum-onnx pins transformers < 4.58, so it lives
in its own virtual environment); it needs only this file, numpy and optimum there.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

Decode = Callable[[list[int]], list[int]]


def genai_decoder(job: dict[str, Any]) -> Decode:
    import numpy as np
    import onnxruntime_genai as og

    config = og.Config(job["model"])
    config.clear_providers()
    model = og.Model(config)
    new = int(job["new_tokens"])

    def decode(prompt: list[int]) -> list[int]:
        params = og.GeneratorParams(model)
        # min_length = max_length: every runtime produces exactly `new` tokens (no early EOS)
        params.set_search_options(max_length=len(prompt) + new, min_length=len(prompt) + new, do_sample=False)
        generator = og.Generator(model, params)
        generator.append_tokens(np.array([prompt], np.int32))
        out: list[int] = []
        while not generator.is_done() and len(out) < new:
            generator.generate_next_token()
            out.append(int(generator.get_next_tokens()[0]))
        return out

    return decode


def optimum_decoder(job: dict[str, Any]) -> Decode:
    import onnxruntime as ort
    import torch
    from optimum.onnxruntime import ORTModelForCausalLM

    options = ort.SessionOptions()
    options.intra_op_num_threads = int(job["threads"])
    options.inter_op_num_threads = 1
    model = ORTModelForCausalLM.from_pretrained(job["model"], session_options=options, use_io_binding=False)
    new = int(job["new_tokens"])

    def decode(prompt: list[int]) -> list[int]:
        ids = torch.tensor([prompt])
        out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False)
        return [int(t) for t in out[0, len(prompt):]]

    return decode


def specdec_decoder(job: dict[str, Any]) -> Decode:
    """Settings as `specdec generate` resolves them: the bundle's plan for this machine, its requirements."""
    from specdec.pipeline.bundle.store import Bundle
    from specdec.pipeline.generate.stage import GenerateConfig, Generator, generate_settings
    from specdec.pipeline.settings.decode_options import DecodeOptions
    from specdec.pipeline.settings.profiles import load_device

    threads = int(job["threads"])
    bundle = Bundle.load(job["model"])
    engine = Generator(bundle, threads=threads).engine
    engine.eos = set()  # like the peers' min_length: exactly `new` tokens per prompt
    request = GenerateConfig(threads=threads, decode=DecodeOptions(max_new_tokens=int(job["new_tokens"]),
                                                                   **job.get("decode", {})))
    config = generate_settings(request, bundle, load_device("local-cpu"), None).config

    def decode(prompt: list[int]) -> list[int]:
        return engine.generate(prompt, config).output_ids

    return decode


DECODERS: dict[str, Callable[[dict[str, Any]], Decode]] = {
    "genai": genai_decoder, "optimum": optimum_decoder, "specdec": specdec_decoder,
}


def run(job: dict[str, Any]) -> dict[str, Any]:
    decode = DECODERS[job["runtime"]](job)
    prompts: list[list[int]] = job["prompts"]
    decode(prompts[0])  # warm-up: session creation and first-call allocations stay out of the numbers
    seconds: list[float] = []
    outputs: list[list[int]] = []
    for _ in range(int(job.get("repeats", 1))):
        start = time.perf_counter()
        outputs = [decode(prompt) for prompt in prompts]
        seconds.append(time.perf_counter() - start)
    return {"seconds": seconds, "outputs": outputs}


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))))
