"""feature_loss.head_loss: the chunked loss and its gradient equal autograd's over the full logits."""

from __future__ import annotations

import pytest
import torch

from specdec.pipeline.draft import feature_loss


@pytest.mark.parametrize("kd", [0.0, 1.0, 0.5])
def test_the_fused_loss_and_gradient_equal_autograd(kd: float, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(feature_loss, "CHUNK", 7)  # several chunks and a short last one
    generator = torch.Generator().manual_seed(0)
    rows, hidden, vocab = 20, 16, 50
    normed = torch.randn(rows, hidden, generator=generator, requires_grad=True)
    teacher_in = torch.randn(rows, hidden, generator=generator)
    head = torch.randn(vocab, hidden, generator=generator)
    labels = torch.randint(-1, vocab, (rows,), generator=generator)
    weights = torch.rand(rows, generator=generator)
    loss, stats = feature_loss.head_loss(normed, teacher_in, head, labels, weights, kd=kd)
    loss.backward()
    fused_grad = normed.grad.clone()  # type: ignore[union-attr]
    normed.grad = None
    logp = (normed @ head.T).log_softmax(-1)
    inside = labels >= 0
    reference = -(logp.gather(-1, labels.clamp(min=0)[:, None])[:, 0] * inside * weights).sum()
    if kd:
        reference = reference - kd * ((teacher_in @ head.T).softmax(-1) * logp).sum(-1).mul(weights).sum()
    reference.backward()
    torch.testing.assert_close(loss, reference.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fused_grad, normed.grad, rtol=1e-5, atol=1e-6)
    ce = -(logp.gather(-1, labels.clamp(min=0)[:, None])[:, 0] * inside * weights).sum() / weights.sum()
    assert stats.ce == pytest.approx(float(ce.detach()), rel=1e-5)
