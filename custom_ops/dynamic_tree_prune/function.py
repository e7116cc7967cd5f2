"""DynamicTreePrune as an ONNX function: standard opset-18 ops only, so stock onnxruntime runs it.

Mirrors `reference.py` step for step (float32, log space). `max_k` is a function attribute:
it fixes the output width, so it cannot be a per-round input.
"""

from __future__ import annotations

import onnx
from onnxscript import FLOAT, INT64, script
from onnxscript import opset18 as op
from onnxscript.values import Opset

from specdec.custom_ops import DOMAIN, VERSION

custom = Opset(DOMAIN, VERSION)

_INT64 = 7


@script(custom)
def DynamicTreePrune(
    logits: FLOAT["N", "V"],
    temperature: FLOAT,
    entropy_low: FLOAT,
    entropy_high: FLOAT,
    beta_base: FLOAT,
    rho_min: FLOAT,
    rho_max: FLOAT,
    max_k: int,
) -> tuple[FLOAT["N", "K"], FLOAT["N", "K"], INT64["N"], FLOAT["N"]]:
    big = op.Constant(value_float=3.4028234663852886e38)
    zero = op.Constant(value_float=0.0)
    one = op.Constant(value_float=1.0)
    neg_inf = op.Constant(value_float=float("-inf"))
    last = op.Constant(value_ints=[-1])
    # tempered log-softmax; +inf clamped, an all -inf row becomes uniform
    t = op.Max(temperature, op.Constant(value_float=1e-6))
    scaled = op.Min(op.Div(op.Min(logits, big), t), big)
    row_max = op.ReduceMax(scaled, last, keepdims=1)
    dead = op.IsInf(row_max, detect_negative=1, detect_positive=0)
    shifted = op.Sub(op.Where(dead, zero, scaled), op.Where(dead, zero, row_max))
    lse = op.Log(op.ReduceSum(op.Exp(shifted), last, keepdims=1))
    logp = op.Sub(shifted, lse)
    # entropy and the prune ratio of the articles' controller
    terms = op.Where(op.IsInf(logp), zero, op.Mul(op.Exp(logp), logp))
    entropy = op.Neg(op.ReduceSum(terms, last, keepdims=0))
    span = op.Max(op.Sub(entropy_high, entropy_low), op.Constant(value_float=1e-6))
    alpha = op.Clip(op.Div(op.Sub(entropy, entropy_low), span), zero, one)
    prune = op.Clip(op.Mul(alpha, beta_base), rho_min, rho_max)
    # the fewest top tokens whose mass reaches 1 - prune, at least 1, at most max_k
    vocab = op.Slice(op.Shape(logits), op.Constant(value_ints=[1]), op.Constant(value_ints=[2]))
    cap = op.Reshape(op.Constant(value_int=max_k), op.Constant(value_ints=[1]))
    width = op.Min(cap, vocab)
    top_logp, top_ids = op.TopK(logp, width, axis=-1, largest=1, sorted=1)
    mass = op.CumSum(op.Exp(top_logp), op.Constant(value_int=1))
    head = op.Slice(mass, op.Constant(value_ints=[0]), op.Sub(width, op.Constant(value_ints=[1])),
                    op.Constant(value_ints=[1]))
    need = op.Unsqueeze(op.Sub(one, prune), last)
    keep = op.Add(op.ReduceSum(op.Cast(op.Less(head, need), to=_INT64), last, keepdims=0),
                  op.Constant(value_int=1))
    slots = op.Unsqueeze(op.Range(op.Constant(value_int=0), op.Squeeze(width), op.Constant(value_int=1)),
                         op.Constant(value_ints=[0]))
    kept = op.Less(slots, op.Unsqueeze(keep, last))
    masked = op.Where(kept, top_logp, neg_inf)
    peak = op.Slice(top_logp, op.Constant(value_ints=[0]), op.Constant(value_ints=[1]), op.Constant(value_ints=[1]))
    kept_lse = op.Add(peak, op.Log(op.ReduceSum(op.Exp(op.Sub(masked, peak)), last, keepdims=1)))
    cand_logprob = op.Where(kept, op.Sub(masked, kept_lse), neg_inf)
    cand_ids = op.Where(kept, top_ids, op.Constant(value_int=-1))
    # pad to max_k columns when the vocabulary is smaller than max_k
    pad = op.Concat(op.Constant(value_ints=[0, 0, 0]), op.Sub(cap, width), axis=0)
    cand_ids_out = op.Pad(cand_ids, pad, op.Constant(value_int=-1))
    cand_logprob_out = op.Pad(cand_logprob, pad, neg_inf)
    return cand_ids_out, cand_logprob_out, keep, entropy


def function_protos() -> list[onnx.FunctionProto]:
    """The op's FunctionProto, model-local in domain com.endpoint.ai."""
    return [DynamicTreePrune.to_function_proto()]
