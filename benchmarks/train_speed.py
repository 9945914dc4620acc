#!/usr/bin/env python
"""Training speed (words/s) of the LM zoo, or of the toolkit's loop against a plain PyTorch loop.

Both modes time the toolkit's own hot loop
(:func:`nbest_rescore.training.passes.train_segments`: document streams aligned to
the BPTT length, state carried across segments and reset where documents start, the
trainer's loss, :func:`~nbest_rescore.training.step.make_optimizer`'s optimizer
(Adam; fused on CUDA), gradient clipping 10) on a prefix of the real LM text. For
each repeat and model: ``--warmup`` untimed updates, then ``--steps`` timed updates,
both from the start of the streams (the timed updates read the same segments on every
repeat); device work is synchronised before the clock is read; words/s counts the
real (unpadded) target tokens; medians over ``--repeat``. Models (and both loops) are
interleaved within each repeat so that load on the machine affects all alike.

Default mode: GRU, LSTM and AMN at equal total hidden units. The AMN with K memcells
of H units runs K + 1 GRUs of H units (controller included, thesis ``000`` chapter 4);
it is compared with a GRU and an LSTM of (K + 1) H units, with a GRU of H units, and
with a straightforward AMN (a Python loop over K + 1 ``torch.nn.GRUCell`` per time
step) to show what the batched implementation of :mod:`nbest_rescore.models.amn`
gains. The vocabulary is the ``--vocab-size`` most frequent words of the prefix.

``--vs-plain-loop``: each model of ``--models`` (``gru``, ``lstm``, ``gru-adaptive``,
``lstm-adaptive``, ``gru-fused``, ``lstm-fused``: the full softmax trained through the
fused block-wise cross-entropy, ``optim.fused_softmax``) trains with the toolkit's loop and, at the same size, batch, BPTT
length, vocabulary and device, with a plain PyTorch loop written here as a user would
write it, after Kaldi's ``steps/pytorchnn/train.py`` and pytorch/examples'
``word_language_model``: the text (the same prefix and the same vocabulary, out-of-
vocabulary words as ``<unk>``) read as one long token stream with ``</s>`` after every
sentence and nothing at document boundaries, cut into ``--batch-size`` columns
(``data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t()``, time-major), windows of
``--bptt`` steps with targets shifted by one, the hidden state detached between
windows and never reset; ``nn.Embedding`` -> ``nn.GRU``/``nn.LSTM`` -> dropout ->
``nn.Linear`` to the vocabulary (``--tied``: tied to the embedding, on both sides),
``nn.CrossEntropyLoss()`` over the full vocabulary, ``torch.optim.SGD(lr=20)``,
``clip_grad_norm_(0.25)`` (pytorch/examples' defaults), and one ``.item()`` per
``--log-interval`` updates. Float32 and no autocast for the plain loop; the toolkit's
side runs the same way unless ``--autocast bfloat16``. TF32 (CUDA only) is the same for
both loops: ``--tf32 on`` allows it for matrix products and cuDNN on both sides (as
:func:`~nbest_rescore.training.trainer.train` trains on CUDA, and as a user of the plain
loop would switch it on with two lines), ``--tf32 off`` (the default) forbids it on
both sides, cuDNN included (torch's own defaults, off for matrix products and on for
cuDNN, would be a third mix; :func:`tf32_plan` decides the flags and they are set
before every timed run, whichever loop it is). The JSON records the setting
(``tf32_setting``) and the flags each side ran with (``tf32``: ``ours`` and ``plain``,
equal). (An earlier version had ``--ours-tf32``, TF32 for the toolkit's loop only;
the H100 figures of ``docs/benchmarks/train_speed_h100*.json`` were measured that way.) The
``-adaptive`` variants use the adaptive softmax (Grave et al. 2017; cutoffs from the
word frequencies of the whole text) on the toolkit's side and are still compared
with the plain full-softmax loop. The vocabulary is by default the ``--vocab-size``
(43k) most frequent words of the whole text (``--vocab FILE``: a word list), so that
the output layer has the size it has in real training; ``--max-words`` defaults to a
prefix long enough that every stream holds about twice the timed segments. The
table's "real tokens" is the share of the toolkit's timed [B, bptt] positions that
hold a word (the rest is the padding of documents aligned to ``--bptt``); only real
tokens count as words on both sides.

    python -m benchmarks.train_speed --threads 1 --json exp/train_speed.json
    python -m benchmarks.train_speed --vs-plain-loop --threads 2 --json exp/train_speed_vs_plain_cpu.json
    python -m benchmarks.train_speed --vs-plain-loop --threads 2 --models gru,gru-adaptive,lstm,lstm-adaptive \\
        --json exp/train_speed_vs_plain_adaptive_cpu.json
    python -m benchmarks.train_speed --vs-plain-loop --device cuda --hidden 512 --embedding-dim 512 \\
        --batch-size 32 --bptt 35 --steps 100 --tf32 on --json exp/train_speed_gpu_tf32.json
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import List, NamedTuple, Tuple

import numpy as np
import torch
from torch import Tensor, nn

from benchmarks.harness import DATA, add_repeat, clocked, machine, median, write_json
from nbest_rescore.config import OptimConfig
from nbest_rescore.device import resolve_device
from nbest_rescore.io._common import iter_lines, split_fields
from nbest_rescore.io.lm_text import read_lm_text
from nbest_rescore.models import build_model
from nbest_rescore.models.amn import AMNConfig
from nbest_rescore.models.base import LanguageModel, Output, default_adaptive_cutoffs
from nbest_rescore.corpus import encode_document
from nbest_rescore.store_streams import make_streams
from nbest_rescore.training.passes import epoch_streams, train_segments
from nbest_rescore.training.step import StepOptions, make_optimizer
from nbest_rescore.vocab import Vocabulary

TEXT = str(DATA / "lm" / "lm_train.txt")
MODELS = ("gru-small", "gru", "lstm", "amn", "amn-naive")
#: ``-adaptive``: the adaptive softmax; ``-fused``: the full softmax trained through the fused
#: block-wise cross-entropy (``optim.fused_softmax``, nbest_rescore/models/fused_output.py)
VS_MODELS = ("gru", "lstm", "gru-adaptive", "lstm-adaptive", "gru-fused", "lstm-fused")
PLAIN_LR, PLAIN_CLIP = 20.0, 0.25  # pytorch/examples word_language_model's defaults
AUTOCAST = {"none": None, "bfloat16": torch.bfloat16}
# defaults that differ between the modes: (default mode, --vs-plain-loop); None for
# --max-words with --vs-plain-loop: enough words for the timed segments (needed_words)
MODE_DEFAULTS = {
    "models": (",".join(MODELS), "gru,lstm"),
    "vocab_size": (10000, 43000),
    "max_words": (20000, None),
    "hidden": (64, 256),
    "embedding_dim": (64, 256),
    "warmup": (2, 3),
    "steps": (8, 20),
}
# --tf32: (matmul, cuDNN) TF32 flags, the same for the toolkit's loop and the plain loop
TF32 = {"on": (True, True), "off": (False, False)}


# -- the straightforward AMN (default mode) ----------------------------------------------

class StraightforwardAMN(LanguageModel):
    """The AMN written the obvious way: one ``nn.GRUCell`` per controller/memcell and
    Python loops over time steps and cells (no dropout, no ITL, no ``lengths``).
    State ``(h,)`` float [B, K + 1, H] as in the batched AMN."""

    name = "amn-naive"
    Config = AMNConfig

    def __init__(self, config: AMNConfig, vocab_size: int):
        super().__init__(config, vocab_size, config.hidden_size)
        e, h = config.embedding_dim, config.hidden_size
        self.cells = nn.ModuleList(nn.GRUCell(e, h) for _ in range(config.num_memcells + 1))
        self.register_buffer("temperature", torch.tensor(float(config.anneal_t0)))

    @classmethod
    def from_amn(cls, amn) -> "StraightforwardAMN":
        """A copy of a batched :class:`~nbest_rescore.models.amn.AMNLM`'s weights."""
        m = cls(amn.config, amn.vocab_size)
        state = {k: v for k, v in amn.state_dict().items() if not k.startswith(("w_", "b_"))}
        m.load_state_dict(state, strict=False)
        with torch.no_grad():
            for k, cell in enumerate(m.cells):
                cell.weight_ih.copy_(amn.w_ih[k].T)
                cell.weight_hh.copy_(amn.w_hh[k].T)
                cell.bias_ih.copy_(amn.b_ih[k])
                cell.bias_hh.copy_(amn.b_hh[k])
        return m

    def init_state(self, batch_size: int, device=None):
        c = self.config
        return (torch.zeros(batch_size, c.num_memcells + 1, c.hidden_size, device=device),)

    def recur(self, x, state, lengths):
        if lengths is not None:
            raise NotImplementedError("the straightforward AMN ignores lengths")
        hs = list(state[0].unbind(1))
        outs = []
        for t in range(x.shape[1]):
            hs = [cell(x[:, t], h) for cell, h in zip(self.cells, hs)]
            m = torch.stack(hs[1:], 1)  # [B, K, H]
            alpha = torch.softmax((m * hs[0].unsqueeze(1)).sum(-1) / self.temperature, -1)
            outs.append((alpha.unsqueeze(-1) * m).sum(1))
        return Output(torch.stack(outs, 1), (torch.stack(hs, 1),), None)


