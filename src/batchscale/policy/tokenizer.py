"""The built-in tokenizer: one token per printable ASCII character, plus <pad>, <bos>, <eos>, <unk>.

Built with the `tokenizers` library and wrapped as a `PreTrainedTokenizerFast`, so it saves and loads like any Hugging
Face tokenizer (AutoTokenizer.from_pretrained on the model directory). Character-level tokens keep arithmetic
digit-aligned and the vocabulary at 99 entries.
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from tokenizers.processors import TemplateProcessing
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"]
CHARACTERS = [c for c in string.printable if c not in "\t\n\r\x0b\x0c"]


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")  # every character is a word
    tok.decoder = decoders.Fuse()  # join characters back without spaces
    tok.post_processor = TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )
