"""verifiers_rl.utils.data_utils: the dataset-source choice and the boxed/numeric answer helpers the
example environments share."""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction

import pytest

from verifiers_rl.utils.data_utils import (
    default_dataset_source,
    extract_boxed_answer,
    numbers_match,
    parse_number,
    resolve_dataset_source,
)


@pytest.mark.parametrize("flag,expected", [
    ("1", "offline"), ("true", "offline"), (" YES ", "offline"), ("on", "offline"),
    ("0", "hub"), ("false", "hub"), ("", "hub"), (None, "hub"),
])
def test_default_source_follows_hf_hub_offline(monkeypatch, flag, expected):
    if flag is None:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    else:
        monkeypatch.setenv("HF_HUB_OFFLINE", flag)
    assert default_dataset_source() == expected
    assert resolve_dataset_source(None) == expected
    assert resolve_dataset_source("") == expected


def test_resolve_dataset_source(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert resolve_dataset_source("hub") == "hub" and resolve_dataset_source("offline") == "offline"
    with pytest.raises(ValueError, match="dataset_source must be 'hub' or 'offline', got 'local'"):
        resolve_dataset_source("local")


def test_extract_boxed_answer():
    assert extract_boxed_answer("a \\boxed{1} b \\boxed{\\frac{3}{4}}") == "\\frac{3}{4}"
    assert extract_boxed_answer("x \\boxed { 42 } y") == "42"
    assert extract_boxed_answer("no box") is None and extract_boxed_answer("\\boxed{open") is None
    assert extract_boxed_answer("") is None and extract_boxed_answer(None) is None


def test_numbers_match():
    for pred, gold in [("1,234", "1234"), ("\\$18.00", "18"), ("18 dollars", "18"), ("\\text{42 apples}", "42"),
                       ("x = 7", "7"), ("\\frac{1}{2}", "0.5"), ("50\\%", "50"), ("1{,}000", "1000"), ("€5", "5")]:
        assert numbers_match(pred, gold), (pred, gold)
    for pred, gold in [("19", "18"), ("2 + 3", "5"), ("", "5"), (None, "5"), ("five", "5")]:
        assert not numbers_match(pred, gold), (pred, gold)
    # relative tolerance 1e-6 of the gold value (at least 1e-6 absolute)
    assert numbers_match("1000000.5", "1000000") and not numbers_match("0.000002", "0")


def test_parse_number():
    assert parse_number("\\dfrac{3}{4}") == Fraction(3, 4) and parse_number("(3)/(4)") == Fraction(3, 4)
    assert parse_number("−2.5 km/h") == Fraction(-5, 2) and parse_number("90^\\circ") == 90
    assert parse_number("1/0") is None and parse_number("\\frac{1}{0}") is None and parse_number(None) is None
    assert parse_number(Fraction(1, 3)) == Fraction(1, 3) and parse_number(7) == 7 and parse_number(True) is None
    # `symbols` picks what is dropped before reading: without € the euro amount is not a number
    assert parse_number("€5") == 5 and parse_number("€5", symbols=("$",)) is None


@pytest.mark.integration  # spawns a process
def test_module_is_import_light():
    code = ("import sys, verifiers_rl.utils.data_utils; "
            "print(sorted(m for m in ('torch', 'datasets', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