def build(kind: str, args, vocab_size: int) -> LanguageModel:
    """Model ``kind`` (one of MODELS) at the sizes of ``args``."""
    e, h, k = args.embedding_dim, args.hidden, args.memcells
    if kind == "gru-small":
        return build_model("gru", {"embedding_dim": e, "hidden_size": h}, vocab_size)
    if kind in ("gru", "lstm"):
        return build_model(kind, {"embedding_dim": e, "hidden_size": (k + 1) * h}, vocab_size)
    amn = build_model("amn", {"embedding_dim": e, "hidden_size": h, "num_memcells": k}, vocab_size)
    return StraightforwardAMN.from_amn(amn) if kind == "amn-naive" else amn


def describe(kind: str, args) -> str:
    h, k = args.hidden, args.memcells
    return {"gru-small": f"GRU {h}", "gru": f"GRU {(k + 1) * h}", "lstm": f"LSTM {(k + 1) * h}",
            "amn": f"AMN K={k} x {h} (batched)", "amn-naive": f"AMN K={k} x {h} (GRUCell loop)"}[kind]


def hidden_units(kind: str, args) -> int:
    return args.hidden if kind == "gru-small" else (args.memcells + 1) * args.hidden


def check_naive_equals_batched(args, vocab_size, streams) -> float:
    """|difference| of the training NLL of the two AMN implementations (same weights)
    on the first segment of ``streams`` (CPU), through the toolkit's loop with lr 0."""
    torch.manual_seed(args.seed)
    amn = build("amn", args, vocab_size)
    naive = StraightforwardAMN.from_amn(amn)
    nll = []
    for m in (amn, naive):
        stats = train_segments(m, torch.optim.SGD(m.parameters(), lr=0.0), streams, args.bptt,
                               StepOptions(clip=1e9), max_steps=1)
        nll.append(float(stats.nll))
    return abs(nll[0] - nll[1])


