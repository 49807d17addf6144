#!/usr/bin/env python3
"""Reference for worker/tokenizer: GPT-2's encoder.py (openai/gpt-2,
src/encoder.py), ported to Python 3 as it is, plus a small BPE trainer that
writes a GPT-2-format vocab.json + merges.txt pair for the tests.

    gpt2_reference.py make-files DIR TEXTS.json MERGES
        trains MERGES merges on the texts (the most frequent pair of
        adjacent symbols within GPT-2's pre-tokenized pieces; ties: the
        smaller pair) and writes DIR/vocab.json (ids as GPT-2's: the 256 byte
        symbols in bytes_to_unicode order, then the merges, then
        <|endoftext|>) and DIR/merges.txt
    gpt2_reference.py encode DIR TEXTS.json OUT.json
        OUT.json: for each text {"pieces": [...], "ids": [...]} as
        encoder.py's Encoder gives them

The pre-tokenization regex is GPT-2's, through the `regex` module (Debian
python3-regex) as encoder.py does. Without it, a regex-free scanner with the
same semantics on unicodedata's categories stands in (\\p{L}: L*, \\p{N}:
N*, \\s: str.isspace() minus U+001C..U+001F, i.e. Unicode White_Space).
"""
import json
import os
import sys
import unicodedata
from functools import lru_cache

PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

try:
    import regex

    _PAT = regex.compile(PATTERN)

    def pieces_of(text):
        return regex.findall(_PAT, text)
except ImportError:  # the regex-free stand-in
    def _cls(ch):
        cat = unicodedata.category(ch)
        if cat[0] == "L":
            return "L"
        if cat[0] == "N":
            return "N"
        if ch.isspace() and not "\x1c" <= ch <= "\x1f":
            return "S"
        return "O"

    def pieces_of(text):
        out, i, n = [], 0, len(text)
        while i < n:
            c = text[i]
            if c == "'" and i + 1 < n and text[i + 1] in "stmd":
                j = i + 2
            elif c == "'" and text[i + 1:i + 3] in ("re", "ve", "ll"):
                j = i + 3
            elif c == " " and i + 1 < n and _cls(text[i + 1]) != "S":
                k = _cls(text[i + 1])
                j = i + 2
                while j < n and _cls(text[j]) == k:
                    j += 1
            elif _cls(c) != "S":
                k = _cls(c)
                j = i + 1
                while j < n and _cls(text[j]) == k:
                    j += 1
            else:
                j = i
                while j < n and _cls(text[j]) == "S":
                    j += 1
                if j < n and j - i > 1:
                    j -= 1  # \s+(?!\S): leave the last space for the next piece
            out.append(text[i:j])
            i = j
        return out


@lru_cache()
def bytes_to_unicode():
    """GPT-2's table: printable bytes stand for themselves, the rest for U+0100 onwards."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(2 ** 8):
        if b not in bs:
            bs.append(b)
            cs.append(2 ** 8 + n)
            n += 1
    cs = [chr(n) for n in cs]
    return dict(zip(bs, cs))


def get_pairs(word):
    pairs = set()
    prev_char = word[0]
    for char in word[1:]:
        pairs.add((prev_char, char))
        prev_char = char
    return pairs


class Encoder:
    """encoder.py's Encoder, unchanged but for Python 3 spelling."""

    def __init__(self, encoder, bpe_merges):
        self.encoder = encoder
        self.decoder = {v: k for k, v in self.encoder.items()}
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {v: k for k, v in self.byte_encoder.items()}
        self.bpe_ranks = dict(zip(bpe_merges, range(len(bpe_merges))))
        self.cache = {}

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        pairs = get_pairs(word)
        if not pairs:
            return token
        while True:
            bigram = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float("inf")))
            if bigram not in self.bpe_ranks:
                break
            first, second = bigram
            new_word = []
            i = 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                    new_word.extend(word[i:j])
                    i = j
                except ValueError:
                    new_word.extend(word[i:])
                    break
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            if len(word) == 1:
                break
            pairs = get_pairs(word)
        word = " ".join(word)
        self.cache[token] = word
        return word

    def encode(self, text):
        bpe_tokens = []
        for token in pieces_of(text):
            token = "".join(self.byte_encoder[b] for b in token.encode("utf-8"))
            bpe_tokens.extend(self.encoder[bpe_token] for bpe_token in self.bpe(token).split(" "))
        return bpe_tokens

    def decode(self, tokens):
        text = "".join([self.decoder[token] for token in tokens])
        return bytearray([self.byte_decoder[c] for c in text]).decode("utf-8", errors="replace")


def get_encoder(directory):
    with open(os.path.join(directory, "vocab.json"), encoding="utf-8") as f:
        encoder = json.load(f)
    with open(os.path.join(directory, "merges.txt"), encoding="utf-8") as f:
        bpe_data = f.read()
    bpe_merges = [tuple(merge_str.split()) for merge_str in bpe_data.split("\n")[1:-1]]
    return Encoder(encoder=encoder, bpe_merges=bpe_merges)


def make_files(directory, texts, n_merges):
    """A plain BPE trainer (independent of psync's): words are pieces as byte-symbol tuples."""
    b2u = bytes_to_unicode()
    counts = {}
    for text in texts:
        for p in pieces_of(text):
            w = tuple(b2u[b] for b in p.encode("utf-8"))
            counts[w] = counts.get(w, 0) + 1
    merges = []
    for _ in range(n_merges):
        pair_counts = {}
        for w, c in counts.items():
            for a, b in zip(w, w[1:]):
                pair_counts[(a, b)] = pair_counts.get((a, b), 0) + c
        if not pair_counts:
            break
        best = min(pair_counts, key=lambda p: (-pair_counts[p], p))
        merges.append(best)
        merged = {}
        for w, c in counts.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + c
        counts = merged
    vocab = {}
    for ch in b2u.values():
        vocab[ch] = len(vocab)
    for a, b in merges:
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(directory, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")


def main():
    cmd = sys.argv[1]
    if cmd == "make-files":
        texts = json.load(open(sys.argv[3], encoding="utf-8"))
        make_files(sys.argv[2], texts, int(sys.argv[4]))
    elif cmd == "encode":
        enc = get_encoder(sys.argv[2])
        texts = json.load(open(sys.argv[3], encoding="utf-8"))
        out = [{"pieces": pieces_of(t), "ids": enc.encode(t)} for t in texts]
        with open(sys.argv[4], "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False)
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
