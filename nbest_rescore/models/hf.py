"""Pretrained Hugging Face causal LMs as rescoring LMs (``--lm hf:PATH``).

``hf:PATH`` names a local directory that ``transformers`` loads with
``AutoModelForCausalLM`` and ``AutoTokenizer`` (``save_pretrained`` output), or a model
id already in the local Hugging Face cache. Nothing is downloaded: loading passes
``local_files_only=True``. ``transformers`` is the optional ``hf`` extra
(``pip install -e '.[hf]'``).

Words to tokens (:class:`HfText`, docs/models.md "Hugging Face LMs"): a sentence is
its words joined by single spaces, encoded without special tokens; when the tokenizer
encodes a word at the start of a text differently from the same word after a space
(GPT-2's byte-level BPE: ``hello`` vs ``Ġhello``), one space is put in front, so every
word is encoded as it is inside running text (a SentencePiece tokenizer that adds its
own ``▁`` needs none). A sentence ends with the tokenizer's EOS token (or, for a
tokenizer without one, the encoding of :data:`SEPARATOR`); a document starts with its
BOS token (else EOS, else the separator). A hypothesis' cost is -log P(its tokens and
the end | the context), natural log: the same quantity as the word-level LMs' cost of
the words and ``</s>``, so it combines with the n-gram in the same way.

Safety: ``trust_remote_code`` only when asked (``--trust-remote-code``); weights are
read from safetensors files, and pickled ``pytorch_model.bin`` weights (which can run
code when loaded) are refused unless ``allow_pickle`` (``--allow-pickle``).
"""
from __future__ import annotations

import glob
import json
import logging
import os
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

from ..errors import DataError
from ..options import CONTEXT_TOKENS, HYP_ROOM

log = logging.getLogger(__name__)

#: The prefix of an ``--lm`` value naming a Hugging Face model.
HF_PREFIX = "hf:"
#: The sentence separator of a tokenizer without an EOS token.
SEPARATOR = "\n"
#: Our facts beside the ``save_pretrained`` files (training info, the text convention).
METADATA_FILE = "nbest_rescore.json"
INSTALL_HINT = "pip install -e '.[hf]' (or pip install transformers tokenizers)"


def is_hf_lm(spec) -> bool:
    """Whether the ``--lm`` value ``spec`` names a Hugging Face model (``hf:PATH``)."""
    return isinstance(spec, str) and spec.startswith(HF_PREFIX)


def hf_name(spec: str) -> str:
    """The directory or model id of ``hf:PATH``. Raises DataError when it is empty."""
    name = spec[len(HF_PREFIX):]
    if not name:
        raise DataError(f"--lm {spec}: expected hf:PATH, a local directory written by save_pretrained or a model id "
                        f"in the local Hugging Face cache, e.g. hf:exp/gpt")
    return name


def import_transformers():
    """The ``transformers`` module. Raises DataError naming the extra when it is missing."""
    try:
        import transformers
    except ImportError:
        raise DataError(f"--lm hf:...: the Hugging Face transformers package is not installed: {INSTALL_HINT}") from None
    return transformers