# -- the plain PyTorch word-LM loop (--vs-plain-loop) -------------------------------------

class PlainRNNLM(nn.Module):
    """pytorch/examples' ``RNNModel`` (LSTM/GRU): embedding -> RNN -> dropout -> linear
    decoder over the whole vocabulary; time-major ([T, B]) like the examples."""

    def __init__(self, rnn_type: str, ntoken: int, ninp: int, nhid: int, nlayers: int,
                 dropout: float = 0.0, tie_weights: bool = False):
        super().__init__()
        self.ntoken, self.rnn_type, self.nhid, self.nlayers = ntoken, rnn_type, nhid, nlayers
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout if nlayers > 1 else 0.0)
        self.drop = nn.Dropout(dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            if nhid != ninp:
                raise ValueError("when tying weights, the hidden size must equal the embedding size")
            self.decoder.weight = self.encoder.weight
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        if not tie_weights:
            nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, input: Tensor, hidden):
        emb = self.encoder(input)
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        return self.decoder(output).view(-1, self.ntoken), hidden

    def init_hidden(self, bsz: int):
        weight = next(self.parameters())
        if self.rnn_type == "LSTM":
            return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))
        return weight.new_zeros(self.nlayers, bsz, self.nhid)


def plain_token_stream(encoded: List[np.ndarray]) -> Tensor:
    """The documents (from :func:`encode_document`) as one stream ``</s> s_1 </s> s_2 ..
    </s>`` over all documents: no token and no reset at document boundaries."""
    return torch.from_numpy(np.concatenate([encoded[0]] + [e[1:] for e in encoded[1:]]))


