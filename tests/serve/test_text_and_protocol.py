"""The parts of the server that need no engine: streamed text with stop strings (held back while they may
still begin one), the request checks, on plain values, and a stream's chunks encoded once but for the text."""

from __future__ import annotations

import pytest
from serving import TRAINED_TINY

from accelerate_graph.serve import protocol
from accelerate_graph.serve.protocol import ApiError, TextFrames, chunk, parse_request, read_body, sse
from accelerate_graph.serve.text import IncrementalText


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TRAINED_TINY)


def _stream(tokenizer, ids, stops=()):
    text = IncrementalText(tokenizer, list(stops))
    pieces = [text.push(token) for token in ids]
    return pieces, text


def test_streamed_pieces_add_up_to_the_whole_decode(tokenizer):
    source = "def décode(self, input):\n    return 'naïve' + \"日本語\"  # ok\n"
    ids = tokenizer(source, add_special_tokens=False)["input_ids"]
    pieces, text = _stream(tokenizer, ids)
    assert "".join(pieces) + text.finish() == tokenizer.decode(ids, skip_special_tokens=True)
    assert not any("\ufffd" in piece for piece in pieces)  # half a character never goes out


def test_a_stop_string_cuts_the_text_and_its_start_is_held_until_it_is_decided(tokenizer):
    ids = tokenizer("alpha beta gamma delta", add_special_tokens=False)["input_ids"]
    pieces, text = _stream(tokenizer, ids, stops=["gamma"])
    assert text.stopped and "".join(pieces) == "alpha beta "
    assert text.finish() == ""
    # a prefix of the stop string that turns out not to be one is released later, whole
    pieces, text = _stream(tokenizer, tokenizer("alpha gam beta", add_special_tokens=False)["input_ids"], ["gamma"])
    assert not text.stopped and "".join(pieces) + text.finish() == "alpha gam beta"


def test_without_a_tokenizer_the_ids_are_the_text():
    pieces, text = _stream(None, [5, 6, 7], stops=["6 "])
    assert "".join(pieces) == "5 " and text.stopped


def test_defaults_follow_openai():
    completion = parse_request({"prompt": "hi"}, "m", chat=False)
    assert (completion.max_tokens, completion.temperature, completion.top_p, completion.stream) == (16, 1.0, 1.0, False)
    chat = parse_request({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}, "m", chat=True)
    assert chat.max_tokens is None and chat.messages == [{"role": "user", "content": "hi"}]
    assert parse_request({"prompt": [[1, 2]], "n": 1, "logprobs": None, "user": "u"}, "m", False).prompt == [1, 2]


@pytest.mark.parametrize(
    "body, chat, param",
    [
        ({"messages": []}, True, "messages"),
        ({"messages": [{"role": "user", "content": 3}]}, True, "messages[0].content"),
        ({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -1}, True, "max_completion_tokens"),
        ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, True, "tools"),
        ({"prompt": "x", "seed": 1.5}, False, "seed"),
        ({"prompt": "x", "stream": "yes"}, False, "stream"),
        ({"prompt": "x", "stop": ""}, False, "stop"),
        ({"prompt": "x", "temperature": True}, False, "temperature"),
        (
            {"prompt": "x", "stream": True, "stream_options": {"include_usage": 1}},
            False,
            "stream_options.include_usage",
        ),
        ({"prompt": "x", "messages": []}, False, "messages"),
    ],
)
def test_each_bad_field_is_named(body, chat, param):
    with pytest.raises(ApiError) as caught:
        parse_request(body, "m", chat)
    assert caught.value.status == 400 and caught.value.param == param
    assert caught.value.body()["error"]["type"] == "invalid_request_error"


def test_a_body_must_be_a_json_object():
    for raw in (b"", b"{", b"\xff", b"[]", b"3"):
        with pytest.raises(ApiError) as caught:
            read_body(raw)
        assert caught.value.status == 400


@pytest.mark.parametrize("chat", [False, True])
def test_a_streams_text_frames_are_its_chunks_encoded_whole(monkeypatch, chat):
    monkeypatch.setattr(protocol.time, "time", lambda: 1700000000.5)
    frames = TextFrames("cmpl-0123", 'model "x"/ü', chat)
    for text in ("", "plain", 'quote " and \\ back', "naïve 日本語\n\ttab", "\x00"):
        assert frames(text) == sse(chunk("cmpl-0123", 'model "x"/ü', chat, text))
