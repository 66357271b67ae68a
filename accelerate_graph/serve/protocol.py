"""The OpenAI wire format: request bodies checked into GenerationParams, and the JSON of responses and chunks.

Every refusal is an ApiError naming the field, rendered as OpenAI's error object. Nothing here touches the
engine or the network, so each rule is tested on plain dicts.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from dataclasses import dataclass, field

MAX_STOP_STRINGS = 4  # OpenAI's limit
# Fields a client may send that change nothing here (accepted and ignored).
IGNORED_FIELDS = {"user", "metadata", "store", "service_tier", "parallel_tool_calls"}
# Fields and their values that mean "off" (null always does): any other value is refused by name.
UNSUPPORTED = {
    "n": (1,),
    "best_of": (1,),
    "logprobs": (False,),
    "top_logprobs": (0,),
    "echo": (False,),
    "suffix": ("",),
    "logit_bias": ({},),
    "presence_penalty": (0,),
    "frequency_penalty": (0,),
    "tools": ([],),
    "tool_choice": ("none",),
    "functions": ([],),
    "function_call": ("none",),
    "response_format": ({"type": "text"},),
    "modalities": (["text"],),
    "audio": (),
    "prediction": (),
}
COMMON_FIELDS = {"model", "max_tokens", "temperature", "top_p", "seed", "stop", "stream", "stream_options"}
COMPLETION_FIELDS = COMMON_FIELDS | {"prompt"}
CHAT_FIELDS = COMMON_FIELDS | {"messages", "max_completion_tokens"}
DEFAULT_COMPLETION_TOKENS = 16  # OpenAI's default for /v1/completions; chat runs to the cache's end


class ApiError(Exception):
    """A refused request: HTTP `status` and OpenAI's error object."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str | None = None, code=None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind or _KINDS.get(status, "server_error")
        self.code = code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


_KINDS = {
    400: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "service_unavailable",
}


def bad(param: str | None, message: str, code: str | None = None) -> ApiError:
    return ApiError(400, message, param, code=code)


@dataclass
class GenerationParams:
    """One request, checked: what to feed and how to sample and stop."""

    prompt: str | list[int] | None = None  # /v1/completions: text or token ids
    messages: list[dict] | None = None  # /v1/chat/completions
    max_tokens: int | None = None  # None: until the cache ends
    temperature: float = 1.0  # OpenAI's default; 0: greedy
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False

    @property
    def chat(self) -> bool:
        return self.messages is not None


def read_body(raw: bytes) -> dict:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise bad(None, f"the request body is not valid JSON: {err}. Send one JSON object.") from err
    if not isinstance(body, dict):
        raise bad(None, "the request body must be a JSON object.")
    return body


def parse_request(body: dict, served_model: str, chat: bool) -> GenerationParams:
    """The request's parameters, or an ApiError naming the first field this server cannot honour."""
    known = CHAT_FIELDS if chat else COMPLETION_FIELDS
    for name, value in body.items():
        if name in UNSUPPORTED:
            if value is not None and value not in UNSUPPORTED[name]:
                raise bad(name, f"'{name}' = {json.dumps(value)} is not supported by this server; leave it out.")
        elif name not in known and name not in IGNORED_FIELDS:
            raise bad(name, f"unrecognized request field '{name}'; leave it out.")
    model = body.get("model")
    if model is not None and model != served_model:
        raise ApiError(
            404,
            f"the model '{model}' is not served here; this server serves '{served_model}'.",
            "model",
            code="model_not_found",
        )
    params = GenerationParams(
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, low_open=True),
        seed=_integer(body, "seed", None, -(2**63), 2**64 - 1),
        stop=_stop(body.get("stop")),
        stream=_flag(body, "stream"),
    )
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict) or set(options) - {"include_usage", "continuous_usage_stats"}:
            raise bad("stream_options", "'stream_options' takes only {\"include_usage\": true|false}.")
        if not params.stream:
            raise bad("stream_options", "'stream_options' is only allowed with \"stream\": true.")
        params.include_usage = _flag(options, "include_usage", "stream_options.include_usage")
    if chat:
        limit = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
        params.max_tokens = _integer(body, limit, None, 1, None)
        params.messages = _messages(body.get("messages"))
    else:
        params.max_tokens = _integer(body, "max_tokens", DEFAULT_COMPLETION_TOKENS, 1, None)
        params.prompt = _prompt(body.get("prompt"))
    return params


