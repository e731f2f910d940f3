"""Tiny random stand-ins of the sentence encoder, the back-translation pair and the Styleformer models, built offline
from transformers configs and tokenizers made here (their vocabularies: the given words plus every letter, digit and
punctuation mark). Tests and benchmarks run the real loading and generation code through them; their outputs are
gibberish, and their config.json says `mlvp_stand_in: true`, so captions made with them are never marked faithful.
"""
from __future__ import annotations

import functools
import json
import string
from pathlib import Path
from typing import Iterable

from workloads.perturbations.text._encoder import STAND_IN_KEY

_CHARS = string.ascii_lowercase + string.digits + string.punctuation


def _words(texts: Iterable[str], limit: int) -> list[str]:
    seen: dict[str, None] = {}
    for t in texts:
        for w in t.lower().split():
            w = w.strip(string.punctuation)
            if w.isalpha():
                seen.setdefault(w, None)
    return list(seen)[:limit]


def _quiet(build):
    """No "Writing model shards" progress bars while building (restored afterwards)."""

    @functools.wraps(build)
    def wrapped(*args, **kwargs):
        from transformers.utils import logging as hf_logging

        was = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            return build(*args, **kwargs)
        finally:
            if was:
                hf_logging.enable_progress_bar()

    return wrapped


def _mark(folder: Path) -> None:
    cfg = folder / "config.json"
    data = json.loads(cfg.read_text())
    data[STAND_IN_KEY] = True
    cfg.write_text(json.dumps(data, indent=2))


def _wordpiece_tokenizer(texts: Iterable[str], max_words: int):
    from transformers import MPNetTokenizer

    specials = ["<s>", "<pad>", "</s>", "[UNK]", "<mask>"]
    pieces = specials + list(_CHARS) + [f"##{c}" for c in _CHARS] + _words(texts, max_words)
    return MPNetTokenizer(vocab={p: i for i, p in enumerate(dict.fromkeys(pieces))})


@_quiet
def build_sentence_encoder(folder: str | Path, texts: Iterable[str] = (), seed: int = 0, hidden: int = 32,
                           layers: int = 2, max_words: int = 2000) -> str:
    """A sentence-transformers-layout MPNet folder (mean pooling), like paraphrase-mpnet-base-v2 but tiny."""
    import torch
    from transformers import MPNetConfig, MPNetModel

    folder = Path(folder)
    tokenizer = _wordpiece_tokenizer(texts, max_words)
    config = MPNetConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                         num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=130,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    MPNetModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    _mark(folder)
    (folder / "1_Pooling").mkdir(exist_ok=True)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": hidden, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
         "pooling_mode_max_tokens": False}))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128, "do_lower_case": False}))
    (folder / "modules.json").write_text(json.dumps(
        [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
         {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    return str(folder)


def _fsmt_folder(folder: Path, langs: list[str], seed: int, d_model: int, num_beams: int) -> str:
    import torch
    from transformers import FSMTConfig, FSMTForConditionalGeneration, FSMTTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    # BPE with no merges: every word is its characters, the last one marked with </w>
    vocab = {t: i for i, t in enumerate(specials + list(_CHARS) + [c + "</w>" for c in _CHARS])}
    for name in ("src_vocab.json", "tgt_vocab.json"):
        (folder / name).write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("")
    tokenizer = FSMTTokenizer(langs=langs, src_vocab_file=str(folder / "src_vocab.json"),
                              tgt_vocab_file=str(folder / "tgt_vocab.json"), merges_file=str(folder / "merges.txt"))
    config = FSMTConfig(langs=langs, src_vocab_size=len(vocab), tgt_vocab_size=len(vocab), d_model=d_model,
                        encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                        encoder_ffn_dim=2 * d_model, decoder_ffn_dim=2 * d_model, max_position_embeddings=512,
                        num_beams=num_beams, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                        decoder_start_token_id=2, tie_word_embeddings=False)
    torch.manual_seed(seed)
    FSMTForConditionalGeneration(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    _mark(folder)
    return str(folder)


@_quiet
def build_back_translation_models(folder: str | Path, seed: int = 0, d_model: int = 16,
                                  num_beams: int = 2) -> tuple[str, str]:
    """(en->de, de->en) FSMT folders shaped like facebook/wmt19-en-de / wmt19-de-en, but tiny."""
    folder = Path(folder)
    return (_fsmt_folder(folder / "wmt19-en-de", ["en", "de"], seed, d_model, num_beams),
            _fsmt_folder(folder / "wmt19-de-en", ["de", "en"], seed + 1, d_model, num_beams))


def _t5_tokenizer(texts: Iterable[str], max_words: int):
    from transformers import T5Tokenizer

    prefix_words = "transfer casual to formal formal to casual active to passive passive to active".split()
    words = _words(list(texts) + [" ".join(prefix_words)], max_words)
    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    vocab += [(c, -5.0) for c in _CHARS + string.ascii_uppercase] + [("\u2581" + w, -1.0) for w in words]
    return T5Tokenizer(vocab=vocab, extra_ids=0)


@_quiet
def build_styleformer_models(folder: str | Path, texts: Iterable[str] = (), seed: int = 0, d_model: int = 16,
                             adequacy_bias: float = 8.0, max_words: int = 2000) -> str:
    """A folder with one tiny T5 per Styleformer style (named like the prithivida models) and an adequacy
    classifier whose label-1 bias is `adequacy_bias` (large: every candidate passes the 0.95 filter; very negative:
    none does)."""
    import torch
    from transformers import MPNetConfig, MPNetForSequenceClassification, T5Config, T5ForConditionalGeneration

    folder = Path(folder)
    texts = list(texts)
    tokenizer = _t5_tokenizer(texts, max_words)
    names = ("informal_to_formal_styletransfer", "formal_to_informal_styletransfer",
             "active_to_passive_styletransfer", "passive_to_active_styletransfer")
    for k, name in enumerate(names):
        config = T5Config(vocab_size=len(tokenizer), d_model=d_model, d_kv=8, d_ff=2 * d_model, num_layers=1,
                          num_decoder_layers=1, num_heads=2, pad_token_id=0, eos_token_id=1,
                          decoder_start_token_id=0)
        torch.manual_seed(seed + k)
        T5ForConditionalGeneration(config).save_pretrained(folder / name)
        tokenizer.save_pretrained(folder / name)
        _mark(folder / name)
    ade_tok = _wordpiece_tokenizer(texts, max_words)
    config = MPNetConfig(vocab_size=len(ade_tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=130, num_labels=2,
                         pad_token_id=ade_tok.pad_token_id)
    torch.manual_seed(seed + len(names))
    model = MPNetForSequenceClassification(config)
    with torch.no_grad():
        model.classifier.out_proj.bias.copy_(torch.tensor([0.0, float(adequacy_bias)]))
    model.save_pretrained(folder / "parrot_adequacy_model")
    ade_tok.save_pretrained(folder / "parrot_adequacy_model")
    _mark(folder / "parrot_adequacy_model")
    return str(folder)
