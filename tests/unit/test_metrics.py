"""Metric definitions: their bounds (botocore's SageMaker service model), what a regex yields from a
log line (documented and reported examples), and the nearest line to a regex that yields nothing.

No job runs here; the jobs that read metrics through the SDKs are in tests/jobs/test_sdk_session.py
and tests/jobs/test_sdk3_session.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from emulator.errors import RequestError
from emulator.job.metrics import MetricDefinition, Scraper, nearest_line, parse_definitions


def _shapes() -> dict[str, Any]:
    botocore = pytest.importorskip("botocore.session")
    model = botocore.get_session().get_service_model("sagemaker")
    return {name: model.shape_for(name) for name in ("MetricDefinitionList", "MetricName", "MetricRegex")}


def test_the_bounds_are_the_service_models() -> None:
    shapes = _shapes()
    most = shapes["MetricDefinitionList"].metadata["max"]
    name_max = shapes["MetricName"].metadata["max"]
    regex_max = shapes["MetricRegex"].metadata["max"]
    ok = [{"Name": "n" * name_max, "Regex": "x" * (regex_max - 4) + "(.*)"}] + [
        {"Name": f"m{i}", "Regex": "v=(.*)"} for i in range(most - 1)]
    assert len(parse_definitions(ok)) == most
    with pytest.raises(RequestError) as info:
        parse_definitions([*ok, {"Name": "one-more", "Regex": "(.*)"}])
    assert info.value.field == "AlgorithmSpecification.MetricDefinitions"
    with pytest.raises(RequestError) as info:
        parse_definitions([{"Name": "n" * (name_max + 1), "Regex": "(.*)"}])
    assert info.value.field == "AlgorithmSpecification.MetricDefinitions[0].Name"
    with pytest.raises(RequestError) as info:
        parse_definitions([{"Name": "ok", "Regex": "x" * (regex_max + 1)}])
    assert info.value.field == "AlgorithmSpecification.MetricDefinitions[0].Regex"


@pytest.mark.parametrize("bad, field", [
    ([{"Regex": "(.*)"}], "AlgorithmSpecification.MetricDefinitions[0].Name"),
    ([{"Name": "a", "Regex": "(.*)"}, {"Name": "b", "Regex": ""}], "AlgorithmSpecification.MetricDefinitions[1].Regex"),
    ([{"Name": "a", "Regex": "loss=([0-9.]+"}], "AlgorithmSpecification.MetricDefinitions[0].Regex"),
    (["loss=(.*)"], "AlgorithmSpecification.MetricDefinitions[0]"),
    ({"Name": "a", "Regex": "(.*)"}, "AlgorithmSpecification.MetricDefinitions"),
])
def test_a_bad_definition_is_refused_naming_its_member(bad: Any, field: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_definitions(bad)
    assert info.value.field == field


def test_a_regex_python_cannot_compile_is_the_emulators_limit() -> None:
    with pytest.raises(RequestError) as info:
        parse_definitions([{"Name": "a", "Regex": "loss=([0-9.]+"}])
    assert "the emulator's limit" in str(info.value)  # not a claim about SageMaker


def _scrape(definitions: list[dict[str, str]], lines: list[tuple[str, str]]) -> Scraper:
    s = Scraper(parse_definitions(definitions))
    for t, (host, line) in enumerate(lines):
        s.feed(host, line, 1000.0 + t)
    return s


def test_the_sdk_issue_3208_example_numbers_only() -> None:
    """aws/sagemaker-python-sdk#3208: ``canary=1.01;`` gives a value, ``cat=dog;`` none."""
    s = _scrape([{"Name": "canary", "Regex": "canary=(.*?);"}, {"Name": "cat", "Regex": "cat=(.*?);"}],
                [("algo-1", "canary=1.01;"), ("algo-1", "cat=dog;")])
    assert [(p.name, p.value) for p in s.final()] == [("canary", 1.01)]
    assert [d.name for d in s.unmatched()] == ["cat"]
    assert s.matches["cat"] == 1 and s.not_numbers["cat"] == "dog"


