"""The surgery passes as rewrite rules, on graphs written as ONNX text."""

from __future__ import annotations

import onnx
import pytest

from specdec.pipeline.passes import prune_pass, verify_pass

CONTRACT_GRAPH = """
<ir_version: 8, opset_import: ["" : 18]>
contract (int64[1, q] input_ids, float[1, q, 5] embed) => (float[1, q, 5] logits) {
    logits = Identity(embed)
}
"""

NO_LOGITS = """
<ir_version: 8, opset_import: ["" : 18]>
other (int64[1, q] input_ids, float[1, q, 5] x) => (float[1, q, 5] scores) {
    scores = Identity(x)
}
"""

FLAT_LOGITS = """
<ir_version: 8, opset_import: ["" : 18]>
flat (int64[1, q] input_ids, float[q, 5] x) => (float[q, 5] logits) {
    logits = Identity(x)
}
"""


def parse(text: str) -> onnx.ModelProto:
    return onnx.parser.parse_model(text)


@pytest.mark.parametrize("rule", [prune_pass, verify_pass])
def test_contract_graph_qualifies_and_checks(rule) -> None:  # type: ignore[no-untyped-def]
    model = parse(CONTRACT_GRAPH)
    assert rule.check(model) is None
    record = rule.apply(model, max_k=4) if rule is prune_pass else rule.apply(model)
    onnx.checker.check_model(model, full_check=True)
    assert [n.op_type for n in model.graph.node if n.domain == "com.endpoint.ai"] == [record.op]
    assert {f.name for f in model.functions} >= {record.op}
    assert set(record.outputs) <= {o.name for o in model.graph.output}
    assert rule.check(model) is not None and "already contains" in rule.check(model)


@pytest.mark.parametrize("rule", [prune_pass, verify_pass])
def test_graph_without_logits_does_not_qualify(rule) -> None:  # type: ignore[no-untyped-def]
    assert rule.check(parse(NO_LOGITS)) == "it has no 'logits' output"
    assert "rank 2" in rule.check(parse(FLAT_LOGITS))


def test_prune_pass_on_a_graph_that_already_uses_the_input_names() -> None:
    text = CONTRACT_GRAPH.replace("float[1, q, 5] embed)", "float[1, q, 5] embed, float temperature)")
    assert "already has inputs named ['temperature']" in prune_pass.check(parse(text))
