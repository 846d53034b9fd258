"""One OpenAI-compatible server as the profiler sees it: its address, what it says about itself, and one streamed
request timed chunk by chunk (httpx, async).

Address: `--base-url` may end in /v1 or not; the API is under /v1 either way, the server's own paths (/version, /props)
under the root. What is recorded and printed is scheme://host:port/path: userinfo (sent as basic auth) and the query
(sent with every request) never reach a record or a message. A key comes from the environment variable that
`--api-key-env` names, as `Authorization: Bearer`; the flag holds a name, never the key.

Streaming (server-sent events): each `data:` line is a JSON chunk; `choices[0].text` (completions) or
`choices[0].delta.content` (chat) is text, `finish_reason` ends the response, and a chunk with `usage`
(`stream_options: {"include_usage": true}`) carries the server's token count. `data: [DONE]` ends the stream where the
server sends it (transformers serve does not: the body just ends). A response is complete only with a finish reason:
an HTTP error, a broken connection, a stream that ends without a finish reason, an error object in the stream or a
chunk that is not JSON is a `ServerFault` naming the cause, never a short figure.

Tokens: `usage.completion_tokens` where the server gives it; else the text-bearing chunks, one token each (vLLM, SGLang
and llama.cpp send a chunk per token; a server that merges tokens into one chunk when it falls behind is under-counted,
which is why the profile says which count it used).

Everything the server sends is data: strings are cut to a line of `MAX_TEXT` characters and never executed or parsed
further than JSON.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

from batchscale.errors import UserError

MAX_TEXT = 200  # characters of anything a server says that a record or an error message keeps
# where a server states its version: vLLM, SGLang, TGI, llama.cpp (its build)
VERSION_PATHS = (("/version", "version"), ("/get_server_info", "version"), ("/info", "version"),
                 ("/props", "build_info"))
DISCOVERY_TIMEOUT_S = 5.0  # each optional look-up (a version path) waits at most this long


class ServerFault(Exception):
    """A request that failed; `cause` is one line for the error message, `status` the HTTP status (None: no reply)."""

    def __init__(self, cause: str, status: int | None = None, body: str = ""):
        super().__init__(cause)
        self.cause, self.status, self.body = cause, status, body


def one_line(text: str, limit: int = MAX_TEXT) -> str:
    """A server's words as one printable line of at most `limit` characters."""
    text = re.sub(r"\s+", " ", "".join(c if c.isprintable() else " " for c in str(text))).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Address:
    api_root: str  # .../v1, without userinfo or query
    server_root: str  # the same host's root (where /version and /props live)
    url: str  # what records and messages show
    params: dict[str, str]  # the base URL's query, sent with every request
    auth: tuple[str, str] | None  # the base URL's userinfo, sent as basic auth


def parse_base_url(base_url: str) -> Address:
    """--base-url checked and split; a UserError (that never repeats credentials) if it is no http(s) URL."""
    parts = urlsplit(base_url.strip())
    netloc = parts.netloc.rsplit("@", 1)[-1]
    shown = f"{parts.scheme}://{netloc}{parts.path}" if parts.scheme else "(not a URL)"
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise UserError("--base-url", f"must be an http(s) URL with a host (and a valid port), got {shown}",
                        "pass e.g. --base-url http://127.0.0.1:8000/v1")
    path = parts.path.rstrip("/")
    root = f"{parts.scheme}://{netloc}"
    server_path = path[: -len("/v1")] if path.endswith("/v1") else path
    auth = (unquote(parts.username or ""), unquote(parts.password or "")) if parts.username is not None else None
    return Address(api_root=f"{root}{server_path}/v1", server_root=f"{root}{server_path}", url=f"{root}{path}",
                   params=dict(parse_qsl(parts.query)), auth=auth)