def test_the_hugging_face_notebook_regex_takes_its_first_group() -> None:
    """huggingface/notebooks sagemaker/06: ``'loss': ([0-9]+(.|e\\-)[0-9]+),?`` has two groups; the
    metric is the outer (first) one, on the Trainer's log dict."""
    line = "{'loss': 0.6931, 'learning_rate': 5e-05, 'epoch': 1.0}"
    s = _scrape([{"Name": "loss", "Regex": "'loss': ([0-9]+(.|e\\-)[0-9]+),?"},
                 {"Name": "epoch", "Regex": "'epoch': ([0-9]+(.|e\\-)[0-9]+),?"}], [("algo-1", line)])
    assert [(p.name, p.value) for p in s.final()] == [("loss", 0.6931), ("epoch", 1.0)]


def test_nan_and_infinity_are_no_values() -> None:
    """CloudWatch PutMetricData: NaN and ±Infinity are not supported."""
    s = _scrape([{"Name": "loss", "Regex": "loss=(\\S+)"}],
                [("algo-1", "loss=nan"), ("algo-1", "loss=inf"), ("algo-1", "loss=-Infinity"), ("algo-1", "loss=1e-3")])
    assert [p.value for p in s.points["loss"]] == [0.001]


def test_every_host_counts_and_the_last_value_is_final() -> None:
    lines = [("algo-1", "loss=0.9"), ("algo-2", "loss=0.8"), ("algo-1", "loss=0.5"), ("algo-2", "loss=0.4")]
    s = _scrape([{"Name": "loss", "Regex": "loss=([0-9.]+)"}], lines)
    assert [(p.host, p.value) for p in s.points["loss"]] == [(h, float(v.split("=")[1])) for h, v in lines]
    (last,) = s.final()
    assert (last.host, last.value) == ("algo-2", 0.4)


def test_mpi_tagged_lines_are_searched_and_the_emulators_lines_are_not() -> None:
    s = _scrape([{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
                [("algo-1", "[1,0]<stdout>:loss=0.3"), ("algo-1", "[emulator] loss=9"),
                 ("algo-1", "[1,1]<stderr>:[emulator] loss=8")])
    assert [p.value for p in s.points["loss"]] == [0.3]


def test_nearest_line_finds_the_mistyped_metric() -> None:
    lines = [("algo-1", "2026-12-04 INFO Invoking script"), ("algo-2", "epoch 3 val_accuracy=0.91"),
             ("algo-1", "epoch 3 train_loss=0.2")]
    assert nearest_line("val_acc=([0-9.]+)", lines) == ("algo-2", "epoch 3 val_accuracy=0.91")
    assert nearest_line("acuracy: ([0-9.]+)", [("algo-1", "accuracy: 0.5")]) == ("algo-1", "accuracy: 0.5")
    assert nearest_line("zzz=([0-9]+)", lines) is None


def test_to_dict_is_the_wire_form() -> None:
    d = MetricDefinition("val:loss", "val_loss=([0-9.]+)")
    assert parse_definitions([d.to_dict()]) == (d,)
    assert json.loads(json.dumps(d.to_dict())) == {"Name": "val:loss", "Regex": "val_loss=([0-9.]+)"}


def test_plan_carries_the_cli_definitions(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from emulator.cli import main

    (tmp_path / "train.py").write_text("print('loss=1')\n")
    rc = main(["plan", "--entry-point", str(tmp_path / "train.py"), "--backend", "process",
               "--output-dir", str(tmp_path / "out"), "--metric-definition", "train:loss=loss=([0-9.]+)"])
    assert rc == 0
    out = capsys.readouterr().out
    assert re.search(r'"MetricDefinitions": \[\s*\{\s*"Name": "train:loss",\s*"Regex": "loss=\(\[0-9\.\]\+\)"',
                     out), out[-2000:]
    assert not (tmp_path / "out").exists()  # plan starts nothing and writes nothing
