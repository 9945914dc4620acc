#!/usr/bin/env python
"""Training speed (words/s) of GRU, LSTM and AMN LMs at equal total hidden units.

The AMN with K memcells of H units runs K + 1 GRUs of H units (controller included,
thesis ``000`` chapter 4); it is compared with a GRU and an LSTM of (K + 1) H units,
with a GRU of H units, and with a straightforward AMN (a Python loop over K + 1
``torch.nn.GRUCell`` per time step) to show what the batched implementation of
:mod:`nbest_rescore.models.amn` gains. Every model trains with the project's own step
(:func:`nbest_rescore.training.trainer.train_step`: ``run_segment`` + the trainer's
loss + Adam with clipping) on the same BPTT segments of a prefix of the real LM text.
For each repeat and model: ``--warmup`` untimed steps, then ``--steps`` timed steps;
words/s counts the real (unpadded) target words; medians over ``--repeats``. Models
are interleaved within each repeat so that load on the machine affects all alike.

    python benchmarks/train_speed.py --threads 1 --json exp/train_speed.json
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import torch
from torch import nn

from nbest_rescore.device import resolve_device
from nbest_rescore.io.lm_text import read_lm_text
from nbest_rescore.models import build_model
from nbest_rescore.models.amn import AMNConfig
from nbest_rescore.models.base import LanguageModel, Output
from nbest_rescore.training.streams import encode_document, make_streams, segments
from nbest_rescore.training.trainer import train_step
from nbest_rescore.vocab import Vocabulary

TEXT = str(Path(__file__).resolve().parents[2] / "shared" / "data" / "abc-nbest" / "lm" / "lm_train.txt")
MODELS = ("gru-small", "gru", "lstm", "amn", "amn-naive")


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


def check_naive_equals_batched(args, vocab_size, batch) -> float:
    """|loss difference| of the two AMN implementations on one segment (same weights)."""
    torch.manual_seed(args.seed)
    amn = build("amn", args, vocab_size)
    naive = StraightforwardAMN.from_amn(amn)
    inp, tgt, mask, reset = batch
    losses = []
    for m in (amn, naive):
        st = m.init_state(inp.shape[0])
        _, step = train_step(m, torch.optim.SGD(m.parameters(), lr=0.0), st, inp, tgt, mask, reset, 1e9)
        losses.append(float(step.loss.detach()))
    return abs(losses[0] - losses[1])


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(model, opt, batches, warmup: int, steps: int, clip: float) -> float:
    """Words/s of ``steps`` training steps after ``warmup`` untimed ones (device work
    synchronised before the clock is read)."""
    device = batches[0][0].device
    state = model.init_state(batches[0][0].shape[0], device)
    for inp, tgt, mask, reset in batches[:warmup]:
        state, _ = train_step(model, opt, state, inp, tgt, mask, reset, clip)
    words = 0
    _sync(device)
    t0 = time.perf_counter()
    for inp, tgt, mask, reset in batches[warmup:warmup + steps]:
        state, step = train_step(model, opt, state, inp, tgt, mask, reset, clip)
        words += step.num_tokens if step is not None else 0
    _sync(device)
    return words / (time.perf_counter() - t0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--text", default=TEXT, help="LM training text (one sentence per line)")
    ap.add_argument("--max-words", type=int, default=20000, help="use a prefix of this many words")
    ap.add_argument("--vocab-size", type=int, default=10000)
    ap.add_argument("--hidden", type=int, default=64, help="H: units per AMN GRU and of the small GRU")
    ap.add_argument("--memcells", type=int, default=5, help="K: AMN memcells (K + 1 GRUs)")
    ap.add_argument("--embedding-dim", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--bptt", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8, help="timed steps per repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated subset of {MODELS}")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--json", metavar="OUT", help="write the measurements to this JSON file")
    args = ap.parse_args(argv)
    device = resolve_device(args.device)
    kinds = [k for k in args.models.split(",") if k]
    bad = [k for k in kinds if k not in MODELS]
    if bad:
        ap.error(f"unknown model(s) {bad}; choose from {MODELS}")
    torch.set_num_threads(args.threads)

    docs = read_lm_text(args.text, args.max_words)
    vocab = Vocabulary.from_counts(Counter(w for d in docs for s in d for w in s), args.vocab_size)
    streams = make_streams([encode_document(d, vocab) for d in docs], args.batch_size)
    batches = list(segments(streams, args.bptt))[:args.warmup + args.steps]
    if len(batches) < args.warmup + args.steps:
        ap.error(f"--max-words {args.max_words} gives only {len(batches)} segments; "
                 f"need warmup + steps = {args.warmup + args.steps}")
    diff = check_naive_equals_batched(args, len(vocab), batches[0]) if "amn-naive" in kinds else None
    batches = [tuple(t.to(device) for t in b) for b in batches]

    models, opts = {}, {}
    for kind in kinds:
        torch.manual_seed(args.seed)
        models[kind] = build(kind, args, len(vocab)).to(device).train()
        opts[kind] = torch.optim.Adam(models[kind].parameters(), lr=1e-3)
    rates = {k: [] for k in kinds}
    for r in range(args.repeats):
        for kind in kinds:
            rates[kind].append(time_steps(models[kind], opts[kind], batches, args.warmup, args.steps, 10.0))
        print(f"repeat {r + 1}/{args.repeats}: " + ", ".join(f"{k} {rates[k][-1]:.0f}" for k in kinds),
              file=sys.stderr)

    med = {k: statistics.median(v) for k, v in rates.items()}
    ref = med.get("gru")
    print(f"\nwords/s on {device}, {args.threads} thread(s), batch {args.batch_size} x bptt {args.bptt}, "
          f"vocabulary {len(vocab)}, embedding {args.embedding_dim}, median of {args.repeats} x {args.steps} steps")
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
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"args": vars(args), "vocab_size": len(vocab), "torch": torch.__version__,
                       "machine": platform.processor() or platform.machine(), "models": rows,
                       "ratios": ratios, "naive_vs_batched_loss_diff": diff}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
