"""Chat prompts: messages rendered with the checkpoint's own chat template, host side.

The template is the Jinja one the checkpoint ships in its tokenizer files (`chat_template.jinja`
or `tokenizer_config.json`); export copies those files into the bundle's `tokenizer/`, so a bundle
renders chats exactly as the model was trained to read them. Rendering uses transformers'
`apply_chat_template` (its sandboxed Jinja environment and helpers such as `raise_exception`),
imported only when a chat prompt is rendered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specdec.pipeline.errors import BundleError, InputError

Message = dict[str, str]  # {"role": "user" | "system" | "assistant" | ..., "content": text}


def check_messages(value: Any, where: str) -> list[Message]:
    """`value` as a list of {role, content} string pairs, or a one-line error naming `where`."""
    hint = 'write "messages": [{"role": "user", "content": "..."}]'
    if not isinstance(value, list) or not value:
        raise InputError(f"{where}: 'messages' must be a non-empty list", hint)
    for number, message in enumerate(value, 1):
        if not (isinstance(message, dict) and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)):
            raise InputError(f"{where}: message {number} needs string 'role' and 'content'", hint)
    return [{"role": m["role"], "content": m["content"]} for m in value]


def has_chat_template(tokenizer_dir: Path) -> bool:
    """Whether the tokenizer files ship a chat template, read without loading the tokenizer."""
    if (tokenizer_dir / "chat_template.jinja").is_file():
        return True
    try:
        config = json.loads((tokenizer_dir / "tokenizer_config.json").read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and bool(config.get("chat_template"))


class ChatTemplate:
    """The bundle tokenizer's chat template; a bundle without one is an error when a chat is asked for."""

    def __init__(self, tokenizer_dir: Path) -> None:
        from transformers import PreTrainedTokenizerFast

        self.tokenizer = PreTrainedTokenizerFast.from_pretrained(str(tokenizer_dir))
        if not self.tokenizer.chat_template:
            raise BundleError(f"the bundle's tokenizer ('{tokenizer_dir}') has no chat template",
                              "drop --chat (and 'messages') to use plain prompts, or export a chat checkpoint "
                              "whose tokenizer files carry one")

    def render(self, messages: list[Message]) -> str:
        """The prompt text, ending where the assistant's reply begins."""
        try:
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception as exc:  # jinja2's TemplateError, or the template's own raise_exception()
            raise InputError(f"the bundle's chat template rejected the messages: {str(exc).splitlines()[0]}",
                             "fix the roles or order of the messages (many templates want user/assistant "
                             "turns alternating)") from exc
        return str(text)
