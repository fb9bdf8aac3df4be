"""SFT data: chat rows → token ids + a mask of the tokens that carry loss.

Formats, columns and how the mask is found and checked (rendering growing prefixes with the model's own template;
a row the template re-renders is split per assistant turn or refused): docs/training.md, "Columns" and "Loss mask".
Nothing is masked from a guess.
"""

from __future__ import annotations

import json
from typing import Any

from verifiers_rl.chat_masks import NotPrefix, input_ids, masked, render_ids, renders, split_masks


class SFTDataError(ValueError):
    """A row vf-sft cannot train on (one line naming the row and the fix)."""


class TemplateMismatchError(SFTDataError):
    """The chat template renders a trained turn differently inside the longer conversation."""


def _as_messages(value: Any, role: str, column: str) -> list[dict[str, Any]]:
    """A column's messages: a string is one message of `role`; ValueError (one line) for anything but a list of
    message dicts."""
    from collections.abc import Mapping

    if isinstance(value, str):
        return [{"role": role, "content": value}]
    if not isinstance(value, list) or not all(isinstance(m, Mapping) for m in value):
        got = type(value).__name__ if not isinstance(value, list) else \
            f"a list holding {type(next(m for m in value if not isinstance(m, Mapping))).__name__}"
        raise ValueError(f"column {column!r}: expected a string or a list of {{\"role\", \"content\"}} messages, "
                         f"got {got}")
    for i, m in enumerate(value):
        if "role" not in m:  # a template skips such a message silently
            raise ValueError(f"column {column!r}: message {i} has no 'role' (its keys: {', '.join(map(str, m))}); "
                             "give each message a role and a content")
    return [dict(m) for m in value]


def _json_column(row: dict[str, Any], names: tuple[str, ...], kind: type) -> Any:
    """The first of `names` set in `row`, parsed from JSON when a string (how parquet/CSV files keep them)."""
    for name in names:
        value = row.get(name)
        if value is None or value == "":
            continue
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as e:
                raise ValueError(f"column {name!r}: not valid JSON ({e.msg} at {e.pos})") from None
        if not isinstance(value, kind):
            raise ValueError(f"column {name!r}: expected a {kind.__name__} (or its JSON), got {type(value).__name__}")
        return value
    return None


def template_options(row: dict[str, Any]) -> dict[str, Any]:
    """apply_chat_template's extra arguments for this row: `tools` and the row's `chat_template_kwargs`."""
    options = dict(_json_column(row, ("chat_template_kwargs",), dict) or {})
    tools = _json_column(row, ("tools", "tool_defs"), list)
    if tools:
        options["tools"] = tools
    return options


def _conversation(row: dict[str, Any], roles: tuple[str, ...]) -> tuple[list[dict[str, Any]], list[int]]:
    """(messages, indices of the messages that carry loss) for either format."""
    if "messages" in row and row["messages"] is not None:
        messages = _as_messages(row["messages"], "user", "messages")
        first = 0
    elif "prompt" in row and "completion" in row:
        prompt = _as_messages(row["prompt"], "user", "prompt")
        messages = prompt + _as_messages(row["completion"], "assistant", "completion")
        first = len(prompt)  # the prompt never carries loss
    else:
        raise ValueError(f"an SFT row needs 'prompt' + 'completion' or 'messages' columns; got {sorted(row)}")
    trained = [i for i in range(first, len(messages)) if messages[i].get("role") in roles]
    if not trained:  # TRL drops such a row silently, and fails with no row left
        found = ", ".join(dict.fromkeys(str(m.get("role")) for m in messages[first:])) or "none"
        raise ValueError(f"no message carries loss: the roles {'after the prompt ' if first else ''}are {found}, "
                         f"and the loss is on {', '.join(roles)} messages ([data.loss_mask]); name the replies' "
                         "role 'assistant'")
    return messages, trained


def tokenize_samples(row: dict[str, Any], tokenizer: Any, max_length: int,
                     loss_roles: tuple[str, ...] | list[str] = ("assistant",), on_mismatch: str = "split",
                     where: str = "row", rendered: dict[tuple[int, bool], list[int]] | None = None
                     ) -> tuple[list[dict[str, list[int]]], bool]:
    """([{"input_ids", "assistant_masks"}, ...], whether the row was split) for one row. One sample, unless the
    template re-renders earlier turns and `on_mismatch` is "split". Raises TemplateMismatchError (one line).
    `rendered`: the row's renderings tokenized already (`tokenize_dataset` does them in batches)."""
    messages, trained = _conversation(row, tuple(loss_roles))
    options = template_options(row)
    split = False
    try:
        pairs = [masked(tokenizer, messages, trained, options, rendered)]
    except NotPrefix as e:
        if on_mismatch != "split":
            raise TemplateMismatchError(_mismatch_line(where, e.index, messages, "data.on_template_mismatch = "
                                                       "\"split\" trains each assistant turn as its own sample"))
        split = True
        try:
            pairs = split_masks(tokenizer, messages, trained, options)
        except NotPrefix as e2:  # even alone, the turn renders differently after its generation prompt
            raise TemplateMismatchError(_mismatch_line(where, e2.index, messages, "give the row a "
                                                       "chat_template_kwargs column or the model a template whose "
                                                       "generation prompt starts the assistant turn as rendered"))
    return [{"input_ids": ids[:max_length], "assistant_masks": mask[:max_length]} for ids, mask in pairs], split