def batchify(data: Tensor, bsz: int) -> Tensor:
    """[nbatch, bsz]: column b holds the b-th contiguous 1/bsz of ``data`` (pytorch/examples)."""
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()


def get_batch(source: Tensor, i: int, bptt: int) -> Tuple[Tensor, Tensor]:
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)


def repackage_hidden(h):
    """Cut the hidden state from the graph of the previous window."""
    return h.detach() if isinstance(h, Tensor) else tuple(repackage_hidden(v) for v in h)


def plain_windows(source: Tensor, bptt: int) -> int:
    """Number of full BPTT windows of a batchified stream."""
    return (source.size(0) - 1) // bptt


def plain_train(model: PlainRNNLM, opt, criterion, source: Tensor, bptt: int, clip: float,
                max_steps: int, log_interval: int) -> Tuple[float, int]:
    """The plain loop: ``max_steps`` updates over the first windows of ``source``
    [nbatch, B] from a zero state. Returns (mean cross-entropy per token over the
    logged losses, number of target tokens). One ``.item()`` per ``log_interval``
    updates, and one for the updates after the last full interval."""
    model.train()
    hidden = model.init_hidden(source.size(1))
    logged: List[Tuple[float, int]] = []  # (mean loss, updates) per log interval
    interval_loss, n, tokens = 0.0, 0, 0
    for step, i in enumerate(range(0, max_steps * bptt, bptt), 1):
        data, targets = get_batch(source, i, bptt)
        hidden = repackage_hidden(hidden)
        opt.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        interval_loss = interval_loss + loss.detach()
        n += 1
        tokens += targets.numel()
        if step % log_interval == 0:
            logged.append((interval_loss.item() / n, n))
            interval_loss, n = 0.0, 0
    if n:
        logged.append((float(interval_loss) / n, n))
    return sum(l * k for l, k in logged) / max(1, sum(k for _, k in logged)), tokens


# -- timing ----------------------------------------------------------------------------

class Run(NamedTuple):
    """One timed run: words/s, loss (ours: the ``nll`` of train_segments' stats as
    returned; plain: mean cross-entropy per token), target tokens, seconds."""

    words_per_s: float
    loss: float
    tokens: int
    seconds: float


def time_ours(model, opt, streams, args, options) -> Run:
    """The toolkit's loop: ``args.warmup`` untimed, then ``args.steps`` timed updates."""
    def run(n):
        return train_segments(model, opt, streams, args.bptt, options, max_steps=n,
                              log_interval=args.log_interval, cuda_graph=not args.no_cuda_graph)
    if args.warmup:
        run(args.warmup)
    stats, dt, _ = clocked(lambda: run(args.steps), streams.device)
    if stats.steps != args.steps:
        raise RuntimeError(f"train_segments ran {stats.steps} updates, not --steps {args.steps}: "
                           f"too few segments (raise --max-words)")
    return Run(stats.tokens / dt, float(stats.nll), stats.tokens, dt)


def time_plain(model, opt, criterion, source, args) -> Run:
    """The plain loop: ``args.warmup`` untimed, then ``args.steps`` timed updates."""
    def run(n):
        return plain_train(model, opt, criterion, source, args.bptt, PLAIN_CLIP, n, args.log_interval)
    if args.warmup:
        run(args.warmup)
    (loss, tokens), dt, _ = clocked(lambda: run(args.steps), source.device)
    return Run(tokens / dt, loss, tokens, dt)


def tf32_flags() -> dict:
    return {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32}


def set_tf32(flags: Tuple[bool, bool]) -> None:
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags


def tf32_plan(setting: str) -> dict:
    """``{"ours": (matmul, cudnn), "plain": (matmul, cudnn)}``: the TF32 flags each loop
    runs with for ``--tf32 setting`` (``on`` or ``off``); the same for both loops, so
    that neither gets a faster number format than the other."""
    if setting not in TF32:
        raise ValueError(f"--tf32 must be one of {sorted(TF32)}, got {setting!r}")
    return {side: TF32[setting] for side in ("ours", "plain")}


# -- data ------------------------------------------------------------------------------

def needed_segments(args) -> int:
    """Segments that one timed run reads (warm-up and timed updates both start at the
    beginning of the streams)."""
    return max(args.warmup, args.steps)


