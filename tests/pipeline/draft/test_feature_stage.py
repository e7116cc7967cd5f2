"""`specdec draft --kind feature` end to end on a tiny target: a loadable feature draft with its report,
resume equal to an uninterrupted run, the budget kept, reused answers, and clear errors."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from specdec.pipeline.draft import DraftConfig, feature_data, feature_eval, make_draft
from specdec.pipeline.draft.clock import ClockKind
from specdec.pipeline.draft.config import DraftMethod, RequestSource
from specdec.pipeline.draft.device import DraftDevice
from specdec.pipeline.draft.feature_model import FeatureDraft
from specdec.pipeline.draft.feature_stage import EVAL_DEPTH, prompt_ids, work_dir
from specdec.pipeline.errors import InputError, UnsupportedModelError
from specdec.pipeline.inputs.prompts import load_prompts
from specdec.pipeline.progress import SilentProgress

SMALL: dict[str, Any] = {"kind": DraftMethod.feature, "max_prompts": 8, "answer_tokens": 8, "threads": 1,
                         "vocab_size": 100, "checkpoint_minutes": 1e-9}


@pytest.fixture(scope="module")
def made(target: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("feature") / "draft"
    make_draft(DraftConfig(target=str(target), output=out, steps=4, **SMALL))
    return out


def test_the_draft_loads_on_the_targets_embedding_and_reports_itself(target: Path, made: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32)
    draft = FeatureDraft.load(made, model.get_input_embeddings().weight)
    assert draft.config.feature_layer == model.config.num_hidden_layers - 1 and draft.config.input_norms
    assert draft.vocab.numel() == 100 and 0 in draft.vocab.tolist()  # EOS always proposable
    assert torch.equal(draft.lm_head.weight, model.get_output_embeddings().weight[draft.vocab])  # frozen head
    assert torch.equal(draft.model.norm.weight, model.model.norm.weight)
    report = json.loads((made / "draft_report.json").read_text())
    assert report["kind"] == "feature" and report["training"]["steps"] == 4 and report["data"]["rows"] == 8
    assert 0 <= report["quality"]["alpha1"] <= 1 and report["quality"]["positions"] > 0
    assert set(report["quality"]["chain"]) == {"3", "4", "5", "6"}
    assert report["sizes"]["own_params"] == draft.own_parameters()
    assert set(report["files"]) == {p.name for p in made.iterdir()}
    assert not work_dir(made).exists()  # the answers and checkpoint go once the draft is written
    assert report["device"] == "cpu" or torch.cuda.is_available()  # auto: the CPU where torch sees no GPU


class _Interrupt:
    """A Progress whose training task raises KeyboardInterrupt after `at` steps."""

    def __init__(self, at: int) -> None:
        self.at = at

    @contextmanager
    def task(self, description: str, total: int | None = None) -> Iterator[Any]:
        at = self.at if description.startswith("training") else None

        class Task:
            done = 0

            def advance(self, steps: int = 1) -> None:
                self.done += steps
                if at is not None and self.done > at:
                    raise KeyboardInterrupt

            def describe(self, description: str) -> None:
                return None

        yield Task()


def test_resume_gives_the_weights_of_an_uninterrupted_run(target: Path, made: Path, tmp_path: Path) -> None:
    config = DraftConfig(target=str(target), output=tmp_path / "parts", steps=4, **SMALL)
    with pytest.raises(KeyboardInterrupt):
        make_draft(config, progress=_Interrupt(at=2))
    assert (work_dir(config.output) / "train-state.pt").is_file() and not config.output.exists()
    resumed = make_draft(DraftConfig(**{**config.__dict__, "resume": True}))
    ours, theirs = load_file(str(resumed.path / "model.safetensors")), load_file(str(made / "model.safetensors"))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    with pytest.raises(InputError, match="nothing to resume"):
        make_draft(DraftConfig(**{**config.__dict__, "output": tmp_path / "none", "resume": True}))


def test_the_budget_bounds_the_whole_run(target: Path, tmp_path: Path) -> None:
    small = {**SMALL, "max_prompts": None, "checkpoint_minutes": 0}
    result = make_draft(DraftConfig(target=str(target), output=tmp_path / "d", minutes=0.05, clock=ClockKind.cpu,
                                    **small))
    report = result.report
    assert report["budget_minutes"] == 0.05 and report["clock"] == "cpu"
    # data stops at 70 % of the budget, training by its last 4 %; the margin absorbs a loaded machine's
    # loading and evaluation, which are not cut short
    assert report["minutes"] <= 0.05 * 1.5
    assert report["data"]["batches"] >= 1 and report["training"]["steps"] >= 1


def test_answers_kept_in_a_data_directory_are_reused(target: Path, tmp_path: Path) -> None:
    data = tmp_path / "answers"
    first = make_draft(DraftConfig(target=str(target), output=tmp_path / "a", steps=2, data=data, **SMALL))
    stamps = {p.name: p.stat().st_mtime_ns for p in data.glob("shard_*.pt")}
    second = make_draft(DraftConfig(target=str(target), output=tmp_path / "b", steps=3, data=data, **SMALL))
    assert stamps and {p.name: p.stat().st_mtime_ns for p in data.glob("shard_*.pt")} == stamps
    assert second.report["data"]["answer_tokens"] == first.report["data"]["answer_tokens"]
    with pytest.raises(InputError, match="another seed"):
        make_draft(DraftConfig(target=str(target), output=tmp_path / "c", steps=2, data=data, seed=9, **SMALL))
    sidecar = data / "shard_0000.json"
    kept = sidecar.read_text()
    sidecar.write_text(kept[:len(kept) // 2])  # cut mid-write by a full disk, say
    with pytest.raises(InputError, match=r"shard_0000.json' are damaged .*delete '.*shard_0000.pt'"):
        make_draft(DraftConfig(target=str(target), output=tmp_path / "c", steps=2, data=data, **SMALL))
    sidecar.write_text(kept)
    shard = data / "shard_0000.pt"
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(InputError, match=r"shard_0000.pt' are damaged"):
        make_draft(DraftConfig(target=str(target), output=tmp_path / "c", steps=2, data=data, **SMALL))
    assert not (tmp_path / "c").exists()


def test_options_of_the_other_kind_are_refused(target: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="only apply to kind pruned"):
        DraftConfig(target=str(target), output=tmp_path / "d", kind=DraftMethod.feature, ffn=64)
    with pytest.raises(InputError, match="only apply to kind feature"):
        DraftConfig(target=str(target), output=tmp_path / "d", vocab_size=64)
    with pytest.raises(InputError, match="only apply to kind feature"):
        DraftConfig(target=str(target), output=tmp_path / "d", kind=DraftMethod.pruned, torch_device=DraftDevice.cpu)


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees a GPU here")
def test_cuda_without_a_gpu_is_refused_before_loading(target: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="sees no CUDA GPU"):
        make_draft(DraftConfig(target=str(target), output=tmp_path / "d", steps=1, torch_device=DraftDevice.cuda,
                               **SMALL))
    assert not (tmp_path / "d").exists() and not work_dir(tmp_path / "d").exists()


def test_the_cpu_clock_is_refused_on_a_gpu(target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specdec.pipeline.draft import feature_stage

    monkeypatch.setattr(feature_stage.draft_device, "resolve", lambda choice: torch.device("cuda", 0))
    monkeypatch.setattr(feature_stage.draft_device, "describe", lambda device: "cuda:0 (a GPU the test names)")
    with pytest.raises(InputError, match="counts this process's CPU time, not the GPU's"):
        make_draft(DraftConfig(target=str(target), output=tmp_path / "d", steps=1, clock=ClockKind.cpu, **SMALL))
    assert not (tmp_path / "d").exists()


def test_an_unsupported_target_is_refused_before_loading(tmp_path: Path) -> None:
    from support.tiny_models import make_model, make_tokenizer, save

    tokenizer = make_tokenizer()
    gpt2 = save(make_model("gpt2", len(tokenizer)), tokenizer, tmp_path / "gpt2")
    with pytest.raises(UnsupportedModelError, match="cannot train on a gpt2 target"):
        make_draft(DraftConfig(target=str(gpt2), output=tmp_path / "d", steps=1, **SMALL))
    assert not (tmp_path / "d").exists() and not work_dir(tmp_path / "d").exists()


def test_a_feature_draft_from_a_gguf_target(tmp_path: Path) -> None:
    """The target may be a GGUF file (dequantized by transformers' GGUF loader), as for the pruned kind."""
    from gguf import GGMLQuantizationType
    from support.tiny_gguf import write_llama

    path = write_llama(tmp_path / "target.gguf", GGMLQuantizationType.Q8_0)
    out = tmp_path / "draft"
    result = make_draft(DraftConfig(target=str(path), output=out, steps=2, **SMALL))
    assert result.report["kind"] == "feature" and result.report["target"] == str(path)
    target = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=path.name, dtype=torch.float32)
    draft = FeatureDraft.load(out, target.get_input_embeddings().weight)
    assert torch.equal(draft.lm_head.weight, target.get_output_embeddings().weight[draft.vocab])
    assert (out / "tokenizer.json").is_file()


