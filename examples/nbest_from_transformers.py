"""N-best lists from a Hugging Face transformers model, written as the JSON Lines that
nbest-rescore reads (docs/formats.md, "JSON Lines"): beam search with N beams returns N
hypotheses; ``model.compute_transition_scores`` gives the natural-log probability of
each generated token, and

    total_cost = -(sum of the token log-probabilities)   (the decoder's own cost, -log p)

An end-to-end decoder has no separate LM, so its whole score is one total per
hypothesis (docs/scoring.md, "One total score per hypothesis"): rescore with
``--interp 0`` (the NN LM alone) and ``tune`` searches the LM weight and the penalty,
not lambda. A decoder with an external LM writes ``ac_cost`` and that LM's -log p as
``lm_cost`` instead.

    python examples/nbest_from_transformers.py openai/whisper-tiny OUT.jsonl a.wav b.wav ...

(needs the model from the Hub and ``soundfile``; the tests run :func:`nbest_record` on a
tiny random model instead). Then ``nbest-rescore score --nbest OUT.jsonl --lm M.pt ...``.
"""
import json
import sys


def nbest_record(model, inputs, utt_id, decode, n=10, document=None, max_new_tokens=128):
    """One JSON Lines record: the ``n`` beams of ``model.generate(**inputs)`` (one
    input: batch size 1), best first.

    Args:
        inputs: what ``generate`` takes (``input_features`` of a processor, or a
            decoder-only model's ``input_ids`` prompt).
        decode: token ids (1-D tensor) -> list of words (no special tokens, no spaces).
        document: the document id (utterances of a document in spoken order), or None.
    Returns:
        ``{"utt_id", ["document",] "hypotheses": [{"words", "scores": {"total_cost"}}]}``.
    """
    out = model.generate(**inputs, num_beams=n, num_return_sequences=n, max_new_tokens=max_new_tokens,
                         do_sample=False, output_scores=True, return_dict_in_generate=True)
    # [n, T] natural-log p of each generated token (0 after a beam's end)
    logp = model.compute_transition_scores(out.sequences, out.scores, out.beam_indices, normalize_logits=False)
    tokens = out.sequences[:, -logp.shape[1]:]  # the generated tokens (a decoder-only model's prompt dropped)
    hyps = [{"words": decode(ids), "scores": {"total_cost": -float(lp.double().sum())}}
            for ids, lp in zip(tokens, logp)]
    return {"utt_id": utt_id, **({"document": document} if document is not None else {}), "hypotheses": hyps}


def main(name, out_path, *wavs):  # pragma: no cover - needs the Hub
    import os

    import soundfile
    from transformers import AutoProcessor, WhisperForConditionalGeneration

    processor = AutoProcessor.from_pretrained(name)
    model = WhisperForConditionalGeneration.from_pretrained(name).eval()

    def decode(ids):
        return processor.decode(ids, skip_special_tokens=True).lower().split()

    with open(out_path, "w", encoding="utf-8") as f:
        for wav in wavs:
            audio, rate = soundfile.read(wav)
            inputs = processor(audio, sampling_rate=rate, return_tensors="pt")
            utt = os.path.splitext(os.path.basename(wav))[0]
            f.write(json.dumps(nbest_record(model, inputs, utt, decode), ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