def _mismatch_line(where: str, index: int, messages: list[dict[str, Any]], fix: str) -> str:
    role = messages[index].get("role")
    return (f"{where}: the chat template renders message {index} ({role}) differently once later messages follow "
            f"(a position-dependent template, e.g. Qwen3's thinking), so its loss mask cannot be found; {fix}")


def tokenize_row(row: dict[str, Any], tokenizer: Any, max_length: int,
                 loss_roles: tuple[str, ...] | list[str] = ("assistant",)) -> dict[str, list[int]]:
    """{"input_ids", "assistant_masks"} for one row that renders as one sample (TemplateMismatchError if not)."""
    samples, _ = tokenize_samples(row, tokenizer, max_length, loss_roles, on_mismatch="error")
    return samples[0]


def tokenize_dataset(rows: list[dict[str, Any]], tokenizer: Any, max_length: int,
                     loss_roles: tuple[str, ...] | list[str] = ("assistant",), on_mismatch: str = "split",
                     label: str = "data") -> tuple[list[dict[str, list[int]]], int]:
    """(samples, rows split) for every row; a bad row is one line naming its index, and so is a dataset none of
    whose samples keeps a loss token within `max_length` (`trained_samples` leaves such samples out)."""
    samples: list[dict[str, list[int]]] = []
    n_split = 0
    rendered = _render_in_batches(rows, tokenizer, tuple(loss_roles))
    for k, row in enumerate(rows):
        try:
            out, split = tokenize_samples(row, tokenizer, max_length, loss_roles, on_mismatch, f"{label} row {k}",
                                          rendered.get(k))
        except SFTDataError:
            raise
        except ValueError as e:
            raise SFTDataError(f"{label} row {k}: {e}") from None
        samples += out
        n_split += split
    if samples and not trained_samples(samples):
        raise SFTDataError(f"{label}: no row keeps a loss token within max_length = {max_length} tokens (what comes "
                           "before the trained messages fills it); raise max_length")
    return samples, n_split


def trained_samples(samples: list[dict[str, list[int]]]) -> list[dict[str, list[int]]]:
    """The samples with a loss token left after truncation to max_length (the others train nothing)."""
    return [s for s in samples if any(s["assistant_masks"])]


BATCH_ROWS = 256  # conversations per apply_chat_template call


def _render_in_batches(rows: list[dict[str, Any]], tokenizer: Any, roles: tuple[str, ...]
                       ) -> dict[int, dict[tuple[int, bool], list[int]]]:
    """Row index -> `renders`' token ids, tokenized in batched apply_chat_template calls, for the rows without
    template options of their own. A row left out (or in a batch the template refuses) is rendered on its own
    later, and so fails with its own line."""

    wanted: dict[bool, list[tuple[int, tuple[int, bool], list[dict[str, Any]]]]] = {False: [], True: []}
    for k, row in enumerate(rows):
        try:
            if template_options(row):
                continue
            messages, trained = _conversation(row, roles)
        except Exception:
            continue
        for n, gen in renders(messages, trained):
            wanted[gen].append((k, (n, gen), messages[:n]))
    out: dict[int, dict[tuple[int, bool], list[int]]] = {}
    failed: set[int] = set()
    for gen, items in wanted.items():
        empty = [(k, key) for k, key, m in items if not m]  # `render_ids`' answer (some templates cannot render one)
        if empty:
            nothing = render_ids(tokenizer, [], gen)
            for k, key in empty:
                out.setdefault(k, {})[key] = nothing
        items = [item for item in items if item[2]]
        for start in range(0, len(items), BATCH_ROWS):
            chunk = items[start:start + BATCH_ROWS]
            try:
                ids = input_ids(tokenizer.apply_chat_template([m for _, _, m in chunk], tokenize=True,
                                                               add_generation_prompt=gen))
            except Exception:
                failed.update(k for k, _, _ in chunk)
                continue
            for (k, key, _), one in zip(chunk, ids):
                out.setdefault(k, {})[key] = list(one)
    return {k: v for k, v in out.items() if k not in failed}