class HfText:
    """The word <-> token convention of one tokenizer (module docstring).

    Attributes:
        tokenizer: the ``transformers`` tokenizer.
        prefix: ``" "`` or ``""``, put before a sentence's first word.
        end_ids: the tokens ending a sentence (``[eos]`` or the separator's).
        start_ids: the tokens a document starts with.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        # a space in front when a word at a text's start is encoded unlike the same word after a space, while
        # a leading space makes it equal (byte-level BPE)
        probe, lead = "hello", "the"
        inside = self._ids(f"{lead} {probe}")[len(self._ids(lead)):]
        self.prefix = " " if self._ids(probe) != inside and self._ids(" " + probe) == inside else ""
        eos, bos = tokenizer.eos_token_id, tokenizer.bos_token_id
        self.end_ids: List[int] = [eos] if eos is not None else self._ids(SEPARATOR)
        if not self.end_ids:
            raise DataError("the tokenizer has no EOS token and encodes a newline as nothing: it cannot mark "
                            "sentence ends; use a tokenizer with an eos_token")
        self.start_ids: List[int] = [bos] if bos is not None else list(self.end_ids)

    def _ids(self, text: str) -> List[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def sentences(self, sentences: Sequence[Sequence[str]]) -> List[List[int]]:
        """Token ids of each sentence (words), its end tokens included: [S] lists."""
        if not sentences:
            return []
        texts = [self.prefix + " ".join(words) if words else "" for words in sentences]
        enc = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        return [list(ids) + self.end_ids for ids in enc]

    def settings(self) -> dict:
        """What ``wer.json`` records of the convention."""
        return {"prefix_space": bool(self.prefix), "end_ids": self.end_ids, "start_ids": self.start_ids}


@dataclass(frozen=True, eq=False)
class HfLM:
    """A loaded Hugging Face causal LM, ready for :class:`~nbest_rescore.rescoring.hf_scorer.HfScorer`.

    Attributes:
        model: the ``transformers`` model (eval mode, float32, on the CPU until a scorer moves it).
        text: its :class:`HfText`.
        source: the ``hf:PATH`` it was loaded from.
        context_tokens: the most history tokens an utterance is scored after.
        info: :data:`METADATA_FILE`'s ``info`` (training facts), {} without it.
    """

    model: object
    text: HfText
    source: str
    context_tokens: int
    info: dict = field(default_factory=dict, repr=False)
    name = "hf"
    direction = "forward"

    @property
    def max_positions(self) -> Optional[int]:
        """The model's longest input in tokens (None when its config does not say)."""
        cfg = self.model.config
        for key in ("max_position_embeddings", "n_positions", "n_ctx"):
            value = getattr(cfg, key, None)
            if isinstance(value, int) and value > 0:
                return value
        return None


def _weights_kwargs(name: str, allow_pickle: bool) -> dict:
    """``from_pretrained`` arguments for the weights of a local directory ``name``:
    safetensors when there are any; pickled weights only with ``allow_pickle``.
    Raises DataError for pickled-only weights without it, or a directory without weights."""
    if not os.path.isdir(name):  # a cache id: transformers finds the files; safetensors unless allowed
        return {} if allow_pickle else {"use_safetensors": True}
    if glob.glob(os.path.join(name, "*.safetensors")):
        return {"use_safetensors": True}
    pickled = sorted(os.path.basename(p) for p in glob.glob(os.path.join(name, "*.bin")))
    if pickled and not allow_pickle:
        raise DataError(f"--lm hf:{name}: the weights are pickled ({', '.join(pickled)}), which can run code when "
                        f"loaded; convert them to safetensors (model.save_pretrained(dir)), or pass --allow-pickle "
                        f"if you trust their source")
    if not pickled:
        raise DataError(f"--lm hf:{name}: the directory holds no model weights (*.safetensors or pytorch_model.bin); "
                        f"give a directory written by save_pretrained")
    return {"use_safetensors": False}


def _check_causal(transformers, name: str, kwargs: dict) -> None:
    """Raise DataError unless ``name`` holds a config of a causal LM (and, for a model
    shipping its own code, unless ``trust_remote_code`` is set)."""
    if not kwargs["trust_remote_code"] and "auto_map" in _read_json(os.path.join(name, "config.json")):
        raise DataError(f"--lm hf:{name}: the model ships its own Python code (auto_map in config.json), which "
                        f"nbest-rescore does not run unless asked: pass --trust-remote-code if you trust its source")
    try:
        config = transformers.AutoConfig.from_pretrained(name, **kwargs)
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f"--lm hf:{name}: no Hugging Face model config there ({_first_line(exc)}); give a local "
                        f"directory written by save_pretrained, or a model id in the local cache (nothing is "
                        f"downloaded: on a machine with network access run 'hf download ID' first)") from None
    if getattr(config, "is_encoder_decoder", False) or \
            type(config) not in transformers.MODEL_FOR_CAUSAL_LM_MAPPING:
        raise DataError(f"--lm hf:{name}: the model ({type(config).__name__}) is not a causal LM that "
                        f"AutoModelForCausalLM loads; give a decoder-only LM (GPT-2, Llama, ...)")


#: The files a tokenizer directory holds (one of them), as named in a missing-tokenizer message.
TOKENIZER_FILES = "tokenizer.json, tokenizer_config.json, vocab.json + merges.txt, tokenizer.model or vocab.txt"
#: A text every tokenizer meant for words must turn into tokens.
PROBE_TEXT = "the cat sat on the mat"


