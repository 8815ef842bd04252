"""The model's chat template, rendered as vLLM renders it through transformers' ``apply_chat_template``: the
template from the model's ``chat_template.jinja`` (or ``tokenizer_config.json``'s ``chat_template``), a sandboxed
Jinja environment with ``trim_blocks`` and ``lstrip_blocks``, the messages, ``add_generation_prompt`` and the
tokenizer's special tokens as variables. Loaded when the engine starts, so that a restored engine (the same process
image) never reads it again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: vLLM's words when the model has no chat template (a 400)
NO_TEMPLATE = (
    "As of transformers v4.44, default chat template is no longer allowed, so you must provide a chat template if "
    "the tokenizer does not define one."
)


class ChatTemplateError(ValueError):
    """The messages cannot be rendered (no template, a malformed message, the template raised)."""


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def message_text(content: Any) -> str:
    """A message's content as the template sees it: a string, or the text parts of a list joined by newlines (vLLM's
    "string" content format)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                raise ChatTemplateError(f"Unsupported content part: {part!r}")
        return "\n".join(texts)
    raise ChatTemplateError(f"Unsupported message content: {content!r}")


class ChatTemplate:
    def __init__(self, model_dir: Path) -> None:
        config_path = model_dir / "tokenizer_config.json"
        config: dict[str, Any] = json.loads(config_path.read_text()) if config_path.is_file() else {}
        template_path = model_dir / "chat_template.jinja"
        self.source: str | None = (
            template_path.read_text(encoding="utf-8") if template_path.is_file() else config.get("chat_template")
        )
        self.special_tokens = {
            name: text
            for name in ("bos_token", "eos_token", "unk_token", "pad_token")
            if (text := _token_text(config.get(name))) is not None
        }
        self._compiled: Any = None
        self._missing: str | None = None
        if self.source is not None:
            try:
                from jinja2.ext import loopcontrols
                from jinja2.sandbox import ImmutableSandboxedEnvironment
            except ImportError as error:  # a host Python without jinja2: everything but chat works
                self._missing = f"chat templates need jinja2: {error}"
                return

            def raise_exception(message: str) -> None:
                raise ChatTemplateError(message)

            environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
            environment.filters["tojson"] = lambda value, indent=None: json.dumps(
                value, ensure_ascii=False, indent=indent
            )
            environment.globals["raise_exception"] = raise_exception
            self._compiled = environment.from_string(self.source)

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, **kwargs: Any) -> str:
        """The prompt text of ``messages``."""
        if self._compiled is None:
            raise ChatTemplateError(self._missing or NO_TEMPLATE)
        conversation = []
        for message in messages:
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise ChatTemplateError(f"Each message needs a role: {message!r}")
            conversation.append({**message, "content": message_text(message.get("content"))})
        try:
            text: str = self._compiled.render(
                messages=conversation,
                add_generation_prompt=add_generation_prompt,
                **self.special_tokens,
                **kwargs,
            )
        except ChatTemplateError:
            raise
        except Exception as error:  # a template error is the request's fault, as in vLLM (400)
            raise ChatTemplateError(f"{type(error).__name__}: {error}") from error
        return text
