"""What the checkpoint reader (launcher/inside/checkpoint_args.py) makes of one stored setting: every value it returns
can be written as strict JSON, so one setting a checkpoint holds cannot lose the reply with all the others."""

from __future__ import annotations

import json

import pytest

from launcher.inside.checkpoint_args import _plain


@pytest.mark.parametrize("value", [10**5000, -(10**5000), 2**64, [10**5000, 1], (float("nan"), float("inf"))],
                         ids=["5,000 digits", "-5,000 digits", "2^64", "in a list", "nan and inf"])
def test_a_stored_value_json_cannot_hold_is_said_in_words(value):
    said = json.dumps(_plain(value), allow_nan=False)
    assert "bits" in said or "nan" in said


@pytest.mark.parametrize("value", [0, -1, 2**63 - 1, 12288, True, None, "torch_dist", 1.5, [1, 2]])
def test_a_settings_value_is_kept_as_stored(value):
    assert _plain(value) == value