def needed_words(args) -> int:
    """Default ``--max-words`` of --vs-plain-loop: about twice the timed segments' words
    per stream plus one document (~700 words) per stream, so the timed segments are
    full and no stream ends inside them."""
    return 2 * args.batch_size * args.bptt * needed_segments(args) + 1000 * args.batch_size


def text_counts(path) -> Tuple[Counter, int]:
    """(word counts, number of sentences) of the whole text."""
    counts, sentences = Counter(), 0
    for _, line in iter_lines(path):
        words = split_fields(line)
        if words:
            counts.update(words)
            sentences += 1
    return counts, sentences


def load_vocab(args, counts: Counter) -> Vocabulary:
    """``--vocab FILE`` (re-ordered by ``counts``), else the ``--vocab-size`` most frequent words."""
    if args.vocab:
        return Vocabulary.from_file(args.vocab).by_frequency(counts)
    return Vocabulary.from_counts(counts, args.vocab_size)


def word_id_counts(vocab: Vocabulary, counts: Counter, sentences: int) -> List[int]:
    """Training count of every word id (``</s>``: once per sentence, ``<unk>``: the
    out-of-vocabulary words) for :func:`default_adaptive_cutoffs`."""
    c = [0] * len(vocab)
    c[vocab.eos] = sentences
    for w, n in counts.items():
        c[vocab.index.get(w, vocab.unk)] += n
    return c


def live_segments(streams, bptt: int) -> int:
    """Segments from the start of the toolkit's streams (:class:`~nbest_rescore.store_streams.StoreStreams`)
    before the first stream ends."""
    lay = streams.layout
    end = np.zeros(lay.num_streams, dtype=np.int64)  # [B]: column after the last real token
    np.maximum.at(end, lay.lane, lay.col.astype(np.int64) + lay.n)
    return int(end.min()) // bptt


def check_enough(ap, args, streams, have: dict) -> None:
    """Error out (exit 2) unless there are ``--batch-size`` streams and every loop has
    the segments a run needs."""
    if streams.shape[0] != args.batch_size:
        ap.error(f"--max-words {args.max_words} gives {streams.shape[0]} documents, fewer than the "
                 f"--batch-size {args.batch_size} streams; raise --max-words")
    have = {"the toolkit's streams": live_segments(streams, args.bptt), **have}
    need = needed_segments(args)
    short = {k: v for k, v in have.items() if v < need}
    if short:
        ap.error(f"--max-words {args.max_words} gives too few BPTT segments of {args.batch_size} x {args.bptt}: "
                 + ", ".join(f"{v} for {k}" for k, v in short.items())
                 + f"; need max(--warmup, --steps) = {need}. Raise --max-words (e.g. to {needed_words(args)}) "
                 f"or lower --steps/--batch-size/--bptt")


# -- the two modes ---------------------------------------------------------------------