def api_key_headers(api_key_env: str | None) -> dict[str, str]:
    """The bearer header from the environment variable `api_key_env` names ({} without one)."""
    if api_key_env is None:
        return {}
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", api_key_env):  # never echoed: it may be the key itself
        raise UserError("--api-key-env", "must name an environment variable (letters, digits and _), never hold the "
                        "key itself", "export OPENAI_API_KEY=... and pass --api-key-env OPENAI_API_KEY")
    key = os.environ.get(api_key_env, "")
    if not key.strip():
        raise UserError(f"--api-key-env {api_key_env}", "is not set (or is empty) in this environment",
                        f"export {api_key_env}=<key>, or drop --api-key-env for a server without one")
    return {"Authorization": f"Bearer {key.strip()}"}


def make_client(address: Address, headers: dict[str, str], connect_timeout_s: float, read_timeout_s: float,
                max_connections: int):
    """The async HTTP client: bounded connect and read (the longest wait for the next bytes) timeouts; the pool
    holds a connection per request in flight, so no request waits for one."""
    import httpx

    timeout = httpx.Timeout(connect=connect_timeout_s, read=read_timeout_s, write=read_timeout_s, pool=None)
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    return httpx.AsyncClient(timeout=timeout, limits=limits, headers=headers, params=address.params,
                             auth=address.auth, follow_redirects=False, trust_env=False)


@dataclass
class StreamedResponse:
    """One streamed response's clock readings (time.perf_counter) and counts."""

    sent_s: float
    first_token_s: float | None = None  # the first chunk with text
    last_token_s: float | None = None  # the last chunk with text
    done_s: float | None = None
    text_chunks: int = 0
    usage_tokens: int | None = None  # the server's count (usage.completion_tokens)
    finish_reason: str | None = None

    @property
    def tokens(self) -> int:
        return self.usage_tokens if self.usage_tokens is not None else self.text_chunks


def request_body(endpoint: str, model: str, prompt: str, max_new_tokens: int, temperature: float, top_p: float,
                 ignore_eos: bool, stream_usage: bool) -> dict:
    """The request for one response (n = 1: a group's G responses are G requests, as a rollout sends them)."""
    body = {"model": model, "max_tokens": max_new_tokens, "temperature": temperature, "top_p": top_p, "stream": True}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if ignore_eos:
        body["ignore_eos"] = True
    if stream_usage:
        body["stream_options"] = {"include_usage": True}
    return body


def describe_transport_error(error, client) -> str:
    """An httpx error as the cause of a failed request, naming the timeout that ran out."""
    import httpx

    if isinstance(error, httpx.ConnectTimeout):
        return f"no connection within {client.timeout.connect:g} s (--connect-timeout-s)"
    if isinstance(error, httpx.TimeoutException):
        return f"the server sent nothing for {client.timeout.read:g} s (--read-timeout-s)"
    if isinstance(error, httpx.ConnectError):
        refused = any(isinstance(e, ConnectionRefusedError) for e in error_chain(error))
        return "connection refused (nothing listens there)" if refused else \
            f"cannot connect ({one_line(str(error)) or 'no reason given'})"
    return f"{type(error).__name__}: {one_line(str(error)) or 'connection closed'}"


def error_chain(error: BaseException) -> list[BaseException]:
    """The error and its causes (httpx wraps the OSError that says why a connection failed)."""
    chain = []
    while error is not None and len(chain) < 10:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


async def stream_one(client, url: str, body: dict) -> StreamedResponse:
    """POST `body` with stream: true and read its events to the end; a ServerFault unless it ends with a finish
    reason."""
    import httpx

    response = StreamedResponse(sent_s=time.perf_counter())
    chat = "messages" in body
    try:
        async with client.stream("POST", url, json=body) as reply:
            if reply.status_code >= 400:
                text = (await reply.aread()).decode("utf-8", "replace")
                raise ServerFault(f"HTTP {reply.status_code}: {one_line(text)}", reply.status_code, text[:4000])
            async for line in reply.aiter_lines():
                read_event(line, response, chat)
    except httpx.HTTPError as e:
        sent = f" after {response.tokens} tokens" if response.first_token_s is not None else ""
        cause = describe_transport_error(e, client)
        if isinstance(e, (httpx.ReadError, httpx.RemoteProtocolError)):
            cause = f"the stream dropped{sent} ({cause})"
        raise ServerFault(cause) from None
    response.done_s = time.perf_counter()
    if response.finish_reason is None:
        raise ServerFault(f"the stream ended after {response.tokens} tokens without a finish reason (a dropped "
                          "stream)")
    return response


