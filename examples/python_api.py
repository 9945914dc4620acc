"""The Python API in a few lines: rescore N-best lists, tune the weights on the NN
costs, write the outputs, and measure perplexity.

    python examples/python_api.py LM.pt ../shared/data/abc-nbest/ci [OUT_DIR]
"""
import sys

import nbest_rescore as nr

lm_path, lists = sys.argv[1], sys.argv[2]
nbest = nr.load_nbest(lists)                        # Kaldi N-best directory (or a plain file)
refs = nr.load_references(f"{lists}/ref.txt")
lm = nr.load_lm(lm_path, device="cpu")              # "cuda" on a GPU

wip = -0.629606                                     # the benchmark decoder's word insertion penalty
res = nr.score(nbest, lm, refs=refs, lm_weight=9.5, interp=0.5, word_ins_penalty=wip, history="first-pass")
print(f"{lm.name}: {res.stats['hypotheses']} hypotheses of {len(nbest)} utterances scored")
for name, report in res.wer.items():                # rescored, first_pass, oracle
    print(f"  {name:<10} {report}")
utt = nbest.utt_ids[0]
print(f"  new 1-best of {utt}: {' '.join(res.one_best[utt])}")

tuned = nr.tune(nbest, refs, res.nn_costs(), interps=[0.5, 0.6, 0.7, 0.8, 0.9, 1.0], lm_weights=[8, 9, 10, 11, 12],
                word_ins_penalties=[wip])
b = tuned.best
print(f"tuned: WER {b.wer:.2f}% at interp {b.interp:g}, lm_weight {b.lm_weight:g}")

ppl = nr.perplexity(lm, [[tuple(refs[u]) for u in nbest.utt_ids]])   # the references as one document
print(f"perplexity of the references: {ppl.perplexity:.1f} ({ppl.tokens} tokens, OOV {ppl.oov_rate:.2f}%)")

if len(sys.argv) > 3:
    print("wrote", ", ".join(nr.write_score_outputs(res, sys.argv[3])))
