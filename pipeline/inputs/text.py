"""Host-side text <-> token ids with the bundle's tokenizer (the `tokenizers` library).

The device runner works on token ids only; tokenization happens on the host, so the phone
needs neither `tokenizers` nor `transformers`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from specdec.pipeline.errors import BundleError

if TYPE_CHECKING:
    from specdec.pipeline.inputs.chat import ChatTemplate, Message


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