def run_zoo(ap, args, device) -> dict:
    """Default mode: GRU, LSTM and AMN at equal total hidden units (toolkit's loop)."""
    kinds = [k for k in args.models.split(",") if k]
    bad = [k for k in kinds if k not in MODELS]
    if bad:
        ap.error(f"unknown model(s) {bad}; choose from {MODELS} (or use --vs-plain-loop for {VS_MODELS})")
    docs = read_lm_text(args.text, args.max_words)
    vocab = load_vocab(args, Counter(w for d in docs for s in d for w in s))
    streams = make_streams([encode_document(d, vocab) for d in docs], args.batch_size, align=args.bptt)
    check_enough(ap, args, streams, {})
    diff = check_naive_equals_batched(args, len(vocab), streams) if "amn-naive" in kinds else None
    streams = streams.to(device)
    options = StepOptions(clip=OptimConfig().clip, self_norm_weight=0.0, autocast_dtype=AUTOCAST[args.autocast])

    models, opts = {}, {}
    for kind in kinds:
        torch.manual_seed(args.seed)
        models[kind] = build(kind, args, len(vocab)).to(device).train()
        opts[kind] = make_optimizer(models[kind], OptimConfig())
    rates = {k: [] for k in kinds}
    for r in range(args.repeat):
        for kind in kinds:
            rates[kind].append(time_ours(models[kind], opts[kind], streams, args, options).words_per_s)
        print(f"repeat {r + 1}/{args.repeat}: " + ", ".join(f"{k} {rates[k][-1]:.0f}" for k in kinds),
              file=sys.stderr)

    med = {k: median(v) for k, v in rates.items()}
    ref = med.get("gru")
    print(f"\nwords/s on {device}, {args.threads} thread(s), batch {args.batch_size} x bptt {args.bptt}, "
          f"vocabulary {len(vocab)}, embedding {args.embedding_dim}, median of {args.repeat} x {args.steps} steps")
    print(f"{'model':30s} {'hidden':>7s} {'params':>10s} {'words/s':>9s} {'min-max':>13s} {'vs GRU':>7s}")
    rows = []
    for kind in kinds:
        n = models[kind].num_parameters()["total"]
        ratio = med[kind] / ref if ref else None
        rr = f"{ratio:.2f}" if ratio else "-"
        print(f"{describe(kind, args):30s} {hidden_units(kind, args):7d} {n:10d} {med[kind]:9.0f} "
              f"{min(rates[kind]):6.0f}-{max(rates[kind]):<6.0f} {rr:>7s}")
        rows.append({"model": kind, "description": describe(kind, args), "hidden_units": hidden_units(kind, args),
                     "parameters": n, "words_per_s": rates[kind], "median_words_per_s": med[kind],
                     "ratio_to_gru": ratio})
    ratios = {}
    if "amn" in med:
        for other in ("gru", "lstm", "gru-small", "amn-naive"):
            if other in med:
                ratios[f"amn/{other}"] = med["amn"] / med[other]
        print("\n" + ", ".join(f"{k} = {v:.2f}" for k, v in ratios.items()))
    if diff is not None:
        print(f"straightforward vs batched AMN: |loss difference| on one segment = {diff:.2e}")
    return {"vocab_size": len(vocab), "models": rows, "ratios": ratios, "naive_vs_batched_loss_diff": diff}


