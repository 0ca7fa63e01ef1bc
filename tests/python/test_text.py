"""The text layer against the tokenizer itself: round trips, streamed text equal to decode() of all the ids,
stop strings never streamed, the chat template, and clear errors."""

import json

import pytest

from baton import StopMatcher, TextCodec
from conftest import CORPUS


def test_round_trip_of_text_the_tokenizer_was_trained_on(codec):
    for line in CORPUS[:9]:
        ids = codec.encode(line)
        assert ids[0] == codec.encode("", add_special_tokens=True)[0]  # the BOS
        assert codec.decode(ids) == line
        assert codec.decode(codec.encode(line, add_special_tokens=False)) == line


def _stream(codec, ids, rng, chunked):
    detok = codec.detokenizer()
    pieces, i = [], 0
    while i < len(ids):
        n = rng.randint(1, 4) if chunked else 1
        pieces.append(detok.add(ids[i:i + n]))
        i += n
    pieces.append(detok.finish())
    return pieces


@pytest.mark.parametrize("chunked", [False, True])
def test_streamed_text_is_decode_of_all_the_ids(codec, rng, chunked):
    # Real text (tokens that split UTF-8 sequences included) and random ids (any byte order at all).
    samples = [codec.encode(line, add_special_tokens=False) for line in CORPUS[:9]]
    samples += [[rng.randrange(codec.vocab_size) for _ in range(rng.randint(1, 60))] for _ in range(200)]
    for k, ids in enumerate(samples):
        pieces = _stream(codec, ids, rng, chunked)
        assert "".join(pieces) == codec.decode(ids), ids
        if k < 9:  # real text: no piece ends inside a character
            assert not any("\ufffd" in p for p in pieces), pieces


def test_a_piece_waits_for_the_rest_of_its_character(codec):
    ids = codec.encode("🚀", add_special_tokens=False)
    if len(ids) < 2:
        pytest.skip("this tokenizer keeps 🚀 in one token")
    detok = codec.detokenizer()
    assert detok.add(ids[:1]) == ""
    assert "".join(detok.add([i]) for i in ids[1:]) + detok.finish() == "🚀"


def _stop_stream(text, stops, rng):
    matcher, shown, stopped = StopMatcher(stops), [], False
    i = 0
    while i < len(text) and not stopped:
        n = rng.randint(1, 5)
        piece, stopped = matcher.feed(text[i:i + n])
        shown.append(piece)
        i += n
    shown.append(matcher.finish())
    return "".join(shown), stopped, shown


def test_stop_strings_cut_the_text_before_the_first_match_and_are_never_streamed(rng):
    alphabet = "ab\n"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        stops = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
        shown, stopped, pieces = _stop_stream(text, stops, rng)
        # The first stop to complete as the text grows, whatever the pieces: the match with the earliest end.
        ends = [(i + len(s), i) for s in stops for i in [text.find(s)] if i >= 0]
        expected = text[:min(ends)[1]] if ends else text
        assert shown == expected, (text, stops, pieces)
        assert stopped == bool(ends)
        # A piece never needs taking back: no prefix of what was shown contains a stop string.
        assert not any(s in shown for s in stops)


def test_chat_template_renders_like_transformers(codec):
    text = codec.apply_chat_template([{"role": "user", "content": " hi "}])
    assert text == ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n")
    ids = codec.encode(text, add_special_tokens=False)
    assert codec.decode(ids, skip_special_tokens=False) == text


def test_missing_tokenizer_names_the_file_and_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        TextCodec.from_dir(tmp_path)
    assert str(tmp_path / "tokenizer.json") in str(error.value)
    assert "token ids" in str(error.value)


def test_a_checkpoint_without_a_chat_template_says_so(codec, tmp_path):
    bare = TextCodec(codec._tokenizer, {})
    with pytest.raises(ValueError, match="no chat template"):
        bare.apply_chat_template([{"role": "user", "content": "hi"}])


def test_broken_tokenizer_config_names_the_file(tmp_path, codec):
    codec._tokenizer.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="tokenizer_config.json is not valid JSON"):
        TextCodec.from_dir(tmp_path)


def test_chat_template_file_is_read_when_the_config_has_none(tmp_path, codec):
    codec._tokenizer.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<|begin_of_text|>"}))
    (tmp_path / "chat_template.jinja").write_text("{{ bos_token }}{{ messages[0]['content'] }}")
    assert TextCodec.from_dir(tmp_path).apply_chat_template([{"role": "user", "content": "x"}]) == \
        "<|begin_of_text|>x"
