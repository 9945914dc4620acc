#!/usr/bin/env python
"""N-best rescoring speed: words/s, hypotheses/s and peak memory of three ways to get
the same NN costs, each utterance scored from the initial state (history ``none``).

* ``one_at_a_time``: one forward pass per hypothesis (``NnScorer(mode="single")``).
* ``padded_batch``: one utterance's N-best list as one padded batch, as Kaldi's PyTorch
  N-best rescoring scripts do (``NnScorer(mode="padded")`` with unbounded batch sizes).
* ``default``: the toolkit's default path, ``rescore(..., history="none")`` with a default
  :class:`~nbest_rescore.rescoring.scorer.NnScorer`: prefix trees over 64 utterances
  at a time (:mod:`nbest_rescore.rescoring.prefix_tree`).
* ``default_self_normalized``, ``default_int8``, ``default_bfloat16``, ``default_float16``
  (CUDA only): ``default`` with
  one fast, approximate option of :class:`~nbest_rescore.rescoring.scorer.NnScorer`
  (``output="self-normalized"``: target logits only; ``quantize="int8"``: CPU only,
  left out of the default path list on CUDA; ``dtype="bfloat16"``). Their costs differ
  from the exact ones by design: ``max_abs_diff_vs_one_at_a_time`` is large for them
  (self-normalised costs are off by the sum of log Z along the hypothesis for a model
  not trained with ``optim.self_norm_weight > 0``, and by much more for an untrained
  one); ``mean_abs_diff_per_word_vs_default`` gives the error per scored word.

* ``default_plain_softmax``: ``default`` with the exact full softmax as before issue 21
  (``NnScorer(softmax_impl="plain")``: ``log_softmax`` of the whole [nodes, V] product
  instead of the fused output layer of :mod:`nbest_rescore.models.fused_output`); the
  same costs. The ``padded_batch`` and ``one_at_a_time`` paths use the fused layer too.

* ``default_full_distribution`` (adaptive-softmax models only): ``default`` with the
  tree scoring each node through the full [nodes, V] distribution
  (``AdaptiveLogSoftmaxWithLoss.log_prob``, every tail cluster at every node), as before
  issue 13, instead of the head once per node and each tail cluster only for the nodes
  with a child word in it; the same costs, to time that change.

``--vs-kaldi-style`` measures the toolkit against the scorer a Kaldi user already has:

* ``kaldi_style``: Kaldi's ``steps/pytorchnn/compute_sentence_scores.py`` written in
  plain PyTorch in ``benchmarks/kaldi_style.py`` (one utterance = one padded batch
  with ``<s>`` at both ends, ``nn.CrossEntropyLoss(reduction='none')`` over the full
  vocabulary, the first hypothesis' state carried to the next utterance), on the
  checkpoint's weights (an RNN/GRU/LSTM with the full softmax);
* ``default``: the toolkit's default path with ``--history first-pass`` (the same
  carried 1-best state; the costs equal ``kaldi_style``'s, checked to 1e-4), and
  ``default_plain_softmax``, the same before the fused output layer;
* ``default_adaptive`` (with ``--output adaptive``): ``default`` on the adaptive-softmax
  copy of the checkpoint (below), while the two other paths score the checkpoint.

The ratios ``speedup_words_per_s`` are then ``default/kaldi_style`` and
``default_adaptive/kaldi_style``. ``--history`` sets the history of the default paths
(``none`` unless ``--vs-kaldi-style``; ``first-pass`` is for the default paths and
``kaldi_style`` only, which carry the state).

* ``default_k2`` .. ``default_k8`` and ``default_adaptive_k2`` .. ``default_adaptive_k8``:
  ``default`` and ``default_adaptive`` with history merging at the order K (``score
  --max-ngram-order K``, :mod:`nbest_rescore.rescoring.history_graph`): approximate by
  design; ``mean_abs_diff_per_word_vs_default`` and the ratios to the exact tree
  (``default_kK/default``, ``default_adaptive_kK/default_adaptive``) are reported.

``--output adaptive`` measures the adaptive softmax with any checkpoint: the parent
process writes a copy whose output layer is ``output: adaptive`` (random weights,
``--adaptive-cutoffs``; the recurrent weights are kept), its word ids re-ordered by
decreasing frequency in ``--order-by-text`` (as the trainer orders them, so that the
frequent words fall in the head; the embedding rows follow their words), and every path
scores that copy (``default_adaptive`` alone with ``--vs-kaldi-style``). An adaptive
checkpoint is used as it is unless ``--adaptive-cutoffs`` or ``--order-by-text`` is
given. ``default_full_distribution`` then joins the default paths.

Speed does not depend on the weights: an untrained checkpoint of the target size
(``examples/make_random_checkpoint.py``, e.g. a 1-layer 512-unit LSTM over the full
43k-word vocabulary) measures it without training.

Each path runs in a fresh subprocess so that its peak RSS (``ru_maxrss``) is its own;
it scores the lists ``--repeat`` times (after one untimed warm-up utterance) and the
medians are reported. Words are the scored tokens (words and ``</s>``). Every path's
costs are compared with ``one_at_a_time`` on the hypotheses both scored.

Example::

    python -m benchmarks.rescore_speed --lm /tmp/tiny.pt --nbest ../shared/data/abc-nbest/dev \\
        --max-utts 40 --repeat 3 --threads 1 --json /tmp/speed.json
    python examples/make_random_checkpoint.py --vocab ../shared/data/abc-nbest/lm/vocab.txt \
        --model lstm --hidden 512 --out /tmp/lstm512.pt
    python examples/make_random_checkpoint.py --vocab ../shared/data/abc-nbest/lm/vocab.txt \
        --model gru --hidden 256 --out /tmp/gru256.pt
    python -m benchmarks.rescore_speed --lm /tmp/gru256.pt --output adaptive \
        --order-by-text ../shared/data/abc-nbest/lm/lm_train.txt --adaptive-cutoffs 2943,14651 \
        --nbest ../shared/data/abc-nbest/dev --max-utts 100 --paths default,default_full_distribution
    python -m benchmarks.rescore_speed --lm /tmp/lstm512.pt --vs-kaldi-style --output adaptive \
        --order-by-text ../shared/data/abc-nbest/lm/lm_train.txt \
        --nbest ../shared/data/abc-nbest/dev --max-utts 20 --threads 2 --json /tmp/vs_kaldi.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace

from benchmarks.harness import (add_repeat, check_inputs, clocked, cuda_peak_mb, machine, median, module_command,
                                parse_or_work, peak_rss_mb, run_main, write_json)

_STARTED = time.perf_counter()  # a worker's start-up: imports, lists and model loaded

# the fast paths: NnScorer options on top of the default path
FAST_PATHS = {"default_self_normalized": {"output": "self-normalized"},
              "default_int8": {"quantize": "int8"},
              "default_bfloat16": {"dtype": "bfloat16"},
              "default_float16": {"dtype": "float16"}}
#: ``default`` with the full softmax as before issue 21: ``log_softmax`` of the whole
#: [nodes, V] product instead of the fused output layer (the same costs)
PLAIN_SOFTMAX = "default_plain_softmax"
#: ``default`` (and ``default_adaptive``) with history merging at the order K
#: (``score --max-ngram-order K``; :mod:`nbest_rescore.rescoring.history_graph`)
MERGE_ORDERS = tuple(range(2, 9))
MERGED_PATHS = {f"default_k{k}": {"max_ngram_order": k} for k in MERGE_ORDERS}
ADAPTIVE_MERGED = {f"default_adaptive_k{k}": {"max_ngram_order": k} for k in MERGE_ORDERS}
#: NnScorer options of the exact and approximate variants of the default path
SCORER_OPTIONS = {**FAST_PATHS, PLAIN_SOFTMAX: {"softmax_impl": "plain"}, **MERGED_PATHS, **ADAPTIVE_MERGED}
#: the tree as before issue 13 for an adaptive softmax (see the module docstring)
FULL_DISTRIBUTION = "default_full_distribution"
#: the scorer of Kaldi's PyTorch recipe, written in benchmarks/kaldi_style.py
KALDI_STYLE = "kaldi_style"
#: ``default`` on the adaptive-softmax copy while the other paths score the checkpoint
DEFAULT_ADAPTIVE = "default_adaptive"
PATHS = ("one_at_a_time", "padded_batch", "kaldi_style", "default", PLAIN_SOFTMAX, DEFAULT_ADAPTIVE, *FAST_PATHS,
         FULL_DISTRIBUTION, *MERGED_PATHS, *ADAPTIVE_MERGED)
#: the paths that can start an utterance from a carried state (``--history first-pass``)
CARRYING_PATHS = ("kaldi_style", "default", PLAIN_SOFTMAX, DEFAULT_ADAPTIVE, *FAST_PATHS, FULL_DISTRIBUTION,
                  *MERGED_PATHS, *ADAPTIVE_MERGED)
#: the paths that score the adaptive-softmax copy with ``--vs-kaldi-style --output adaptive``
ADAPTIVE_COPY_PATHS = (DEFAULT_ADAPTIVE, *ADAPTIVE_MERGED)
CHUNK_UTTS = 64  # utterances per scorer call in the toolkit's history "none" path


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lm", required=True, help="checkpoint (.pt) written by nbest-rescore train")
    p.add_argument("--nbest", required=True, help="Kaldi N-best directory (e.g. abc-nbest/dev)")
    p.add_argument("--max-utts", type=int, default=None, help="only the first N utterances")
    p.add_argument("--single-max-utts", type=int, default=None,
                   help="one_at_a_time only scores the first N utterances (it is slow); default --max-utts")
    p.add_argument("--nbest-size", type=int, default=None, help="only the first K hypotheses of each list")
    add_repeat(p, 3, "timed repetitions per path (medians reported)")
    p.add_argument("--paths", default=None,
                   help=f"comma-separated subset of {','.join(PATHS)} (default: all; no default_int8 on CUDA)")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--output", choices=("checkpoint", "adaptive"), default="checkpoint",
                   help="checkpoint: the model as saved; adaptive: its copy with the adaptive softmax "
                        "(see the module docstring)")
    p.add_argument("--adaptive-cutoffs", default=None,
                   help="--output adaptive: comma-separated cluster boundaries (default: the 85%%/97%% "
                        "frequency defaults of --order-by-text)")
    p.add_argument("--order-by-text", default=None,
                   help="--output adaptive: LM text whose word counts order the word ids (and give the "
                        "default cutoffs)")
    p.add_argument("--vs-kaldi-style", action="store_true",
                   help="compare the default path (--history first-pass) with the Kaldi-style scorer written "
                        "in benchmarks/kaldi_style.py (paths kaldi_style,default[,default_adaptive])")
    p.add_argument("--history", choices=("none", "first-pass"), default=None,
                   help="history of the default paths (default: none; first-pass with --vs-kaldi-style)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--costs-out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker is None:  # the parent checks once
        check_inputs(p, args.lm, args.nbest)
    on_cuda = args.device.startswith("cuda")
    if args.history is None:
        args.history = "first-pass" if args.vs_kaldi_style else "none"
    if args.paths is None and args.vs_kaldi_style:
        args.paths = ",".join([KALDI_STYLE, "default", PLAIN_SOFTMAX]
                              + ([DEFAULT_ADAPTIVE] if args.output == "adaptive" else []))
    if args.paths is None:
        skip = {"default_int8" if on_cuda else "default_float16"}  # int8: CPU only; float16: CUDA only
        skip |= {KALDI_STYLE, DEFAULT_ADAPTIVE}
        if args.output != "adaptive":
            skip.add(FULL_DISTRIBUTION)
        args.paths = ",".join(x for x in PATHS if x not in skip)
    if args.adaptive_cutoffs is not None:
        try:
            args.adaptive_cutoffs = [int(x) for x in args.adaptive_cutoffs.split(",")]
        except ValueError:
            p.error(f"--adaptive-cutoffs: expected comma-separated integers, got {args.adaptive_cutoffs!r}")
    if args.output != "adaptive" and (args.adaptive_cutoffs is not None or args.order_by_text):
        p.error("--adaptive-cutoffs and --order-by-text go with --output adaptive")
    bad = [x for x in args.paths.split(",") if x not in PATHS]
    if bad:
        p.error(f"--paths: unknown {bad}; choose from {', '.join(PATHS)}")
    if args.history != "none":
        other = [x for x in args.paths.split(",") if x not in CARRYING_PATHS]
        if other:
            p.error(f"--history {args.history}: the paths {other} score every utterance from the initial state; "
                    f"choose from {', '.join(CARRYING_PATHS)} (or --history none)")
    copy_paths = [x for x in args.paths.split(",") if x in ADAPTIVE_COPY_PATHS]
    if copy_paths and (args.output != "adaptive" or not args.vs_kaldi_style):
        p.error(f"--paths {','.join(copy_paths)}: goes with --vs-kaldi-style --output adaptive")
    if on_cuda and "default_int8" in args.paths.split(","):
        p.error("--paths default_int8: int8 dynamic quantisation runs on the CPU only; use --device cpu")
    if not on_cuda and "default_float16" in args.paths.split(","):
        p.error("--paths default_float16: float16 scoring is for CUDA only; use --device cuda "
                "(or default_bfloat16 on the CPU)")
    for name in ("max_utts", "single_max_utts", "nbest_size", "repeat", "threads"):
        v = getattr(args, name)
        if v is not None and v < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {v}")
    return args


def load_lists(args, max_utts):
    """The first ``max_utts`` N-best lists, each cut to ``--nbest-size`` hypotheses."""
    from nbest_rescore.io.kaldi_nbest import read_kaldi_nbest_dir
    from nbest_rescore.types import NbestSet

    nbest = read_kaldi_nbest_dir(args.nbest)
    utts = nbest.utterances[:max_utts]
    k = args.nbest_size
    if k is not None:
        utts = tuple(replace(u, keys=u.keys[:k], hyps=u.hyps[:k], ac_cost=u.ac_cost[:k],
                             lm_cost=u.lm_cost[:k], graph_cost=u.graph_cost[:k]) for u in utts)
    return NbestSet(tuple(utts), nbest.doc_source, nbest.source)


def make_runner(path, model, vocab, device, history="none"):
    """A function NbestSet -> float64 [H] NN costs in set order, for ``path`` (the
    default paths and ``kaldi_style`` with ``history``)."""
    import numpy as np

    from nbest_rescore.rescoring.combine import Weights
    from nbest_rescore.rescoring.history import rescore
    from nbest_rescore.rescoring.scorer import NnScorer

    if path == FULL_DISTRIBUTION:
        from nbest_rescore.rescoring import prefix_tree

        if getattr(model, "adaptive", None) is None:
            sys.exit(f"--paths {FULL_DISTRIBUTION}: the model has no adaptive softmax (use --output adaptive)")
        prefix_tree._adaptive_pairs = lambda m: False  # this worker process only: the full log_prob per node
    if path == KALDI_STYLE:
        from benchmarks.kaldi_style import KaldiStyleScorer

        try:
            kaldi = KaldiStyleScorer(model, vocab, device, carry=history == "first-pass")
        except ValueError as exc:
            sys.exit(f"--paths {KALDI_STYLE}: {exc}")
        return kaldi.costs
    if path in ("default", DEFAULT_ADAPTIVE, FULL_DISTRIBUTION) or path in SCORER_OPTIONS:
        scorer = NnScorer(model, vocab, device, **SCORER_OPTIONS.get(path, {}))

        def default_path(lists):
            scorer.positions = 0
            costs = rescore(lists, scorer, Weights(), history).nn_cost
            default_path.positions = scorer.positions  # the LM positions the scorer read (its own count)
            return costs

        return default_path
    if path == "padded_batch":
        scorer = NnScorer(model, vocab, device, batch_size=1 << 30, max_tokens=1 << 40, mode="padded")
    else:
        scorer = NnScorer(model, vocab, device, mode="single")
    init = scorer.initial_state(1)

    def per_utterance(lists):
        return np.concatenate([scorer.costs(init, [0] * len(u), u.hyps) for u in lists.utterances])

    return per_utterance


def lm_positions(path, lists, vocab, history="none"):
    """Input positions the LM reads for ``path``: list tokens, padded batch positions
    (``kaldi_style``: and the first hypotheses again when the state is carried), or
    prefix-tree nodes (trees over the same 64-utterance calls as the toolkit with history
    none; the default paths report the scorer's own count instead, ``NnScorer.positions``;
    the first-pass 1-best histories they read are not counted)."""
    from benchmarks.kaldi_style import KaldiStyleScorer
    from nbest_rescore.rescoring.prefix_forest import build_forest

    utts = lists.utterances
    if path == KALDI_STYLE:
        return KaldiStyleScorer.positions(lists, carry=history == "first-pass")
    if path == "one_at_a_time":
        return sum(len(h) + 1 for u in utts for h in u.hyps)
    if path == "padded_batch":
        return sum(len(u) * (1 + max(len(h) for h in u.hyps)) for u in utts)
    nodes = 0
    for a in range(0, len(utts), CHUNK_UTTS):
        hyps = [vocab.encode(h) for u in utts[a:a + CHUNK_UTTS] for h in u.hyps]
        nodes += build_forest(hyps, [0] * len(hyps), vocab.eos).num_nodes
    return nodes


def adaptive_copy(args, out_path) -> dict:
    """Write ``--lm`` with the adaptive softmax to ``out_path`` (see the module
    docstring); returns what was done (for the JSON)."""
    from collections import Counter

    import numpy as np
    import torch

    from nbest_rescore.errors import DataError
    from nbest_rescore.io.lm_text import read_lm_text
    from nbest_rescore.models import build_model, load_model, save_model
    from nbest_rescore.models.base import default_adaptive_cutoffs

    model, vocab, info = load_model(args.lm)
    if model.adaptive is not None and args.adaptive_cutoffs is None and not args.order_by_text:
        return {"converted": False, "cutoffs": list(model.adaptive.cutoffs[:-1])}
    old_ids = np.arange(len(vocab))
    if args.order_by_text:
        docs = read_lm_text(args.order_by_text)
        counts = Counter(w for doc in docs for sent in doc for w in sent)
        old, vocab = vocab, vocab.by_frequency(counts)
        old_ids = np.array([old.index[w] for w in vocab.words])  # old id of each new id
        freq = [counts.get(w, 0) for w in vocab.words]
        freq[0] = sum(len(doc) for doc in docs)  # </s> ends every sentence
    cuts = args.adaptive_cutoffs
    if cuts is None:
        if not args.order_by_text:
            sys.exit("--output adaptive: give --adaptive-cutoffs or --order-by-text (for the default cutoffs)")
        cuts = default_adaptive_cutoffs(freq)
    torch.manual_seed(0)
    cfg = {**model.config_dict(), "output": "adaptive", "adaptive_cutoffs": list(cuts), "tie_weights": False}
    try:
        new = build_model(model.name, cfg, len(vocab))
    except DataError as exc:
        sys.exit(f"--output adaptive: {exc}")
    keep = {k: v for k, v in model.state_dict().items() if not k.startswith(("decoder.", "project.", "adaptive."))}
    keep["embedding.weight"] = keep["embedding.weight"][torch.from_numpy(old_ids)]
    missing, unexpected = new.load_state_dict(keep, strict=False)
    assert not unexpected and all(k.startswith("adaptive.") for k in missing), (missing, unexpected)
    save_model(out_path, new, vocab, {**info, "note": "rescore_speed --output adaptive: random output layer"})
    return {"converted": True, "cutoffs": list(cuts), "order_by_text": args.order_by_text}


def worker(args) -> dict:
    """Run one path (in its own process); costs go to ``--costs-out`` (.npy)."""
    import numpy as np
    import torch

    from nbest_rescore.device import resolve_device
    from nbest_rescore.models import load_model
    from nbest_rescore.types import NbestSet

    if args.threads:
        torch.set_num_threads(args.threads)
    path = args.worker
    n_utts = args.max_utts
    if path == "one_at_a_time" and args.single_max_utts:
        n_utts = min(args.single_max_utts, n_utts or args.single_max_utts)
    lists = load_lists(args, n_utts)
    device = resolve_device(args.device)
    model, vocab, _ = load_model(args.lm, device)
    baseline = peak_rss_mb()
    cuda_peak_mb(device, reset=True)
    run = make_runner(path, model, vocab, device, args.history)
    startup = time.perf_counter() - _STARTED
    run(NbestSet(lists.utterances[:1], lists.doc_source))  # warm-up, untimed

    seconds, cpu_seconds, costs = [], [], None
    for _ in range(args.repeat):
        costs, wall, cpu = clocked(lambda: run(lists), device)
        seconds.append(wall)
        cpu_seconds.append(cpu)
    np.save(args.costs_out, costs)
    hyps = sum(len(u) for u in lists.utterances)
    words = sum(len(h) + 1 for u in lists.utterances for h in u.hyps)
    med = median(seconds)
    return {
        "utterances": len(lists), "hypotheses": hyps, "words": words,
        "lm_positions": getattr(run, "positions", None) or lm_positions(path, lists, vocab, args.history),
        "history": args.history,
        "startup_seconds": startup,
        "seconds": seconds, "cpu_seconds": cpu_seconds, "median_seconds": med,
        "words_per_s": words / med, "hyps_per_s": hyps / med,
        "words_per_cpu_s": words / median(cpu_seconds),
        "peak_rss_mb": peak_rss_mb(), "rss_before_scoring_mb": baseline,
        "threads": torch.get_num_threads(),
        "peak_cuda_mb": cuda_peak_mb(device),
    }


def run_paths(args, argv) -> dict:
    """Each path in a fresh subprocess (given this script's arguments ``argv``); then
    the cost check and the ratios."""
    import numpy as np

    paths = [p for p in PATHS if p in args.paths.split(",")]
    out = {"lm": args.lm, "nbest": args.nbest, "max_utts": args.max_utts, "nbest_size": args.nbest_size,
           "history": args.history, "vs_kaldi_style": args.vs_kaldi_style,
           "single_max_utts": args.single_max_utts, "repeat": args.repeat, "machine": machine(args.threads, args.device), "paths": {}}
    costs = {}
    with tempfile.TemporaryDirectory() as tmp:
        lm_of = {}  # path -> the checkpoint it scores, when not --lm
        if args.output == "adaptive":
            copy = os.path.join(tmp, "adaptive.pt")
            out["output"] = {"adaptive": adaptive_copy(args, copy)}
            if out["output"]["adaptive"]["converted"]:  # the copy: for default_adaptive alone, or for every path
                lm_of = {p: copy for p in paths if p in ADAPTIVE_COPY_PATHS or not args.vs_kaldi_style}
        for path in paths:
            cost_file = os.path.join(tmp, f"{path}.npy")
            lm = ["--lm", lm_of[path]] if path in lm_of else []  # the last --lm wins
            cmd = [*module_command("benchmarks.rescore_speed"), *argv, *lm, "--worker", path, "--costs-out", cost_file]
            print(f"[{path}] running ...", file=sys.stderr, flush=True)
            res = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
            if res.returncode != 0:
                sys.exit(f"path {path} failed (exit {res.returncode})")
            out["paths"][path] = json.loads(res.stdout.strip().splitlines()[-1])
            costs[path] = np.load(cost_file)
    ref = costs.get("one_at_a_time")
    for path, c in costs.items():
        if ref is None or (path in ADAPTIVE_COPY_PATHS and args.vs_kaldi_style):  # no reference, or another model
            diff = None
        else:
            n = min(len(ref), len(c))  # one_at_a_time may score fewer utterances
            diff = float(np.abs(c[:n] - ref[:n]).max())
        out["paths"][path]["max_abs_diff_vs_one_at_a_time"] = diff
    res = out["paths"]
    for path in (*FAST_PATHS, *MERGED_PATHS, *ADAPTIVE_MERGED):
        exact = _exact_of(path)
        if path in costs and exact in costs:
            res[path]["mean_abs_diff_per_word_vs_default"] = float(
                np.abs(costs[path] - costs[exact]).sum() / res[path]["words"])
    for path in (FULL_DISTRIBUTION, KALDI_STYLE, PLAIN_SOFTMAX):  # the same exact costs, computed two ways
        if path in costs and "default" in costs:
            res[path]["max_abs_diff_vs_default"] = float(np.abs(costs[path] - costs["default"]).max())
    ratios = {}
    for other in ("one_at_a_time", "padded_batch"):
        if "default" in res and other in res:
            ratios[f"default/{other}"] = res["default"]["words_per_s"] / res[other]["words_per_s"]
    for path in (*FAST_PATHS, *MERGED_PATHS, *ADAPTIVE_MERGED):
        exact = _exact_of(path)
        if path in res and exact in res:
            ratios[f"{path}/{exact}"] = res[path]["words_per_s"] / res[exact]["words_per_s"]
    if KALDI_STYLE in res:
        for path in res:
            if path not in (KALDI_STYLE, "one_at_a_time", "padded_batch"):
                ratios[f"{path}/{KALDI_STYLE}"] = res[path]["words_per_s"] / res[KALDI_STYLE]["words_per_s"]
    if PLAIN_SOFTMAX in res and "default" in res:
        ratios[f"default/{PLAIN_SOFTMAX}"] = res["default"]["words_per_s"] / res[PLAIN_SOFTMAX]["words_per_s"]
    if FULL_DISTRIBUTION in res and "default" in res:
        ratios[f"default/{FULL_DISTRIBUTION}"] = res["default"]["words_per_s"] / res[FULL_DISTRIBUTION]["words_per_s"]
        out["speedup_cpu_seconds"] = {f"default/{FULL_DISTRIBUTION}": (
            median(res[FULL_DISTRIBUTION]["cpu_seconds"]) / median(res["default"]["cpu_seconds"]))}
    out["speedup_words_per_s"] = ratios
    return out


def _exact_of(path: str) -> str:
    """The exact path an approximate one is compared with: ``default_adaptive`` for the
    merged paths of the adaptive copy, else ``default``."""
    return DEFAULT_ADAPTIVE if path in ADAPTIVE_MERGED else "default"


def format_table(out: dict) -> str:
    m = out["machine"]
    lines = [f"machine: {m['cpu']} ({m['cpu_count']} cores), {m['threads']} torch thread(s), torch {m['torch']}, "
             f"device {m['device']}; load average at start {m['load_average_at_start']}",
             f"lists: {out['nbest']} (" + ("history none, each utterance from the initial state" if
                                            out["history"] == "none" else
                                            "history first-pass: the first-pass 1-best state carried within "
                                            "each document") + f"), medians of {out['repeat']} runs",
             f"{'path':<23} {'utts':>5} {'hyps':>7} {'words':>8} {'LM pos.':>8} {'median s':>9} "
             f"{'words/s':>9} {'hyps/s':>8} {'peak RSS MB':>11} {'max|diff| nats':>14} {'start-up s':>10}"
             + (f" {'peak CUDA MB':>12}" if m["device"].startswith("cuda") else "")]
    for name, r in out["paths"].items():
        d = r["max_abs_diff_vs_one_at_a_time"]
        lines.append(f"{name:<23} {r['utterances']:>5} {r['hypotheses']:>7} {r['words']:>8} {r['lm_positions']:>8} "
                     f"{r['median_seconds']:>9.2f} {r['words_per_s']:>9.0f} {r['hyps_per_s']:>8.1f} "
                     f"{r['peak_rss_mb']:>11.0f} {'-' if d is None else f'{d:.2e}':>14} "
                     f"{r['startup_seconds']:>10.1f}"
                     + (f" {r['peak_cuda_mb']:>12.0f}" if r.get("peak_cuda_mb") is not None else ""))
    for k, v in out["speedup_words_per_s"].items():
        lines.append(f"speed-up {k} (words/s): {v:.2f}x")
    for k, v in out.get("speedup_cpu_seconds", {}).items():
        lines.append(f"speed-up {k} (median CPU seconds): {v:.2f}x")
    for name, r in out["paths"].items():
        if "mean_abs_diff_per_word_vs_default" in r:
            lines.append(f"{name}: approximate by design, mean |cost - default cost| "
                         f"{r['mean_abs_diff_per_word_vs_default']:.3g} nats per scored word")
    res = out["paths"]
    for path in (FULL_DISTRIBUTION, KALDI_STYLE, PLAIN_SOFTMAX):
        if "max_abs_diff_vs_default" in res.get(path, {}):
            lines.append(f"{path}: max |cost - default cost| "
                         f"{res[path]['max_abs_diff_vs_default']:.2e} nats (the same exact costs)")
    if "output" in out:
        lines.append(f"output layer: {out['output']}")
    if "one_at_a_time" in res and any(r["utterances"] != res["one_at_a_time"]["utterances"] for r in res.values()):
        lines.append(f"note: one_at_a_time scored only the first {res['one_at_a_time']['utterances']} utterances "
                     f"(--single-max-utts); its cost check covers those hypotheses")
    return "\n".join(lines)


def main(argv=None):
    parsed = parse_or_work(parse_args, worker, argv)
    if parsed is None:
        return
    argv, args = parsed
    out = run_paths(args, argv)
    print(format_table(out))
    write_json(args.json, out)


if __name__ == "__main__":
    run_main(main)