def _prompts_file(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_acceptance_is_also_measured_on_the_users_prompts(target: Path, made: Path, tmp_path: Path) -> None:
    """--eval-prompts: the report's second figure is the evaluator's on the float target's greedy answers
    to the user's prompts, and asking for it leaves the weights as they were."""
    prompts = _prompts_file(tmp_path / "mine.jsonl", [{"text": "hello there"}, {"id": "two", "text": "a b c d"},
                                                      {"input_ids": [5, 6, 7]}])
    result = make_draft(DraftConfig(target=str(target), output=tmp_path / "d", steps=4, eval_prompts=prompts,
                                    **SMALL))
    on_prompts = result.report["quality_eval_prompts"]
    assert on_prompts["file"] == str(prompts) and on_prompts["rows"] == 3 and on_prompts["positions"] > 0
    weights, before = load_file(str(result.path / "model.safetensors")), load_file(str(made / "model.safetensors"))
    assert weights.keys() == before.keys() and all(torch.equal(weights[k], before[k]) for k in before)

    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(target))
    ids = prompt_ids(load_prompts(prompts), tokenizer, model.config.vocab_size, 384)
    assert ids[2] == [5, 6, 7]
    settings = feature_data.DataSettings(max_new=SMALL["answer_tokens"])
    with torch.no_grad():
        rows = feature_data.answer_all(model, tokenizer, ids, settings, progress=SilentProgress(),
                                       feature_layer=model.config.num_hidden_layers - 1, description="answers")
    draft = FeatureDraft.load(result.path, model.get_input_embeddings().weight)
    expected = feature_eval.evaluate(draft, rows, depth=EVAL_DEPTH)
    assert {k: v for k, v in on_prompts.items() if k != "file"} == expected