def load_tokenizer(transformers, label: str, path: str, **kwargs):
    """``AutoTokenizer.from_pretrained(path)`` checked to tokenise: ``label`` names the
    option or key in messages (``--lm hf:DIR``, ``hf.tokenizer DIR``).

    Raises:
        DataError: no tokenizer at ``path`` (the files looked for named), or one with an
            empty vocabulary or that encodes :data:`PROBE_TEXT` as no tokens.
    """
    kwargs.setdefault("local_files_only", True)
    try:
        tok = transformers.AutoTokenizer.from_pretrained(path, **kwargs)
    except (OSError, ValueError, KeyError, TypeError, ImportError) as exc:
        raise DataError(f"{label}: transformers could not load a tokenizer there ({_first_line(exc)}); it looks for "
                        f"{TOKENIZER_FILES}: save the tokenizer beside the model (tokenizer.save_pretrained(DIR))"
                        ) from None
    try:
        ids, why = (tok(PROBE_TEXT, add_special_tokens=False)["input_ids"] if len(tok) else []), "no tokens"
    except Exception as exc:  # noqa: BLE001 (a broken tokenizer raises whatever its library raises)
        ids, why = [], f"an error ({_first_line(exc)})"
    if not ids:
        raise DataError(f"{label}: the tokenizer ({type(tok).__name__}, vocabulary of {len(tok)}) encodes "
                        f"{PROBE_TEXT!r} as {why}: it does not tokenise; save the tokenizer the model was trained "
                        f"with in {path} (one of {TOKENIZER_FILES})")
    return tok


