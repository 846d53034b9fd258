"""`batchscale profile generation` on a tiny run: the JSON schema, the knee, and bad input -> exit code 2."""

from __future__ import annotations

import json

import pytest

from batchscale import cli
from batchscale.profile.options import default_concurrencies


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_json_on_a_tiny_run(capsys, random_model_dir):
    args = ["profile", "generation", "--model", str(random_model_dir), "--concurrency", "1,2,4", "--repeats", "1",
            "--waves", "1", "--min-responses", "4", "--samples-per-prompt", "2", "--max-new-tokens", "6", "--json"]
    assert cli.main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) >= {"rows", "knee", "model", "backend", "sampling"}
    assert [row["concurrency"] for row in result["rows"]] == [1, 2, 4]
    for row in result["rows"]:
        assert {"concurrency", "tokens_per_s", "responses_per_s", "active_mean", "time_s", "peak_rss_mb",
                "response_length_mean"} <= set(row)
        assert row["tokens_per_s"] > 0 and row["responses"] == max(4, row["concurrency"])
        assert 1 <= row["active_mean"] <= row["concurrency"]
        assert row["tokens"] == pytest.approx(row["response_length_mean"] * row["responses"])
    assert result["rows"][0]["active_mean"] == 1
    knee = result["knee"]
    assert knee["metric"] == "tokens_per_s" and knee["q_max"] > 0 and knee["b_90"] == pytest.approx(9 * knee["b_half"])


def test_default_levels():
    assert default_concurrencies(8) == [1, 2, 4, 8]
    assert default_concurrencies(12) == [1, 2, 4, 8, 12]


@pytest.mark.parametrize("args", [["--concurrency", "1,x"], ["--concurrency", "0,2"], ["--backend", "vllm"],
                                  ["--repeats", "0"], ["--model", "/no/such/dir"]])
def test_bad_input_exits_2(capsys, args):
    assert cli.main(["profile", "generation", "--concurrency", "1,2", *args]) == 2
    assert "error" in capsys.readouterr().err.lower()
