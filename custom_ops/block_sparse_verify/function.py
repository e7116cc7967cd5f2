"""BlockSparseVerify as an ONNX function: standard opset-18 ops only, so stock onnxruntime runs it.

Mirrors `reference.py`: the target's choice at every node (argmax, or an inverse-CDF draw after
temperature, top-k and top-p), then a `Loop` that walks from the root into the lowest-index
child whose token is the choice. Only the accepted path, its length and the next token leave
the graph; the [n, vocab] logits stay inside. `rrs` needs the draft's distributions and runs on
the host (see the module docstring of `reference.py`).
"""

from __future__ import annotations

import onnx
from onnxscript import DOUBLE, FLOAT, INT64, script
from onnxscript import opset18 as op
from onnxscript.values import Opset

from specdec.custom_ops import DOMAIN, VERSION

custom = Opset(DOMAIN, VERSION)

_INT64 = 7
_DOUBLE = 11


@script(custom)
def SafeSoftmax(scaled: FLOAT["N", "V"]) -> FLOAT["N", "V"]:
    """Row softmax that treats an all -inf row as uniform (numerics.softmax)."""
    zero = op.Constant(value_float=0.0)
    last = op.Constant(value_ints=[-1])
    row_max = op.ReduceMax(scaled, last, keepdims=1)
    dead = op.IsInf(row_max, detect_negative=1, detect_positive=0)
    shifted = op.Sub(op.Where(dead, zero, scaled), op.Where(dead, zero, row_max))
    lse = op.Log(op.ReduceSum(op.Exp(shifted), last, keepdims=1))
    return op.Exp(op.Sub(shifted, lse))


@script(custom)
def TargetSample(
    logits: FLOAT["N", "V"], uniforms: DOUBLE["N", "R"], temperature: FLOAT, top_k: INT64, top_p: FLOAT
) -> INT64["N"]:
    """Inverse-CDF draw per row after temperature, top-k (ties kept) and top-p (HF semantics)."""
    big = op.Constant(value_float=3.4028234663852886e38)
    neg_inf = op.Constant(value_float=float("-inf"))
    one_i = op.Constant(value_ints=[1])
    last = op.Constant(value_ints=[-1])
    t = op.Max(temperature, op.Constant(value_float=1e-6))
    x = op.Min(op.Div(op.Min(logits, big), t), big)
    vocab = op.Slice(op.Shape(logits), one_i, op.Constant(value_ints=[2]))
    # top-k: keep every logit >= the k-th largest
    k = op.Reshape(top_k, one_i)
    use_k = op.And(op.Greater(k, op.Constant(value_ints=[0])), op.Less(k, vocab))
    top_vals, _ = op.TopK(x, op.Where(use_k, k, vocab), axis=-1, largest=1, sorted=1)
    kth = op.Slice(top_vals, last, op.Constant(value_ints=[2**62]), one_i)
    x = op.Where(op.Less(x, kth), neg_inf, x)
    # top-p: in ascending order drop what stays <= 1 - top_p, never the largest
    asc_vals, asc_ids = op.TopK(x, vocab, axis=-1, largest=0, sorted=1)
    cum = op.CumSum(SafeSoftmax(asc_vals), op.Constant(value_int=1))
    drop = op.LessOrEqual(cum, op.Sub(op.Constant(value_float=1.0), top_p))
    columns = op.Range(op.Constant(value_int=0), op.Squeeze(vocab), op.Constant(value_int=1))
    not_last = op.Less(columns, op.Sub(op.Squeeze(vocab), op.Constant(value_int=1)))
    drop = op.And(drop, not_last)
    removed = op.ScatterElements(op.Cast(op.Mul(asc_ids, op.Constant(value_int=0)), to=9), asc_ids, drop, axis=1)
    probs = SafeSoftmax(op.Where(removed, neg_inf, x))
    # inverse CDF in float64: count of cdf entries <= u * total
    cdf = op.CumSum(op.Cast(probs, to=_DOUBLE), op.Constant(value_int=1))
    total = op.Slice(cdf, last, op.Constant(value_ints=[2**62]), one_i)
    u = op.Slice(uniforms, op.Constant(value_ints=[0]), one_i, one_i)
    index = op.ReduceSum(op.Cast(op.LessOrEqual(cdf, op.Mul(u, total)), to=_INT64), last, keepdims=0)
    last_with_mass = op.ReduceMax(op.Where(op.Greater(probs, op.Constant(value_float=0.0)), columns,
                                           op.Constant(value_int=-1)), last, keepdims=0)
    return op.Where(op.GreaterOrEqual(index, op.Squeeze(vocab)), last_with_mass, index)


@script(custom)
def BlockSparseVerify(
    logits: FLOAT["N", "V"],
    tree_tokens: INT64["N"],
    tree_parent: INT64["N"],
    tree_depth: INT64["N"],
    uniforms: DOUBLE["N", "R"],
    temperature: FLOAT,
    mode: INT64,
    top_k: INT64,
    top_p: FLOAT,
) -> tuple[INT64["N"], INT64, INT64]:
    greedy = op.Or(op.Equal(mode, op.Constant(value_int=0)),
                   op.LessOrEqual(temperature, op.Constant(value_float=0.0)))
    if greedy:
        choice = op.ArgMax(logits, axis=-1, keepdims=0, select_last_index=0)
    else:
        choice = TargetSample(logits, uniforms, temperature, top_k, top_p)
    zero = op.Constant(value_ints=[0])
    accepted = op.ScatterElements(op.Expand(op.Constant(value_int=-1), op.Shape(tree_tokens)), zero, zero, axis=0)
    cur = op.Constant(value_int=0)
    length = op.Constant(value_int=1)
    steps = op.ReduceMax(tree_depth, keepdims=0)
    for _ in range(steps):
        match = op.And(op.Equal(tree_parent, cur), op.Equal(tree_tokens, op.Gather(choice, cur)))
        as_int = op.Cast(match, to=_INT64)
        found = op.ReduceMax(as_int, keepdims=0)
        child = op.ArgMax(as_int, axis=0, keepdims=0, select_last_index=0)
        moved = op.Greater(found, op.Constant(value_int=0))
        value = op.Where(moved, child, op.Constant(value_int=-1))
        accepted = op.ScatterElements(accepted, op.Unsqueeze(length, zero), op.Unsqueeze(value, zero), axis=0)
        cur = op.Where(moved, child, cur)
        length = op.Add(length, found)
    next_token = op.Gather(choice, cur)
    return accepted, length, next_token


def function_protos() -> list[onnx.FunctionProto]:
    """The op and the helper functions it calls, all model-local in domain com.endpoint.ai."""
    protos = [f.to_function_proto() for f in (BlockSparseVerify, TargetSample, SafeSoftmax)]
    for proto in protos:
        # onnxscript lists only the standard opset; calls to sibling functions need their domain too.
        if not any(o.domain == DOMAIN for o in proto.opset_import):
            proto.opset_import.append(onnx.helper.make_opsetid(DOMAIN, VERSION))
    return protos