def _number(body: dict, name: str, default: float, low: float, high: float, low_open: bool = False) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise bad(name, f"'{name}' must be a number, not {json.dumps(value)}.")
    if value < low or value > high or (low_open and value == low):
        interval = f"({low}, {high}]" if low_open else f"[{low}, {high}]"
        raise bad(name, f"'{name}' = {value} is outside {interval}.")
    return float(value)


def _integer(body: dict, name: str, default, low: int, high: int | None):
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(name, f"'{name}' must be a whole number, not {json.dumps(value)}.")
    if value < low or (high is not None and value > high):
        raise bad(name, f"'{name}' = {value} is too {'small' if value < low else 'large'} (at least {low}).")
    return value


def _flag(body: dict, name: str, param: str | None = None) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad(param or name, f"'{param or name}' must be true or false, not {json.dumps(value)}.")
    return value


def _stop(value) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise bad("stop", "'stop' must be a string or a list of strings.")
    if len(stops) > MAX_STOP_STRINGS:
        raise bad("stop", f"'stop' holds {len(stops)} strings; at most {MAX_STOP_STRINGS} are allowed.")
    if any(s == "" for s in stops):
        raise bad("stop", "'stop' holds an empty string; every stop string needs at least one character.")
    return list(stops)


def _is_ids(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)


def _prompt(value) -> str | list[int]:
    if isinstance(value, list) and len(value) == 1 and (isinstance(value[0], str) or _is_ids(value[0])):
        value = value[0]  # a batch of one
    if isinstance(value, str) or (_is_ids(value) and value):
        if len(value) == 0:
            raise bad("prompt", "'prompt' is empty; give at least one character or token id.")
        return value
    if isinstance(value, list) and value and all(isinstance(v, (str, list)) for v in value):
        raise bad("prompt", "'prompt' holds several prompts; send one request per prompt.")
    raise bad("prompt", "'prompt' must be a non-empty string or a list of token ids (whole numbers >= 0).")


def _messages(value) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise bad("messages", '\'messages\' must be a non-empty list of {"role", "content"} objects.')
    checked = []
    for number, message in enumerate(value):
        where = f"messages[{number}]"
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise bad(where, f"'{where}' must be an object with a string 'role'.")
        content = message.get("content")
        if isinstance(content, list):  # content parts: text only
            if not all(
                isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
            ):
                raise bad(f"{where}.content", f"'{where}.content' parts must all be text parts here.")
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise bad(f"{where}.content", f"'{where}.content' must be a string or a list of text parts.")
        checked.append({"role": message["role"], "content": content})
    return checked


# responses ------------------------------------------------------------------------------------------------------


def new_id(chat: bool) -> str:
    return ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def whole_response(request_id: str, model: str, chat: bool, text: str, finish: str, used: dict) -> dict:
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None}
    else:
        choice = {"index": 0, "text": text, "logprobs": None}
    return {
        "id": request_id,
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{**choice, "finish_reason": finish}],
        "usage": used,
    }


def chunk(request_id: str, model: str, chat: bool, text: str | None, finish: str | None = None, role=False) -> dict:
    """One streamed piece: `text` new (None: nothing), `finish` on the last; chat's first carries the role."""
    if chat:
        delta = {"role": "assistant"} if role else {}
        if text is not None:
            delta["content"] = text
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
    return {
        "id": request_id,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
    }


def usage_chunk(request_id: str, model: str, chat: bool, used: dict) -> dict:
    """The last chunk under stream_options.include_usage: no choice, the whole request's usage."""
    return {
        "id": request_id,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [],
        "usage": used,
    }


def sse(payload: dict | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


class TextFrames:
    """One stream's text chunks as server-sent events: all but the text is the stream's own (id, model,
    time), so it is encoded once and a token costs the encoding of its text alone."""

    _MARK = "\x00text\x00"  # no id or model name holds a NUL

    def __init__(self, request_id: str, model: str, chat: bool):
        encoded = sse(chunk(request_id, model, chat, self._MARK))
        self._head, self._tail = encoded.split(json.dumps(self._MARK).encode())

    def __call__(self, text: str) -> bytes:
        return self._head + json.dumps(text).encode() + self._tail
