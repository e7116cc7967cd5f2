"""The device session bench and tune share: one profile check, one calibration rule, the fleet's shared parts."""

from __future__ import annotations

import threading
import time
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from specdec.pipeline.devices.local import LocalDevice
from specdec.pipeline.errors import InputError
from specdec.pipeline.inputs.prompts import CALIBRATION_PROMPTS, load_bench_prompts
from specdec.pipeline.inputs.text import TextCodec
from specdec.pipeline.ondevice.session import DeviceTarget, SessionGroup, StoppableDevice, calibration_prompts
from specdec.pipeline.settings.profiles import Transport, load_device


@pytest.fixture(scope="module")
def codec() -> TextCodec:
    return TextCodec(Path(str(resources.files("specdec.pipeline.demo") / "target")))


def _prompts(path: Path, count: int) -> Path:
    path.write_text("".join(f'{{"id": "p{i}", "input_ids": [{i + 1}, {i + 2}]}}\n' for i in range(count)))
    return path


def test_profile_checked_against_the_transport_with_one_fix_text() -> None:
    assert DeviceTarget(Transport.adb).profile_name == "android-generic"
    assert DeviceTarget(Transport.local).load_profile().name == "local-cpu"
    with pytest.raises(InputError) as caught:
        DeviceTarget(Transport.local, "android-generic").load_profile()
    assert caught.value.one_line() == ("profile 'android-generic' is for the adb transport, not local — pass device "
                                       "adb or another profile")


def test_calibration_rule(codec: TextCodec, tmp_path: Path) -> None:
    prompts = _prompts(tmp_path / "prompts.jsonl", 10)
    calib = _prompts(tmp_path / "calib.jsonl", 6)
    measured = load_bench_prompts(prompts, codec, 3)
    # --calib: its first prompts
    assert calibration_prompts(codec, calib=calib, prompts=prompts, measured=measured) == \
        [[i + 1, i + 2] for i in range(CALIBRATION_PROMPTS)]
    # else the last prompts of the file that the run does not measure
    assert calibration_prompts(codec, calib=None, prompts=prompts, measured=measured) == \
        [[i + 1, i + 2] for i in range(10 - CALIBRATION_PROMPTS, 10)]
    # the whole file measured: the measured prompts
    every = load_bench_prompts(prompts, codec, None)
    assert calibration_prompts(codec, calib=None, prompts=prompts, measured=every) == \
        [[i + 1, i + 2] for i in range(CALIBRATION_PROMPTS)]
    # tune measures nothing: the last prompts of the default file, as bench's default run leaves them out
    default = load_bench_prompts(None, codec, None)
    assert calibration_prompts(codec, calib=None, prompts=None, measured=[]) == \
        [p.ids for p in default[-CALIBRATION_PROMPTS:]]


def test_stop_interrupts_one_command_then_lets_the_cleanup_run(tmp_path: Path) -> None:
    stop = threading.Event()
    profile = load_device("local-cpu").model_copy(update={"runtime": load_device("local-cpu").runtime.model_copy(
        update={"remote_dir": str(tmp_path / "remote")})})
    device = StoppableDevice(LocalDevice(profile), stop)
    workdir = device.workdir("run")
    device.mkdir(workdir)
    assert device.run("echo ok", timeout_s=10).stdout.strip() == "ok"
    stop.set()
    with pytest.raises(KeyboardInterrupt):
        device.run("echo no", timeout_s=10)
    device.remove(workdir)  # the cleanup after the interrupt goes through
    assert not Path(workdir).exists()
    assert device.serial == device.inner.serial and device.is_android is False


def test_group_builds_the_portable_runtime_once_per_abi() -> None:
    calls: list[str] = []

    def build(abi: str) -> Any:
        calls.append(abi)
        time.sleep(0.05)  # long enough for every thread to ask while the first build runs
        return abi  # stands in for the archive

    group = SessionGroup(archives=build)
    threads = [threading.Thread(target=group.archive, args=(abi,)) for abi in ["arm64-v8a"] * 4 + ["x86_64"]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(calls) == ["arm64-v8a", "x86_64"]


def test_a_chat_model_calibrates_on_chat_requests_by_default(tmp_path: Path) -> None:
    """With no prompt file, a model with a chat template is tuned on chat requests (rendered with its
    template), not on the tiny demo's raw code prompts."""
    import shutil

    from specdec.pipeline.inputs.chat import has_chat_template
    from specdec.pipeline.inputs.prompts import default_chat_requests

    tokenizer = tmp_path / "tokenizer"
    shutil.copytree(Path(str(resources.files("specdec.pipeline.demo") / "target")), tokenizer,
                    ignore=shutil.ignore_patterns("*.onnx*", "*.safetensors", "*.bin"))
    assert not has_chat_template(tokenizer)
    (tokenizer / "chat_template.jinja").write_text(
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}<assistant>")
    assert has_chat_template(tokenizer)
    chat_codec = TextCodec(tokenizer)
    requests = load_bench_prompts(default_chat_requests(), chat_codec, None, chat=True)
    assert calibration_prompts(chat_codec, calib=None, prompts=None, measured=[]) == \
        [p.ids for p in requests[-CALIBRATION_PROMPTS:]]
    assert chat_codec.decode(requests[-1].ids).startswith("<user>")
