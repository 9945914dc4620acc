import pytest

from nbest_rescore.errors import DataError
from nbest_rescore.io import read_lm_text


def test_documents_and_sentences(tmp_path):
    p = tmp_path / "lm.txt"
    p.write_text("\n\na b c\nd e\n\n\n  \nf\n\ng h\n\n")
    assert read_lm_text(p) == [[("a", "b", "c"), ("d", "e")], [("f",)], [("g", "h")]]


def test_max_words_keeps_sentence_that_reaches_limit(tmp_path):
    p = tmp_path / "lm.txt"
    p.write_text("a b c\nd e\n\nf\ng h\n")
    assert read_lm_text(p, max_words=3) == [[("a", "b", "c")]]
    assert read_lm_text(p, max_words=4) == [[("a", "b", "c"), ("d", "e")]]
    assert read_lm_text(p, max_words=6) == [[("a", "b", "c"), ("d", "e")], [("f",)]]
    assert read_lm_text(p, max_words=100) == read_lm_text(p)
    with pytest.raises(ValueError):
        read_lm_text(p, max_words=0)


def test_empty_file_is_error(tmp_path):
    p = tmp_path / "lm.txt"
    p.write_text("")
    with pytest.raises(DataError, match="no sentences"):
        read_lm_text(p)
    p.write_text("\n \n")
    with pytest.raises(DataError, match="no sentences"):
        read_lm_text(p)


def test_lm_valid_counts(DATA):
    # README: lm_valid has 188 documents, 6608 sentences, 126112 words.
    path = DATA / "lm" / "lm_valid.txt"
    docs = read_lm_text(path)
    assert len(docs) == 188
    assert sum(len(d) for d in docs) == 6608
    n_words = sum(len(line.split()) for line in open(path, encoding="utf-8"))
    assert sum(len(s) for d in docs for s in d) == n_words == 126112
