"""tests/rank_output.py: a rank's report is found however its writes interleaved with others'."""

from __future__ import annotations

import json

import pytest

from ..rank_output import marked_json


def test_reports_glued_to_other_fragments_are_all_found_in_order() -> None:
    text = ('[toolkit] Invoking script\nnoiseREPORT {"rank": 2, "host": "algo-2"}REPORT {"rank": 3, "host": "algo-2"}'
            '\n\nREPORT [1, "two"]\n')
    assert marked_json(text, "REPORT ") == [{"rank": 2, "host": "algo-2"}, {"rank": 3, "host": "algo-2"}, [1, "two"]]
    assert marked_json("nothing here\n", "REPORT ") == []


def test_a_marker_not_followed_by_json_is_an_error_that_shows_what_followed() -> None:
    with pytest.raises(json.JSONDecodeError, match="'REPORT ' is not followed by JSON: 'truncated"):
        marked_json('REPORT truncated {"rank": 2', "REPORT ")