def check_causal_behaviour(model, label: str, ids: Sequence[int]) -> None:
    """Refuse a model whose prediction at a position changes with the tokens after it
    (an encoder such as BERT loaded by ``AutoModelForCausalLM`` without ``is_decoder``):
    one forward of ``ids`` (token ids, the first 16 used: ``[1, T]``) and one of its first
    half ``[1, k]`` must give the same logits ``[k, V]`` (unnormalised) on that half, to
    1e-4 of their largest magnitude (a causal model differs by rounding, about 1e-7).

    Raises:
        DataError: naming the model class and the fix.
    """
    import torch

    ids = list(ids)[:16]
    k = max(1, len(ids) // 2)
    with torch.no_grad():
        full = model(torch.tensor([ids])).logits[0, :k].float()
        part = model(torch.tensor([ids[:k]])).logits[0].float()
    # relative to the logits' scale (a random model's are tiny); rounding differs by ~1e-7 of it
    if not torch.allclose(full, part, atol=1e-4 * float(part.abs().max()) + 1e-12, rtol=0):
        raise DataError(f"{label}: the model ({type(model).__name__}) is not causal: its prediction at a position "
                        f"changes with the tokens after it (an encoder such as BERT; its config has is_decoder "
                        f"{getattr(model.config, 'is_decoder', None)}); give a decoder-only LM (GPT-2, Llama, ...)")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def load_hf_lm(spec: str, *, context_tokens: Optional[int] = None, trust_remote_code: bool = False,
               allow_pickle: bool = False) -> HfLM:
    """Load ``hf:PATH`` (module docstring) in float32 on the CPU, in eval mode.

    Args:
        spec: ``hf:`` + a local directory or a cached model id.
        context_tokens: the most history tokens kept (>= 1); None: :data:`~nbest_rescore.options.CONTEXT_TOKENS`,
            or for a model ``train`` wrote, its training window less :data:`~nbest_rescore.options.HYP_ROOM`.
        trust_remote_code, allow_pickle: the safety switches (module docstring).
    Raises:
        DataError: transformers missing, nothing loadable at PATH, not a causal LM (by
            its config, or by behaviour: :func:`check_causal_behaviour`), pickled weights
            without ``allow_pickle``, no tokenizer or one that does not tokenise
            (:func:`load_tokenizer`), a tokenizer that cannot mark ends.
    """
    transformers = import_transformers()
    transformers.utils.logging.disable_progress_bar()  # no "Loading weights" bar on every run
    name = hf_name(spec)
    if not os.path.exists(name) and name.startswith(("/", ".", "~")):
        raise DataError(f"--lm {spec}: no such directory; give a directory written by save_pretrained, or a model "
                        f"id in the local Hugging Face cache (e.g. hf:gpt2)")
    if os.path.exists(name) and not os.path.isdir(name):
        raise DataError(f"--lm {spec}: {name} is a file; hf: takes the directory save_pretrained wrote")
    if context_tokens is not None and context_tokens < 1:
        raise DataError(f"--context-tokens {context_tokens}: expected an integer >= 1")
    common = {"local_files_only": True, "trust_remote_code": trust_remote_code}
    _check_causal(transformers, name, common)
    weights = _weights_kwargs(name, allow_pickle)
    import torch

    tokenizer = load_tokenizer(transformers, f"--lm {spec}", name, **common)
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32, **weights, **common)
    except (OSError, ValueError, KeyError, ImportError) as exc:
        raise DataError(f"--lm {spec}: transformers could not load the model: {_first_line(exc)}; give a directory "
                        f"written by save_pretrained (model and tokenizer)") from None
    model.eval()
    check_causal_behaviour(model, f"--lm {spec}", tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"])
    info = _read_json(os.path.join(name, METADATA_FILE)).get("info")
    info = info if isinstance(info, dict) else {}
    # a model ``train`` wrote (its config in ``info``) trained on windows of optim.bptt + hf.context_tokens tokens
    cfg = info.get("train_config") if isinstance(info.get("train_config"), dict) else {}
    bptt = (cfg.get("optim") or {}).get("bptt")
    window = bptt + int((cfg.get("hf") or {}).get("context_tokens") or 0) if isinstance(bptt, int) else None
    if context_tokens is None:
        context_tokens = CONTEXT_TOKENS if window is None else max(1, window - HYP_ROOM)
    elif window is not None and context_tokens + HYP_ROOM > window:
        log.warning("--lm %s was trained on windows of %d tokens, so positions past %d were never trained; with "
                    "--context-tokens %d the hypotheses sit there: use --context-tokens %d or less",
                    spec, window, window, context_tokens, max(1, window - HYP_ROOM))
    return HfLM(model, HfText(tokenizer), spec, context_tokens, info)


def _read_json(path: str) -> dict:
    """The JSON object in ``path``, or {} (missing, unreadable, not an object)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_metadata(directory, info: dict) -> None:
    """Write :data:`METADATA_FILE` (``{"format": 1, "info": info}``) into ``directory``
    (beside ``save_pretrained``'s files)."""
    with open(os.path.join(directory, METADATA_FILE), "w", encoding="utf-8") as f:
        json.dump({"format": 1, "info": info}, f, indent=2, sort_keys=True)
        f.write("\n")


def hf_summary(spec: str) -> dict:
    """What ``nbest-rescore info`` reports of ``hf:PATH`` (the model loaded once, as
    :func:`load_hf_lm` loads it): the keys of
    :func:`~nbest_rescore.models.loading.checkpoint_summary` with ``model``
    ``hf:<model_type>``, ``vocab`` the tokenizer's size, ``parameters`` and
    ``without_embeddings`` (the input and output embedding matrices excluded, a tied one
    counted once), ``max_positions`` (tokens; None when the config does not say) and
    ``dtype`` (of the saved weights, from config.json; loaded as float32).

    Raises:
        DataError: as :func:`load_hf_lm` (e.g. a folder that holds no model), worded for
            ``info``.
    """
    try:
        lm = load_hf_lm(spec)
    except DataError as exc:
        text = str(exc)
        raise DataError(f"info {text[len('--lm '):]}" if text.startswith("--lm ") else text) from None
    model, name = lm.model, hf_name(spec)
    total = sum(p.numel() for p in model.parameters())  # a shared (tied) tensor once
    emb = {id(m.weight): m.weight.numel() for m in (model.get_input_embeddings(), model.get_output_embeddings())
           if m is not None and getattr(m, "weight", None) is not None}
    stored = _read_json(os.path.join(name, "config.json")) if os.path.isdir(name) else {}
    dtype = stored.get("torch_dtype") or stored.get("dtype") or str(next(model.parameters()).dtype)
    seconds = lm.info.get("seconds")
    return {"path": spec, "model": f"hf:{model.config.model_type}", "direction": lm.direction,
            "vocab": len(lm.text.tokenizer), "parameters": total, "without_embeddings": total - sum(emb.values()),
            "epochs": lm.info.get("epochs"), "minutes": None if seconds is None else seconds / 60.0,
            "best_valid_ppl": lm.info.get("best_valid_ppl"), "max_positions": lm.max_positions,
            "dtype": str(dtype).removeprefix("torch.")}