def read_event(line: str, response: StreamedResponse, chat: bool) -> None:
    """One server-sent-event line into `response` (comments, `event:` and `id:` lines and [DONE] carry nothing)."""
    if not line.startswith("data:"):
        return
    data = line[len("data:"):].strip()
    if data == "[DONE]" or not data:
        return
    try:
        chunk = json.loads(data)
    except ValueError:
        raise ServerFault(f"a stream chunk is not JSON: {one_line(data)}") from None
    if not isinstance(chunk, dict):
        raise ServerFault(f"a stream chunk is not a JSON object: {one_line(data)}")
    if chunk.get("error") is not None:
        raise ServerFault(f"the server sent an error in the stream: {one_line(json.dumps(chunk['error']))}")
    now = time.perf_counter()
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        count = usage.get("completion_tokens")
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            response.usage_tokens = count
    choices = chunk.get("choices") or []
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise ServerFault(f"a stream chunk's choices are not a list of objects: {one_line(data)}")
    for choice in choices[:1]:  # n = 1: one choice
        delta = choice.get("delta") if chat else None
        source = delta if isinstance(delta, dict) else choice
        text = source.get("content") if chat else choice.get("text")
        if chat and not text:
            text = source.get("reasoning_content") or source.get("reasoning")  # a reasoning model's first tokens
        if isinstance(text, str) and text:
            response.text_chunks += 1
            response.first_token_s = response.first_token_s or now
            response.last_token_s = now
        if choice.get("finish_reason"):
            response.finish_reason = one_line(choice["finish_reason"], 40)


async def describe_server(client, address: Address, model: str) -> dict:
    """What the server says about itself: /v1/models (the model must be among them), a version where it gives one,
    its `server:` header. A UserError for a dead server, a refused key or a model it does not serve."""
    import httpx

    where = f"--base-url {address.url}"
    try:
        reply = await client.get(f"{address.api_root}/models")
    except httpx.HTTPError as e:
        raise UserError(where, f"GET /v1/models failed: {describe_transport_error(e, client)}",
                        "start the server (or wait until it is up), or fix --base-url") from None
    if reply.status_code in (401, 403):
        raise UserError("--api-key-env", f"the server at {address.url} refused the request (HTTP {reply.status_code}: "
                        f"{one_line(reply.text)})", "pass --api-key-env NAME of a variable holding a valid key")
    listed = None
    if reply.status_code == 200:
        try:
            data = reply.json().get("data")
            listed = [one_line(m["id"]) for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)][:100]
        except (ValueError, AttributeError, TypeError):
            raise UserError(where, f"GET /v1/models is not an OpenAI model list: {one_line(reply.text)}",
                            "point --base-url at an OpenAI-compatible server") from None
    elif reply.status_code not in (404, 405):
        raise UserError(where, f"GET /v1/models answered HTTP {reply.status_code}: {one_line(reply.text)}",
                        "check the server's log")
    if listed is not None and model not in listed:
        served = ", ".join(listed[:5]) + (", ..." if len(listed) > 5 else "") if listed else "no model"
        raise UserError(f"--model {one_line(model)}", f"the server at {address.url} serves {served}, not this name",
                        "pass --model exactly as GET /v1/models lists it")
    version, version_from = None, None
    for path, key in VERSION_PATHS:
        try:
            answer = await client.get(f"{address.server_root}{path}", timeout=DISCOVERY_TIMEOUT_S)
            value = answer.json().get(key) if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            continue
        if isinstance(value, (str, int, float)) and str(value).strip():
            version, version_from = one_line(str(value), 80), path
            break
    header = reply.headers.get("server")
    return {"model": model, "models_listed": listed, "version": version, "version_from": version_from,
            "server_header": one_line(header, 80) if header else None}
