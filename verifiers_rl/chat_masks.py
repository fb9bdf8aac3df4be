"""Loss masks by role from a model's own chat template (docs/training.md, "Loss mask"): each trained message's span
is found by rendering growing prefixes of the conversation, and checked: the rendering up to it (with the generation
prompt before an assistant turn) and through it must both be prefixes of the whole. A template that renders earlier
turns differently once later ones follow (Qwen3 drops the thinking of assistant turns before the last user message)
fails that check (`NotPrefix`) instead of shifting the mask; `split_masks` then trains each assistant turn as its own
sample, rendered as the model sees it at that turn. Users: vf-sft's rows (sft/data.py) and the teacher's rollouts of
`training_mode = "sft"` (trainer/teacher_samples.py). Nothing is masked from a guess.
"""

from __future__ import annotations

from typing import Any


class NotPrefix(Exception):
    """Message `index`'s span cannot be found in the whole rendering (a position-dependent template)."""

    def __init__(self, index: int):
        self.index = index


def render_ids(tokenizer: Any, messages: list[dict[str, Any]], add_generation_prompt: bool = False,
               options: dict[str, Any] | None = None) -> list[int]:
    """The token ids of `messages` in the template (`options`: apply_chat_template's extra arguments); a template
    error is a one-line ValueError (its caller names the row or rollout)."""
    try:
        out = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=add_generation_prompt,
                                            **(options or {}))
    except Exception as e:
        if messages:  # a template error (roles it refuses, content it cannot join), in one line
            text = " ".join(str(e).split())
            raise ValueError(f"the model's chat template cannot render it ({type(e).__name__}: {text})") from None
        return []  # a template that cannot render an empty conversation: nothing comes before the first message
    return list(input_ids(out))


def input_ids(out: Any) -> Any:
    """apply_chat_template's token ids: transformers 5 returns them in a BatchEncoding, 4 as they are."""
    return out["input_ids"] if hasattr(out, "keys") else out


def is_prefix(short: list[int], long: list[int]) -> bool:
    return len(short) <= len(long) and long[:len(short)] == short


def renders(messages: list[dict[str, Any]], trained: list[int]) -> list[tuple[int, bool]]:
    """The renderings `masked` reads, as (how many leading messages, with the generation prompt): the whole
    conversation, and around each trained message the conversation before it (with the generation prompt before an
    assistant turn) and through it (the whole again when it is the last)."""
    keys = {(len(messages), False): None}
    for i in trained:
        keys[before(messages, i)] = None
        keys[(i + 1, False)] = None
    return list(keys)


def before(messages: list[dict[str, Any]], i: int) -> tuple[int, bool]:
    """The rendering before message i: the generation prompt too when it is an assistant's turn."""
    return i, messages[i].get("role") == "assistant"


def masked(tokenizer: Any, messages: list[dict[str, Any]], trained: list[int], options: dict[str, Any],
           rendered: dict[tuple[int, bool], list[int]] | None = None) -> tuple[list[int], list[int]]:
    """(ids, mask) of `messages` with loss on the messages at `trained`; NotPrefix(i) when message i's span
    cannot be found in the whole rendering. `rendered`: `renders`' token ids, when tokenized already."""
    if rendered is None:
        rendered = {(n, gen): render_ids(tokenizer, messages[:n], add_generation_prompt=gen, options=options)
                    for n, gen in renders(messages, trained)}
    ids = rendered[(len(messages), False)]
    mask = [0] * len(ids)
    for i in trained:
        head = rendered[before(messages, i)]
        through = rendered[(i + 1, False)]
        if not (is_prefix(head, through) and is_prefix(through, ids)):
            raise NotPrefix(i)
        for j in range(len(head), len(through)):
            mask[j] = 1
    return ids, mask


def split_masks(tokenizer: Any, messages: list[dict[str, Any]], trained: list[int],
                options: dict[str, Any]) -> list[tuple[list[int], list[int]]]:
    """One sample per assistant turn (and one for trained messages after the last): messages up to it, loss on
    the trained messages since the previous cut."""
    cuts = [i for i in trained if messages[i].get("role") == "assistant"]
    if trained and (not cuts or trained[-1] > cuts[-1]):
        cuts.append(trained[-1])
    out, start = [], 0
    for cut in cuts:
        mine = [i for i in trained if start <= i <= cut]
        out.append(masked(tokenizer, messages[:cut + 1], mine, options))
        start = cut + 1
    return out
