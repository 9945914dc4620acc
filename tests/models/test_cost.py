"""recurrent_macs against the gates' products counted by hand."""
from nbest_rescore.models import build_model
from nbest_rescore.models.cost import recurrent_macs


def test_recurrent_macs_equal_the_hand_counts():
    e, h = 12, 10
    assert recurrent_macs(build_model("gru", {"embedding_dim": e, "hidden_size": h}, 50)) == 3 * h * (e + h)
    assert recurrent_macs(build_model("lstm", {"embedding_dim": e, "hidden_size": h}, 50)) == 4 * h * (e + h)
    two = build_model("lstm", {"embedding_dim": e, "hidden_size": h, "num_layers": 2}, 50)
    assert recurrent_macs(two) == 4 * h * (e + h) + 4 * h * (h + h)
    k, p = 3, 4  # K memcells + controller, each a GRU reading the shared P-unit projection
    amn = build_model("amn", {"embedding_dim": e, "hidden_size": h, "num_memcells": k, "input_projection": p}, 50)
    assert recurrent_macs(amn) == (k + 1) * 3 * h * (p + h) + e * p
    plain = build_model("amn", {"embedding_dim": e, "hidden_size": h, "num_memcells": k}, 50)
    assert recurrent_macs(plain) == (k + 1) * 3 * h * (e + h)