def test_bad_evaluation_prompts_are_refused(target: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        make_draft(DraftConfig(target=str(target), output=tmp_path / "d", steps=1, eval_prompts=tmp_path / "no.jsonl",
                               **SMALL))
    chat = _prompts_file(tmp_path / "chat.jsonl", [{"messages": [{"role": "user", "content": "hi"}]}])
    with pytest.raises(InputError, match="no chat template"):
        make_draft(DraftConfig(target=str(target), output=tmp_path / "d", steps=1, eval_prompts=chat, **SMALL))
    outside = _prompts_file(tmp_path / "ids.jsonl", [{"input_ids": [1, 10**6]}])
    with pytest.raises(InputError, match="outside the target's vocabulary"):
        make_draft(DraftConfig(target=str(target), output=tmp_path / "d", steps=1, eval_prompts=outside, **SMALL))
    with pytest.raises(InputError, match="only apply to kind feature"):
        DraftConfig(target=str(target), output=tmp_path / "d", kind=DraftMethod.pruned, eval_prompts=chat)
    assert not (tmp_path / "d").exists() and not work_dir(tmp_path / "d").exists()


def _chat_target(target: Path, tmp_path: Path) -> Path:
    """A copy of the tiny target whose tokenizer has a chat template (the fixture's has none)."""
    chat_target = tmp_path / "chat-target"
    shutil.copytree(target, chat_target)
    tokenizer = AutoTokenizer.from_pretrained(str(chat_target))
    tokenizer.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"
    tokenizer.save_pretrained(str(chat_target))
    return chat_target


def test_messages_go_through_the_targets_chat_template(target: Path, tmp_path: Path) -> None:
    chat_target = _chat_target(target, tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(str(chat_target))
    prompts = _prompts_file(tmp_path / "p.jsonl", [{"messages": [{"role": "user", "content": "hi there"}]},
                                                   {"text": "hi there"}])
    ids = prompt_ids(load_prompts(prompts), tokenizer, 10**6, 384)
    rendered = [int(i) for i in tokenizer.encode("<user>hi there<assistant>", add_special_tokens=False)]
    assert ids[0] == ids[1] and ids[0][-len(rendered):] == rendered  # text is one user message under a template


def test_the_target_writes_its_own_requests_when_asked(target: Path, tmp_path: Path) -> None:
    chat_target = _chat_target(target, tmp_path)
    result = make_draft(DraftConfig(target=str(chat_target), output=tmp_path / "d", steps=2,
                                    requests=RequestSource.target, **{**SMALL, "max_prompts": 4}))
    batches = result.report["data"]["batches_by_prompts"]
    assert batches == {"self-written": 1} and result.report["config"]["requests"] == "target"
    # a template-less target has no user turn to write, and text to continue contradicts requests
    with pytest.raises(InputError, match="needs a chat template that renders a user turn"):
        make_draft(DraftConfig(target=str(target), output=tmp_path / "e", steps=2, requests=RequestSource.mixed,
                               **SMALL))
    assert not (tmp_path / "e").exists()
    with pytest.raises(InputError, match="contradict each other"):
        DraftConfig(target=str(target), output=tmp_path / "e", requests=RequestSource.target, calib=tmp_path / "x",
                    **SMALL)
    with pytest.raises(InputError, match="only apply to kind feature"):
        DraftConfig(target=str(target), output=tmp_path / "e", kind=DraftMethod.pruned, requests=RequestSource.mixed)


def test_the_users_own_requests_are_answered_first(target: Path, tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """--train-prompts: the target answers the file's requests before the built-in ones, the data key
    follows the file's content, and an evaluation prompt that is also a training one is named."""
    chat_target = _chat_target(target, tmp_path)
    mine = _prompts_file(tmp_path / "mine.jsonl", [{"text": "sort my list"}, {"text": "name a colour"},
                                                   {"messages": [{"role": "user", "content": "hello"}]}])
    data = tmp_path / "answers"
    with caplog.at_level("WARNING"):
        result = make_draft(DraftConfig(target=str(chat_target), output=tmp_path / "d", steps=2, train_prompts=mine,
                                        eval_prompts=mine, data=data, **SMALL))
    assert result.report["data"]["batches_by_prompts"] == {"your prompts": 1}  # then built-in (test_feature_data)
    assert result.report["config"]["train_prompts"] == str(mine)
    assert "3 of the 3 evaluation prompts are also training prompts" in caplog.text
    first, _ = feature_data.load_shard(data / "shard_0000.pt")
    tokenizer = AutoTokenizer.from_pretrained(str(chat_target))
    asked = {tokenizer.decode(r.ids[:r.prompt_len]) for r in first}
    assert asked == {"<user>sort my list<assistant>", "<user>name a colour<assistant>", "<user>hello<assistant>"}
    mine.write_text(json.dumps({"text": "another request"}) + "\n")  # other requests: the kept answers do not fit
    with pytest.raises(InputError, match="holds answers made with another seed, text or settings"):
        make_draft(DraftConfig(target=str(chat_target), output=tmp_path / "e", steps=2, train_prompts=mine,
                               data=data, **SMALL))
    with pytest.raises(InputError, match="contradict each other"):
        DraftConfig(target=str(target), output=tmp_path / "e", train_prompts=mine, calib=tmp_path / "x", **SMALL)
    with pytest.raises(InputError, match="only apply to kind feature"):
        DraftConfig(target=str(target), output=tmp_path / "e", kind=DraftMethod.pruned, train_prompts=mine)
    with pytest.raises(InputError, match="train_prompts file .* does not exist"):
        make_draft(DraftConfig(target=str(target), output=tmp_path / "e", steps=1, train_prompts=tmp_path / "no",
                               **SMALL))
