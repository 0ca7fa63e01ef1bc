#!/usr/bin/env python3
"""Writes a small tokenizer (tokenizer.json, tokenizer_config.json with a chat template) into a directory.

Test checkpoints carry one so that text goes in and out of Baton like it does for a real checkpoint, with no
download: a BPE trained here on a fixed multilingual text (ASCII, accents, CJK, emoji, so that tokens split
UTF-8 sequences), in one of two styles:
  byte-level  Llama 3 / Qwen2: ByteLevel pre-tokenizer and decoder, a BOS added by the post-processor;
  metaspace   Llama 2 / Mistral: "▁" for spaces, the decoder drops the first token's leading space.
  words       one word per id ("w5 w77 ..."), the special tokens first, as many ids as --vocab: a benchmark
              checkpoint's whole vocabulary decodes to text (each generated token is a word of its own), and
              a prompt of N words is N tokens (and a BOS) on every server.
The special tokens and the chat template follow Llama 3's. The result depends only on the arguments.

    python3 scripts/checkpoints/tiny_tokenizer.py DIR [--style byte-level|metaspace|words] [--vocab 512]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
BOS, EOS, EOT = SPECIAL[0], SPECIAL[1], SPECIAL[4]

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim"
    " + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

CORPUS = [
    "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.",
    "Baton keeps the decode loop on the GPU: the scheduler admits, chunks and retires sequences itself.",
    "A prompt is read in chunks of the step's token budget; each decoding sequence feeds one token.",
    "Les élèves étudient l'été à Genève; naïve façade, crème brûlée, où est la gare?",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein. Straße, Größe, Äpfel.",
    "東京は日本の首都です。 大規模言語モデルは文章を生成します。 你好，世界！",
    "Emoji travel in four bytes: 🚀 🎉 👍🏽 🧪 and a family 👨‍👩‍👧 joined by zero-width joiners.",
    "Numbers 0123456789, symbols ~!@#$%^&*()_+{}|:\"<>? and tabs\tand\nnewlines.",
    "def generate(prompt, max_tokens=16):\n    return llm.generate([prompt], SamplingParams(max_tokens))",
] * 4


def build(style: str, vocab: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    if style == "words":
        words = {token: i for i, token in enumerate(SPECIAL + ["<unk>"])}
        words.update({f"w{i}": i for i in range(len(words), vocab)})
        tokenizer = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
        tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tokenizer.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
        tokenizer.add_special_tokens(SPECIAL)
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, words[BOS])])
        return tokenizer
    if style == "byte-level":
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    elif style == "metaspace":
        tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
        tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
        alphabet = []
    else:
        raise ValueError(f"--style {style!r}: use byte-level, metaspace or words")
    special = SPECIAL + (["<unk>"] if style == "metaspace" else [])
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=special, initial_alphabet=alphabet,
                                  show_progress=False)
    tokenizer.train_from_iterator(CORPUS, trainer)
    bos = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos)])
    return tokenizer


def write(directory: pathlib.Path, style: str = "byte-level", vocab: int = 512) -> pathlib.Path:
    """Writes the tokenizer files into `directory` (created if missing); returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = build(style, vocab)
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOT,
        "model_max_length": 131072,
        "chat_template": CHAT_TEMPLATE,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return directory


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("directory", type=pathlib.Path)
    parser.add_argument("--style", default="byte-level", choices=["byte-level", "metaspace", "words"])
    parser.add_argument("--vocab", type=int, default=512, help="most tokens (the training text may give fewer)")
    args = parser.parse_args(argv)
    write(args.directory, args.style, args.vocab)
    return 0


if __name__ == "__main__":
    sys.exit(main())
