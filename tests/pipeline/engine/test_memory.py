"""engine/memory.py: the decoding process reads its own peak RSS and can reset it."""

from __future__ import annotations

from specdec.pipeline.engine import memory


def test_peak_rss_grows_with_an_allocation_and_resets() -> None:
    assert (memory.peak_rss_kb() or 0) > 0
    reset = memory.reset_peak()  # a long test process may have peaked far above its RSS already
    before = memory.rss_kb() if reset else memory.peak_rss_kb()
    assert before is not None and before > 0
    block = bytearray(64 * 2**20)
    block[:: 4096] = b"x" * len(block[:: 4096])  # touch every page: resident, not just reserved
    peak = memory.peak_rss_kb()
    # without a reset the peak is the process's historic one: it need not grow by the block
    assert peak is not None and peak >= before + (60 * 1024 if reset else 0)
    del block
    if memory.reset_peak():  # Linux >= 4.0: the peak falls back to the current RSS
        after = memory.peak_rss_kb()
        current = memory.rss_kb()
        assert after is not None and current is not None and after < peak and after <= current + 1024


def test_missing_proc_falls_back_to_getrusage(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(memory, "STATUS", tmp_path / "absent")
    monkeypatch.setattr(memory, "CLEAR_REFS", tmp_path / "no" / "clear_refs")
    assert (memory.peak_rss_kb() or 0) > 0
    assert memory.rss_kb() is None and memory.reset_peak() is False


def test_kv_bytes_per_token() -> None:
    assert memory.kv_bytes_per_token(16, 8, 64, 4) == 2 * 16 * 8 * 64 * 4  # Llama-3.2-1B: 64 KiB a token
