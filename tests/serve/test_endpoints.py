"""The real server on loopback, through the `openai` client: completions and chat, whole and streamed, the
model list, health, metrics, and every refusal as OpenAI's error object with its status."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request

import pytest
from serving import TRAINED_TINY, client, openai, running

PROMPT = "def main("  # the trained tiny model writes Python


def _post(url: str, path: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(url + path, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _get(url: str, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url + path, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_a_completion_whole_and_streamed_say_the_same_with_usage(server):
    url, service = server
    api = client(url)
    whole = api.completions.create(model=service.served.name, prompt=PROMPT, max_tokens=12, temperature=0)
    assert whole.object == "text_completion" and whole.choices[0].finish_reason in ("stop", "length")
    assert whole.usage.prompt_tokens == len(service.served.tokenizer(PROMPT)["input_ids"])
    assert 1 <= whole.usage.completion_tokens <= 12 and whole.choices[0].text
    chunks = list(
        api.completions.create(
            model=service.served.name,
            prompt=PROMPT,
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.model_dump() == whole.usage.model_dump()


def test_chat_whole_and_streamed_through_the_template(server):
    url, service = server
    api = client(url)
    messages = [{"role": "user", "content": "Tell me a story."}]
    whole = api.chat.completions.create(model=service.served.name, messages=messages, max_tokens=10, temperature=0)
    assert whole.object == "chat.completion" and whole.choices[0].message.role == "assistant"
    templated = service.served.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    assert whole.usage.prompt_tokens == len(templated["input_ids"])
    stream = api.chat.completions.create(
        model=service.served.name, messages=messages, max_tokens=10, temperature=0, stream=True
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_stop_strings_cut_the_text_before_them(server):
    url, service = server
    api = client(url)
    free = api.completions.create(model=service.served.name, prompt=PROMPT, max_tokens=24, temperature=0)
    text = free.choices[0].text
    stop = next(text[i : i + 2] for i in range(len(text) // 3, len(text)) if len(text[i : i + 2].strip()) == 2)
    cut = api.completions.create(model=service.served.name, prompt=PROMPT, max_tokens=24, temperature=0, stop=[stop])
    assert cut.choices[0].text == text[: text.index(stop)] and cut.choices[0].finish_reason == "stop"
    streamed = api.completions.create(
        model=service.served.name, prompt=PROMPT, max_tokens=24, temperature=0, stop=stop, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed) == cut.choices[0].text


def test_token_id_prompts_models_health_and_metrics(server):
    url, service = server
    api = client(url)
    done = api.completions.create(model=service.served.name, prompt=[5, 6, 7, 8], max_tokens=3, temperature=0)
    assert done.usage.prompt_tokens == 4 and done.usage.completion_tokens <= 3
    assert [m.id for m in api.models.list().data] == [service.served.name]
    assert _get(url, "/health") == (200, '{"status":"ok"}')
    status, text = _get(url, "/metrics")
    assert status == 200
    assert 'cugraph_accel_serve_requests_total{outcome="ok"} 1' in text
    assert "cugraph_accel_serve_prompt_tokens_total 4" in text
    assert 'cugraph_accel_serve_step_seconds_count{kind="decode"}' in text
    series = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert float(series["cugraph_accel_serve_engine_wait_seconds_total"]) > 0  # it read the tokens of 3 steps
    assert float(series['cugraph_accel_serve_device_seconds_total{kind="decode"}']) == 0  # timed on CUDA only


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"n": 2}, "n"),
        ({"logprobs": 2}, "logprobs"),
        ({"best_of": 3}, "best_of"),
        ({"echo": True}, "echo"),
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"prompt": ["one", "two"]}, "prompt"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": [1, 99999]}, "prompt"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"frobnicate": 1}, "frobnicate"),
    ],
)
def test_a_refused_field_is_400_naming_it(server, extra, param):
    url, service = server
    body = {"model": service.served.name, "prompt": "Hello", **extra}
    status, error = _post(url, "/v1/completions", json.dumps(body).encode())
    assert status == 400, error
    assert error["error"]["param"] == param and error["error"]["type"] == "invalid_request_error"
    assert param.split(".")[0] in error["error"]["message"]


def test_the_openai_client_sees_400_and_bad_json_is_400(server):
    url, service = server
    with pytest.raises(openai.BadRequestError) as caught:
        client(url).completions.create(model=service.served.name, prompt="Hi", n=2)
    assert caught.value.body["param"] == "n"
    status, error = _post(url, "/v1/chat/completions", b"{not json")
    assert status == 400 and "not valid JSON" in error["error"]["message"]
    status, error = _post(url, "/v1/completions", b"[1, 2]")
    assert status == 400 and "JSON object" in error["error"]["message"]
    status, error = _post(url, "/v1/completions", json.dumps({"model": "other", "prompt": "Hi"}).encode())
    assert status == 404 and error["error"]["code"] == "model_not_found"


def test_a_prompt_longer_than_the_cache_is_400(server):
    url, service = server
    too_long = list(range(10, 10 + service.served.max_len))
    with pytest.raises(openai.BadRequestError) as caught:
        client(url).completions.create(model=service.served.name, prompt=too_long, max_tokens=1)
    assert caught.value.body["code"] == "context_length_exceeded"
    assert str(service.served.max_len) in caught.value.body["message"]
    fits = client(url).completions.create(model=service.served.name, prompt=too_long[:-1], max_tokens=5)
    # the cache holds the prompt and every token but the last: one slot left gives two tokens
    assert fits.choices[0].finish_reason == "length" and fits.usage.completion_tokens == 2


def test_chat_without_a_template_is_400(prepared, tmp_path):
    from transformers import AutoTokenizer

    shutil.copytree(TRAINED_TINY, tmp_path / "model", ignore=shutil.ignore_patterns("chat_template.jinja"))
    with running(prepared) as (url, service):
        service.served.tokenizer = AutoTokenizer.from_pretrained(tmp_path / "model")
        with pytest.raises(openai.BadRequestError) as caught:
            client(url).chat.completions.create(
                model=service.served.name, messages=[{"role": "user", "content": "Hi"}], max_tokens=2
            )
    assert caught.value.body["param"] == "messages" and caught.value.body["code"] == "no_chat_template"
    assert "/v1/completions" in caught.value.body["message"]