def run_vs_plain_loop(ap, args, device) -> dict:
    """--vs-plain-loop: the toolkit's loop against the plain PyTorch loop, per model."""
    kinds = [k for k in args.models.split(",") if k]
    bad = [k for k in kinds if k not in VS_MODELS]
    if bad:
        ap.error(f"unknown model(s) {bad} for --vs-plain-loop; choose from {VS_MODELS}")
    adaptive = [k for k in kinds if k.endswith("-adaptive")]
    if args.tied and adaptive:
        ap.error(f"--tied cannot be combined with the adaptive softmax ({', '.join(adaptive)})")
    if args.tied and args.hidden != args.embedding_dim:
        ap.error(f"--tied needs --hidden == --embedding-dim, got {args.hidden} and {args.embedding_dim}")
    counts, sentences = text_counts(args.text)
    vocab = load_vocab(args, counts)
    v = len(vocab)
    docs = read_lm_text(args.text, args.max_words)
    encoded = [encode_document(d, vocab) for d in docs]
    streams = epoch_streams(encoded, args.batch_size, args.bptt, args.seed)  # as train() deals epoch 1
    source = batchify(plain_token_stream(encoded), args.batch_size)
    check_enough(ap, args, streams, {"the plain loop": plain_windows(source, args.bptt)})
    cutoffs = default_adaptive_cutoffs(word_id_counts(vocab, counts, sentences)) if adaptive else None
    streams, source = streams.to(device), source.to(device)
    options = StepOptions(clip=OptimConfig().clip, self_norm_weight=0.0, autocast_dtype=AUTOCAST[args.autocast])
    criterion = nn.CrossEntropyLoss()

    ours, plain = {}, {}
    for kind in kinds:
        base, _, output = kind.partition("-")
        cfg = {"embedding_dim": args.embedding_dim, "hidden_size": args.hidden, "num_layers": args.layers,
               "dropout": args.dropout, "dropout_out": args.dropout, "tie_weights": args.tied,
               "output": "adaptive" if output == "adaptive" else "softmax"}
        if output == "adaptive":
            cfg["adaptive_cutoffs"] = cutoffs
        torch.manual_seed(args.seed)
        model = build_model(base, cfg, v).to(device).train()
        model.fused_training = output == "fused"  # what optim.fused_softmax sets
        ours[kind] = (model, make_optimizer(model, OptimConfig(),
                                            capturable=device.type == "cuda" and not args.no_cuda_graph))
        if base not in plain:  # gru and gru-adaptive are both compared with the plain GRU
            torch.manual_seed(args.seed)
            p = PlainRNNLM(base.upper(), v, args.embedding_dim, args.hidden, args.layers, args.dropout,
                           args.tied).to(device)
            plain[base] = (p, torch.optim.SGD(p.parameters(), lr=PLAIN_LR))

    runs = {k: {"ours": [], "plain": []} for k in kinds}
    plan = tf32_plan(args.tf32)
    tf32 = {"ours": None, "plain": None}
    for r in range(args.repeat):
        for kind in kinds:
            # alternate which loop goes first, so neither always follows the other
            for side in (("ours", "plain") if r % 2 == 0 else ("plain", "ours")):
                set_tf32(plan[side])  # --tf32: the same flags for both loops (CUDA only; no effect on the CPU)
                if side == "ours":
                    run = time_ours(*ours[kind], streams, args, options)
                else:
                    run = time_plain(*plain[kind.partition("-")[0]], criterion, source, args)
                runs[kind][side].append(run)
                tf32[side] = tf32_flags()
        print(f"repeat {r + 1}/{args.repeat}: " + ", ".join(
            f"{k} {runs[k]['ours'][-1].words_per_s:.0f} vs plain {runs[k]['plain'][-1].words_per_s:.0f}"
            for k in kinds), file=sys.stderr)

    threads = f", {args.threads} thread(s)" if device.type == "cpu" else ""
    print(f"\nwords/s on {device}{threads}, batch {args.batch_size} x bptt {args.bptt}, vocabulary {v}, "
          f"embedding {args.embedding_dim}, hidden {args.hidden} x {args.layers} layer(s), "
          f"median of {args.repeat} x {args.steps} steps; plain loop: full softmax, SGD")
    print(f"{'model':15s} {'params':>10s} {'plain params':>12s} {'words/s':>9s} {'plain words/s':>13s} "
          f"{'ours/plain':>10s} {'real tokens':>11s}")
    out = {}
    for kind in kinds:
        model = ours[kind][0]
        p = plain[kind.partition("-")[0]][0]
        w_ours = [x.words_per_s for x in runs[kind]["ours"]]
        w_plain = [x.words_per_s for x in runs[kind]["plain"]]
        m_ours, m_plain = median(w_ours), median(w_plain)
        fill = runs[kind]["ours"][0].tokens / (args.steps * args.batch_size * args.bptt)
        n_ours, n_plain = model.num_parameters()["total"], sum(t.numel() for t in p.parameters())
        print(f"{kind:15s} {n_ours:10d} {n_plain:12d} {m_ours:9.0f} {m_plain:13.0f} {m_ours / m_plain:10.2f} "
              f"{fill:11.1%}")
        out[kind] = {"words_per_s": m_ours, "fused_softmax": bool(model.fused_training), "plain_loop_words_per_s": m_plain, "ratio": m_ours / m_plain,
                     "runs": {"ours": w_ours, "plain": w_plain},
                     "parameters": {"ours": n_ours, "plain": n_plain},
                     "ours_nll": [x.loss for x in runs[kind]["ours"]],
                     "plain_loop_loss": [x.loss for x in runs[kind]["plain"]],
                     "tokens_per_run": {"ours": runs[kind]["ours"][0].tokens, "plain": runs[kind]["plain"][0].tokens},
                     "ours_real_token_fraction": fill}
    if tf32["ours"] != tf32["plain"]:
        raise RuntimeError(f"the two loops ran with different TF32 flags: {tf32}")
    return {"vocab_size": v, "adaptive_cutoffs": cutoffs, "tf32_setting": args.tf32, "tf32": tf32,
            "plain_loop": {"optimizer": "SGD", "lr": PLAIN_LR, "clip": PLAIN_CLIP, "layout": "time-major",
                           "loss": "nn.CrossEntropyLoss over the full vocabulary"},
            "models": out}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)

    def mode_default(key):
        zoo, vs = MODE_DEFAULTS[key]
        return f"{zoo}; with --vs-plain-loop {vs if vs is not None else 'enough for the timed segments'}"

    mode = argparse.SUPPRESS  # mode-dependent default, set after parsing (MODE_DEFAULTS)
    ap.add_argument("--vs-plain-loop", action="store_true",
                    help="compare the toolkit's loop with a plain PyTorch word-LM loop (see the module docstring)")
    ap.add_argument("--text", default=TEXT, help="LM training text (one sentence per line)")
    ap.add_argument("--max-words", type=int, default=mode,
                    help=f"use a prefix of this many words (default {mode_default('max_words')})")
    ap.add_argument("--vocab", metavar="FILE", help="vocabulary file (one word per line) instead of --vocab-size")
    ap.add_argument("--vocab-size", type=int, default=mode,
                    help="most frequent words of the prefix (with --vs-plain-loop: of the whole text) "
                         f"(default {mode_default('vocab_size')})")
    ap.add_argument("--hidden", type=int, default=mode,
                    help="H: units per AMN GRU and of the small GRU; with --vs-plain-loop the hidden size of "
                         f"every model (default {mode_default('hidden')})")
    ap.add_argument("--memcells", type=int, default=5, help="K: AMN memcells (K + 1 GRUs)")
    ap.add_argument("--embedding-dim", type=int, default=mode, help=f"(default {mode_default('embedding_dim')})")
    ap.add_argument("--layers", type=int, default=1, help="recurrent layers (--vs-plain-loop)")
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="dropout after the RNN and between layers, both loops (--vs-plain-loop)")
    ap.add_argument("--tied", action="store_true", help="tie the output layer to the embedding, both loops "
                                                        "(--vs-plain-loop; needs --hidden == --embedding-dim)")
    ap.add_argument("--batch-size", type=int, default=32, help="parallel streams B")
    ap.add_argument("--bptt", type=int, default=20, help="BPTT segment length")
    ap.add_argument("--warmup", type=int, default=mode,
                    help=f"untimed updates per repeat (default {mode_default('warmup')})")
    ap.add_argument("--steps", type=int, default=mode,
                    help=f"timed updates per repeat (default {mode_default('steps')})")
    add_repeat(ap, 3, "timed runs per model (medians reported)")
    ap.add_argument("--log-interval", type=int, default=50, help="updates between reads of the loss, both loops")
    ap.add_argument("--models", default=mode,
                    help=f"comma-separated subset of {MODELS}; with --vs-plain-loop of {VS_MODELS} "
                         f"(default {mode_default('models')})")
    ap.add_argument("--autocast", choices=sorted(AUTOCAST), default="none",
                    help="the toolkit's loop under CUDA autocast to this dtype (the plain loop stays float32)")
    ap.add_argument("--no-cuda-graph", action="store_true",
                    help="ours: eager steps on CUDA instead of the captured step (train's optim.cuda_graph: false)")
    ap.add_argument("--tf32", choices=sorted(TF32), default="off",
                    help="CUDA: TF32 for matrix products and cuDNN, the same for every loop and model: on (as "
                         "nbest_rescore.training.trainer.train trains on CUDA) or off (float32 throughout)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--json", metavar="OUT", help="write the measurements to this JSON file")
    args = ap.parse_args(argv)
    for key, pair in MODE_DEFAULTS.items():
        if getattr(args, key, None) is None:
            setattr(args, key, pair[args.vs_plain_loop])
    if args.max_words is None:
        args.max_words = needed_words(args)
    for key in ("max_words", "batch_size", "bptt", "steps", "repeat", "log_interval", "hidden",
                "embedding_dim", "layers", "threads"):
        if getattr(args, key) < 1:
            ap.error(f"--{key.replace('_', '-')} must be >= 1, got {getattr(args, key)}")
    if args.warmup < 0:
        ap.error(f"--warmup must be >= 0, got {args.warmup}")
    return ap, args


def main(argv=None) -> int:
    ap, args = parse_args(argv)
    device = resolve_device(args.device)
    if args.autocast != "none" and device.type != "cuda":
        ap.error("--autocast is for CUDA only")
    if args.tf32 == "on" and device.type != "cuda":
        ap.error("--tf32 on is for CUDA only (TF32 is a CUDA number format; on the CPU both loops run float32)")
    set_tf32(TF32[args.tf32])  # zoo mode: every model; --vs-plain-loop sets it again before every run
    torch.set_num_threads(args.threads)
    result = (run_vs_plain_loop if args.vs_plain_loop else run_zoo)(ap, args, device)
    info = machine(args.threads, str(device))
    dev = info.get("gpu") or info["cpu"]
    write_json(args.json, {"args": vars(args), "device": f"{device} ({dev})", "torch": torch.__version__,
                           "machine": info, "tf32_setting": args.tf32, **result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
