"""Host-side text <-> token ids with the bundle's tokenizer (the `tokenizers` library).

The device runner works on token ids only; tokenization happens on the host, so the phone
needs neither `tokenizers` nor `transformers`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from specdec.pipeline.errors import BundleError, InputError

if TYPE_CHECKING:
    from specdec.pipeline.inputs.chat import ChatTemplate, Message


def read_text_file(path: Path, what: str) -> str:
    """A user's text file (prompts, calibration text) as str: UTF-8 (a BOM is dropped) and no NUL byte.

    Otherwise InputError (exit 2) naming the file and its first bad line: a binary file or one in
    another encoding is refused rather than read with replacement characters into the work."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{what} '{path}' cannot be read ({exc.strerror or exc})",
                         "pass a readable UTF-8 text file") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        number = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InputError(f"{what} '{path}' line {number} is not valid UTF-8 (byte 0x{data[exc.start]:02x} at "
                         f"column {column})", "save the file as UTF-8 text") from None
    if "\x00" in text:
        number = text.count("\n", 0, text.index("\x00")) + 1
        raise InputError(f"{what} '{path}' line {number} holds a NUL byte: the file is binary, not text",
                         "pass a UTF-8 text file")
    return text


class TextCodec:
    def __init__(self, tokenizer_dir: Path) -> None:
        from tokenizers import Tokenizer

        path = tokenizer_dir / "tokenizer.json"
        if not path.is_file():
            raise BundleError(f"bundle tokenizer '{path}' is missing", "re-create the bundle with `specdec export`")
        self.tokenizer = Tokenizer.from_file(str(path))
        self.directory = tokenizer_dir
        self._chat: ChatTemplate | None = None

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text).ids)

    def encode_chat(self, messages: list[Message]) -> list[int]:
        """Messages through the bundle's chat template; the template writes the special tokens itself."""
        from specdec.pipeline.inputs.chat import ChatTemplate

        if self._chat is None:
            self._chat = ChatTemplate(self.directory)
        return list(self.tokenizer.encode(self._chat.render(messages), add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def stream(self) -> TextStream:
        return TextStream(self)


class TextStream:
    """Turns tokens into printable text increments.

    Byte-level tokens can split a UTF-8 character; the decoder then yields U+FFFD, so text is
    held back until the character completes.
    """

    def __init__(self, codec: TextCodec) -> None:
        self.codec = codec
        self.ids: list[int] = []
        self.printed = 0

    def push(self, tokens: list[int]) -> str:
        self.ids += tokens
        text = self.codec.decode(self.ids)
        if text.endswith("\ufffd"):
            return ""
        delta = text[self.printed :]
        self.printed = len(text)
        return delta

    def flush(self) -> str:
        text = self.codec.decode(self.ids)
        delta = text[self.printed :]
        self.printed = len(text)
        return delta
