"""`batchscale profile generation --backend openai` against a real OpenAI-compatible server started here
(`transformers serve` on a tiny random Llama, loopback only), and its failures, each one `error:` line and exit 2:
a dead server, a server that never answers, a wrong model name, a stream that stops midway."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys

import pytest

from batchscale import cli
from batchscale.profile.local_server import free_port, local_server
from batchscale.profile.openai_client import api_key_headers, parse_base_url
from batchscale.profile.openai_server import union_length
from batchscale.rundir import GenerationProfile, read_document
from openai_fakes import LoopbackServer

SERVE_NEEDS = ("fastapi", "uvicorn", "openai")
SMALL = ["--repeats", "1", "--waves", "1", "--min-responses", "4", "--samples-per-prompt", "2"]


def profile(capsys, base_url: str, model: str, *args: str) -> tuple[int, str, str]:
    code = cli.main(["profile", "generation", "--backend", "openai", "--base-url", base_url, "--model", model, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture(scope="module")
def served_model(tmp_path_factory, random_model_dir):
    """transformers serve (its OpenAI-compatible FastAPI server) on the random tiny Llama, given a chat template so
    that both endpoints work; yields (base URL, model id)."""
    missing = [name for name in SERVE_NEEDS if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"transformers serve needs {', '.join(missing)}: pip install -e '.[test]'")
    model_dir = tmp_path_factory.mktemp("served") / "model"
    shutil.copytree(random_model_dir, model_dir)
    (model_dir / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    command = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(model_dir), "--host", "127.0.0.1",
               "--port", "{port}", "--device", "cpu", "--log-level", "warning"]
    with local_server(command, model_dir.parent / "serve.log", start_timeout_s=240,
                      env={"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}) as url:
        yield url, str(model_dir)


@pytest.mark.slow
def test_a_real_server_is_profiled_in_the_engine_profiles_schema(capsys, tmp_path, served_model):
    base_url, model = served_model
    code, out, err = profile(capsys, base_url, model, "--concurrency", "1,2", "--max-new-tokens", "4", *SMALL,
                             "--json")
    assert code == 0, err
    path = tmp_path / "generation.json"
    path.write_text(out)
    document = read_document(path, GenerationProfile)  # the one schema plan and report read
    assert document.backend == "openai" and document.device == "server" and document.threads is None
    server = document.server
    assert server.url == base_url and server.model == model and server.models_listed == [model]
    assert server.endpoint == "completions" and server.server_header == "uvicorn"
    # transformers serve rejects unknown fields (HTTP 422), ignore_eos among them: measured with EOS allowed, and said
    assert server.ignore_eos == "refused" and "ignore_eos" in server.ignore_eos_note
    assert "refused ignore_eos" in err
    assert server.stream_usage and server.tokens_from == "usage"
    assert [row.concurrency for row in document.rows] == [1, 2]
    for row in document.rows:
        assert row.responses == max(4, row.concurrency) and 0 < row.tokens <= 4 * row.responses
        assert row.tokens_per_s == pytest.approx(row.tokens / row.time_s)
        assert 0 < row.active_mean <= row.concurrency + 1e-9  # requests in flight, time-weighted
        assert 0 < row.ttft_s_median <= row.time_s and row.peak_rss_mb is None
        assert row.stopped_early <= row.responses
        if row.stopped_early == 0:
            assert row.tokens == 4 * row.responses
    assert document.rows[0].active_mean == pytest.approx(1.0, abs=0.05)
    assert document.knee is not None and document.knee.metric == "tokens_per_s"
    assert document.measured_on.startswith(f"the openai server at {base_url} (model {model}")


@pytest.mark.slow
def test_the_chat_endpoint_and_eos_allowed(capsys, served_model):
    base_url, model = served_model
    code, out, err = profile(capsys, base_url, model, "--concurrency", "1", "--max-new-tokens", "3", *SMALL,
                             "--endpoint", "chat", "--no-ignore-eos", "--threads", "1", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["server"]["endpoint"] == "chat" and result["server"]["ignore_eos"] == "off"
    assert result["threads"] == 1 and result["knee"] is None  # one level: no knee
    assert result["rows"][0]["response_length_max"] <= 3


@pytest.mark.slow
def test_a_wrong_model_name_is_one_error_line(capsys, served_model):
    base_url, model = served_model
    code, out, err = profile(capsys, base_url, "no-such-model", "--concurrency", "1", *SMALL)
    assert code == 2 and out == ""
    line = one_error(err)
    assert "--model no-such-model" in line and model in line


def test_a_dead_server_is_one_error_line(capsys):
    code, out, err = profile(capsys, f"http://127.0.0.1:{free_port()}/v1", "m", "--concurrency", "1", *SMALL)
    assert code == 2 and out == ""
    assert "connection refused" in one_error(err)


def test_a_server_that_never_answers_times_out(capsys):
    with LoopbackServer("silent") as server:
        code, out, err = profile(capsys, server.base_url, "fake-model", "--concurrency", "1", "--read-timeout-s",
                                 "0.5", *SMALL)
    assert code == 2 and out == ""
    assert "sent nothing for 0.5 s (--read-timeout-s)" in one_error(err)


@pytest.mark.parametrize("failure, cause", [
    ("half_stream", "the stream dropped after 2 tokens"),
    ("no_finish", "without a finish reason"),
    ("hang", "sent nothing for 0.5 s"),
    ("http500", "HTTP 500: {\"error\": {\"message\": \"engine crashed\"}}"),
])
def test_a_level_that_fails_midway_names_the_level(capsys, failure, cause):
    # the first request (negotiation) and the warm-up pass succeed: the first timed request fails
    with LoopbackServer(failure, good_requests=2) as server:
        code, out, err = profile(capsys, server.base_url, "fake-model", "--concurrency", "1,2", "--read-timeout-s",
                                 "0.5", "--max-new-tokens", "5", *SMALL)
    assert code == 2 and out == ""
    line = one_error(err)
    assert line.startswith("error: concurrency 1: ") and cause in line


def test_a_well_behaved_server_honours_ignore_eos(capsys):
    with LoopbackServer("hang", good_requests=100) as server:
        code, out, err = profile(capsys, server.base_url, "fake-model", "--concurrency", "1,2", "--max-new-tokens",
                                 "5", *SMALL, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["server"]["ignore_eos"] == "honoured" and result["server"]["tokens_from"] == "usage"
    assert all(row["response_length_mean"] == 5 and row["stopped_early"] == 0 for row in result["rows"])


def test_the_url_keeps_no_credentials_and_the_key_comes_from_the_environment(monkeypatch):
    address = parse_base_url("https://user:pw@example.org:8443/api/v1/?key=secret")
    assert address.url == "https://example.org:8443/api/v1" and address.api_root == address.url
    assert address.server_root == "https://example.org:8443/api" and address.auth == ("user", "pw")
    assert address.params == {"key": "secret"}
    assert parse_base_url("http://h:8000").api_root == "http://h:8000/v1"
    monkeypatch.setenv("MY_KEY", "sk-123")
    assert api_key_headers("MY_KEY") == {"Authorization": "Bearer sk-123"}


@pytest.mark.parametrize("args, field", [
    (["--base-url", "ftp://user:pw@h/v1", "--model", "m"], "--base-url"),
    (["--base-url", "http://h/v1", "--model", "m", "--api-key-env", "sk-secret-key"], "--api-key-env"),
    (["--base-url", "http://h/v1", "--model", "m", "--api-key-env", "UNSET_VARIABLE_42"], "--api-key-env"),
    (["--base-url", "http://h/v1", "--model", "m", "--endpoint", "embeddings"], "--endpoint"),
    (["--base-url", "http://h/v1", "--model", "m", "--read-timeout-s", "0"], "--read-timeout-s"),
    (["--base-url", "http://h/v1", "--model", "m", "--hardware", "H100-SXM"], "--shape"),
    (["--base-url", "http://h/v1", "--model", "tiny", "--hardware", "H100-SXM"], "--dtype"),
    (["--base-url", "http://h/v1"], "--backend openai"),
])
def test_bad_server_options_fail_before_any_request(capsys, monkeypatch, args, field):
    monkeypatch.delenv("UNSET_VARIABLE_42", raising=False)
    assert cli.main(["profile", "generation", "--backend", "openai", "--concurrency", "1", *args]) == 2
    line = one_error(capsys.readouterr().err)
    assert line.startswith(f"error: {field}") and "secret" not in line and "pw" not in line


def test_server_flags_need_the_openai_backend(capsys):
    assert cli.main(["profile", "generation", "--base-url", "http://h/v1", "--concurrency", "1"]) == 2
    assert one_error(capsys.readouterr().err).startswith("error: --base-url: applies to --backend openai only")


def test_union_length():
    assert union_length([]) == 0
    assert union_length([(0, 2), (1, 3), (5, 6), (5.5, 5.7)]) == pytest.approx(4)
