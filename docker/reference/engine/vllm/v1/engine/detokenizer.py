"""Incremental detokenization and stop strings, as vLLM V1's ``IncrementalDetokenizer`` does them.

- The text grows token by token; while it ends in an incomplete UTF-8 sequence (U+FFFD at the end) it is held
  back, and a sequence still incomplete when the request ends never reaches the text (vLLM's ``DecodeStream``).
- A request ended by EOS or a stop token id leaves that token out of the text, unless
  ``include_stop_str_in_output`` (the token stays in ``token_ids`` either way).
- After ``min_tokens``, each new piece of text is searched for the stop strings (the earliest one to complete wins);
  a match ends the request with that string as its ``stop_reason`` and truncates the text before it (or after it,
  with ``include_stop_str_in_output``).
- A streamed request holds back the last ``len(longest stop string) - 1`` characters until it ends, so that no
  chunk carries text a later stop string would have cut.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from vllm.tokenizers.bytelevel_bpe import ByteLevelBPETokenizer

REPLACEMENT = "\ufffd"


def check_stop_strings(
    output_text: str, new_char_count: int, stop: Sequence[str], include_in_output: bool
) -> tuple[str, int] | None:
    """The stop string completing earliest in the new text and the length to cut the text to (-1: no cut)."""
    if not new_char_count or not stop:
        return None
    best: str | None = None
    best_index = 0
    best_end = sys.maxsize
    for stop_str in stop:
        index = output_text.find(stop_str, 1 - new_char_count - len(stop_str))
        if index == -1:
            continue
        end = index + len(stop_str)
        if end < best_end:
            best, best_index, best_end = stop_str, index, end
    if best is None:
        return None
    if include_in_output:
        best_index += len(best)
        if best_index >= len(output_text):
            return best, -1
    return best, best_index


class IncrementalDetokenizer:
    def __init__(
        self,
        tokenizer: ByteLevelBPETokenizer,
        stop: Sequence[str] = (),
        include_stop_str_in_output: bool = False,
        min_tokens: int = 0,
        skip_special_tokens: bool = True,
    ) -> None:
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        self.include_stop_str_in_output = include_stop_str_in_output
        self.min_tokens = min_tokens
        self.skip_special_tokens = skip_special_tokens
        self.stop_buffer_length = max(map(len, self.stop)) - 1 if self.stop and not include_stop_str_in_output else 0
        self.text_ids: list[int] = []  # the tokens whose text counts
        self.num_output_tokens = 0
        self.output_text = ""
        self._last_output_text_offset = 0

    def update(self, token_id: int, stop_terminated: bool) -> str | None:
        """Take one new token; returns the stop string it completed, if any."""
        before = len(self.output_text)
        if not stop_terminated or self.include_stop_str_in_output:
            self.text_ids.append(token_id)
            text = self.tokenizer.decode(self.text_ids, skip_special_tokens=self.skip_special_tokens)
            if not text.endswith(REPLACEMENT):
                self.output_text = text
        self.num_output_tokens += 1
        if not self.stop or self.num_output_tokens <= self.min_tokens:
            return None
        found = check_stop_strings(
            self.output_text, len(self.output_text) - before, self.stop, self.include_stop_str_in_output
        )
        if found is None:
            return None
        stop_string, truncate_to = found
        if truncate_to != -1:
            self.output_text = self.output_text[:truncate_to]
        return stop_string

    def next_text(self, finished: bool) -> str:
        """The text not yet handed out (streaming), less the stop-string hold-back while the request runs."""
        length = len(self.output_text) - (0 if finished else self.stop_buffer_length)
        start = self._last_output_text_offset
        if start < length:
            self._last_output_text_offset = length
            return self.output_text[start:length]
        return ""
