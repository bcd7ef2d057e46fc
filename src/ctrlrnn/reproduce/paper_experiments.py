"""The papers' tables whose data cannot be had here: experiments at the paper's scale alone
(:attr:`~ctrlrnn.reproduce.experiment_spec.Experiment.scales`), each reading the files the user
supplies (``ctrlrnn reproduce --scale paper --data NAME=PATH``). Where a stand-in can be had
here, the table has an experiment at our scale too (:mod:`ctrlrnn.reproduce.experiments`,
named by :mod:`ctrlrnn.reproduce.paper_tables`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ctrlrnn.reproduce import paper_scales as scale
from ctrlrnn.reproduce.experiment_spec import PAPER, Arm, Claim, Experiment, PaperScale
from ctrlrnn.reproduce.paper_tables import MTL

#: the arms of the RCRN paper's tables: the same model with three encoders
_RCRN_ARMS = (Arm("BiLSTM", "lstm", {"bidirectional": True}),
              Arm("3L-BiLSTM", "lstm", {"bidirectional": True, "num_layers": 3}),
              Arm("RCRN", "rcrn", {"bidirectional": True}))
_RCRN_CLAIMS = (Claim("RCRN", "BiLSTM", "{where}"), Claim("RCRN", "3L-BiLSTM", "{where}"))


def _paper_only(exp_id: str, page: str, title: str, task: str, metric: str,
                arms: tuple[Arm, ...], claims: tuple[Claim, ...], paper_scale: PaperScale,
                paper_metric: str, *, higher: bool = True, also: tuple[str, ...] = (),
                task_args: dict[str, Any] | None = None, note: str = "") -> Experiment:
    return Experiment(
        id=exp_id, paper=page, title=title, task=task, metric=metric, higher_is_better=higher,
        arms=arms, claims=claims, quick={}, full={}, task_args=dict(task_args or {}),
        paper_metric=paper_metric, also=also, paper_comparable=True, paper_scale=paper_scale,
        scales=(PAPER,), note=note)


def _rcrn_classifier(exp_id: str, table: str, title: str, task: str,
                     numbers: tuple[float, float, float], paper_scale: PaperScale,
                     data: str) -> Experiment:
    arms = tuple(replace(a, paper=n) for a, n in zip(_RCRN_ARMS, numbers, strict=True))
    claims = tuple(replace(c, source=c.source.format(where=table)) for c in _RCRN_CLAIMS)
    return _paper_only(exp_id, "rcrn", title, task, "accuracy", arms, claims, paper_scale,
                       f"{data} test accuracy (%)")


def _mtl(name: str) -> Experiment:
    file, numbers = MTL[name]
    ps = replace(scale.rcrn_classifier("mr", "mtl"),
                 needs=(replace(scale.NEEDS["mtl"], subpath=file), scale.NEEDS["glove840b"]))
    return _rcrn_classifier(f"rcrn-mtl-{name}", "table 1", f"Liu et al.'s {file}: RCRN vs "
                            "BiLSTM vs 3-layer BiLSTM (table 1)", "mr", numbers, ps,
                            f"{file} (Liu et al. 2017)")


_NLI_ARMS = (Arm("2-layer LSTM", "lstm", {"num_layers": 2}),
             Arm("2-layer CAS-LSTM", "caslstm", {"num_layers": 2}))
_NLI_CLAIMS = (Claim("2-layer CAS-LSTM", "2-layer LSTM", "tables 1-3: CAS-LSTMs above stacked "
                     "LSTMs"),)


def _ranking(exp_id: str, fmt: str, data: str, maps: tuple[float, ...],
             mrrs: tuple[float, ...]) -> Experiment:
    """RCRN table 8 on one data set: the three encoders without attention, and with AP."""
    arms = []
    for k, (label, model, args) in enumerate(
            (("BiLSTM", "lstm", {}), ("3L-BiLSTM", "lstm", {"num_layers": 3}),
             ("RCRN", "rcrn", {}))):
        for ap, offset in (("", 0), ("AP-", 3)):
            arms.append(Arm(f"{ap}{label}", model, {"bidirectional": True, **args},
                            {"attention": "ap"} if ap else {}, paper=maps[k + offset] / 100,
                            paper_also={"mrr": mrrs[k + offset] / 100}))
    claims = tuple(Claim(f"{ap}RCRN", f"{ap}{other}", "table 8", metric)
                   for ap in ("", "AP-") for other in ("BiLSTM", "3L-BiLSTM")
                   for metric in ("", "mrr"))
    ps = replace(scale.RANKING, needs=scale.needs(fmt, "glove840b"),
                 overrides={**scale.RANKING.overrides, "task.format": fmt})
    return _paper_only(exp_id, "rcrn", f"{data} answer selection: RCRN vs BiLSTM vs 3-layer "
                       "BiLSTM, without and with attentive pooling (table 8)", "ranking", "map",
                       tuple(arms), claims, ps, f"{data} test MAP and MRR", also=("mrr",))


def _music(exp_id: str, need: str, data: str, numbers: dict[str, float]) -> Experiment:
    arms = (Arm("LSTM", "lstm", {}, paper=numbers["LSTM"]),
            Arm("GRU", "gru", {}, paper=numbers["GRU"]),
            Arm("METAGROSS (depth 3)", "metagross", {"depth": 3},
                paper=numbers["METAGROSS"]))
    claims = (Claim("METAGROSS (depth 3)", "LSTM", "table 7"),
              Claim("METAGROSS (depth 3)", "GRU", "table 7"))
    return _paper_only(exp_id, "metagross", f"{data}, NLL per time step (table 7)",
                       "chorales", "nll", arms, claims,
                       replace(scale.MUSIC, needs=scale.needs(need)),
                       f"{data} test NLL", higher=False)


PAPER_ONLY: tuple[Experiment, ...] = (
    # ------------------------------------------------------------------ QRNN
    _paper_only(
        "qrnn-imdb", "qrnn", "IMDB sentiment: densely connected 4-layer QRNN vs LSTM (table 1)",
        "imdb", "accuracy",
        (Arm("Densely-connected 4-layer LSTM", "lstm", {}, paper=90.9),
         Arm("Densely-connected 4-layer QRNN", "qrnn", {"window": 2}, paper=91.4),
         Arm("Densely-connected 4-layer QRNN, k = 4", "qrnn", {"window": [4, 2, 2, 2]},
             paper=91.1)),
        (Claim("Densely-connected 4-layer QRNN", "Densely-connected 4-layer LSTM", "table 1"),
         Claim("Densely-connected 4-layer QRNN, k = 4", "Densely-connected 4-layer LSTM",
               "table 1")),
        scale.IMDB_QRNN, "IMDB test accuracy (%)"),
    # ------------------------------------------------------------------ RCRN
    *(_mtl(name) for name in MTL),
    _rcrn_classifier("rcrn-sst2", "table 3", "SST-2: RCRN vs BiLSTM vs 3-layer BiLSTM "
                     "(table 3)", "sst2", (89.7, 90.0, 90.6),
                     scale.rcrn_classifier("sst2", "sst"), "SST-2"),
    _rcrn_classifier("rcrn-imdb", "table 4", "IMDb: RCRN vs BiLSTM vs 3-layer BiLSTM "
                     "(table 4)", "imdb", (90.9, 91.8, 92.8),
                     scale.rcrn_classifier("imdb", "imdb"), "IMDb"),
    _rcrn_classifier("rcrn-trec", "table 5", "TREC question classification: RCRN vs BiLSTM "
                     "vs 3-layer BiLSTM (table 5)", "trec", (95.8, 95.4, 96.2),
                     scale.rcrn_classifier("trec", "trec"), "TREC"),
    _rcrn_classifier("rcrn-scitail", "table 7", "SciTail entailment: RCRN vs BiLSTM vs "
                     "3-layer BiLSTM (table 7)", "nli", (80.1, 79.6, 81.1),
                     replace(scale.RCRN_SNLI, needs=scale.needs("scitail", "glove840b"),
                             arms={}, source="RCRN section 4.2, table 7",
                             overrides={**scale.RCRN_SNLI.overrides,
                                        "task.format": "scitail"}), "SciTail"),
    _ranking("rcrn-wikiqa", "wikiqa", "WikiQA", (68.5, 69.3, 71.1, 63.9, 69.8, 72.4),
             (69.8, 71.3, 72.3, 69.9, 71.3, 73.7)),
    _ranking("rcrn-trecqa", "trecqa", "TrecQA", (72.4, 73.0, 75.4, 75.1, 73.3, 77.9),
             (82.5, 83.6, 85.5, 80.0, 83.4, 88.2)),
    # ------------------------------------------------------------------ CAS-LSTM
    _paper_only(
        "cas-multinli", "cas-lstm", "MultiNLI, matched and mismatched: CAS-LSTMs (table 2)",
        "nli", "accuracy", _NLI_ARMS, _NLI_CLAIMS,
        scale.cas_nli("multinli", {"2-layer CAS-LSTM": 74.0, "2-layer Bi-CAS-LSTM": 74.6,
                                   "3-layer CAS-LSTM": 73.8, "3-layer Bi-CAS-LSTM": 74.2},
                      {"2-layer CAS-LSTM": 73.3, "2-layer Bi-CAS-LSTM": 73.7,
                       "3-layer CAS-LSTM": 73.1, "3-layer Bi-CAS-LSTM": 73.4},
                      source="CAS-LSTM section 4.1, table 2"),
        "MultiNLI matched (in-domain) test accuracy (%); mismatched beside it",
        also=("accuracy_mismatched",)),
    _paper_only(
        "cas-quora", "cas-lstm", "Quora Question Pairs: CAS-LSTM and Bi-CAS-LSTM (table 3)",
        "nli", "accuracy", _NLI_ARMS, _NLI_CLAIMS,
        replace(scale.cas_nli("quora", {"2-layer CAS-LSTM": 88.4},
                              source="CAS-LSTM section 4.2, table 3"),
                overrides={**scale.cas_nli("quora", {}).overrides, "task.features": "eq16"},
                extra=(scale.CAS_EXTRA_BI,), parameters={}, claims=(),
                arms={"2-layer CAS-LSTM": {"paper": 88.4},
                      "2-layer Bi-CAS-LSTM": {"paper": 88.6}}),
        "Quora Question Pairs test accuracy (%)"),
    _paper_only(
        "cas-sst2", "cas-lstm", "SST-2: 2-layer CAS-LSTM vs 2-layer stacked LSTM (table 4)",
        "sst2", "accuracy",
        (Arm("2-layer LSTM", "lstm", {"num_layers": 2}),
         Arm("2-layer CAS-LSTM", "caslstm", {"num_layers": 2})),
        (Claim("2-layer CAS-LSTM", "2-layer LSTM", "table 4"),),
        replace(scale.CAS_SST, task="sst2",
                arms={"2-layer LSTM": {"paper": 86.3}, "2-layer CAS-LSTM": {"paper": 91.1}},
                extra=(replace(scale.CAS_SST.extra[0], paper=91.3),)),
        "SST-2 test accuracy (%)"),
    # ------------------------------------------------------------------ METAGROSS
    _paper_only(
        "metagross-envi", "metagross",
        "IWSLT 2015 En-Vi: Transformer base vs Transformer base + METAGROSS (table 6)",
        "translate-word", "bleu",
        (Arm("Transformer B", "lstm", {}, {"arch": "transformer", "ffn": "relu"}, paper=28.43),
         Arm("Transformer B + METAGROSS", "lstm", {},
             {"arch": "transformer", "ffn": "metagross", "ffn_depth": 3}, paper=30.81)),
        (Claim("Transformer B + METAGROSS", "Transformer B", "table 6"),),
        replace(scale.TRANSFORMER_S, source="METAGROSS section 3.4, table 6",
                needs=scale.needs("iwslt15-en-vi"),
                overrides={**scale.TRANSFORMER_S.overrides, **scale.T2T_BASE,
                           "task.beam": 4, "task.pair": "en-vi", "task.valid_set": "tst2012",
                           "task.test_set": "tst2013"}),
        "IWSLT 2015 En-Vi test BLEU"),
    _music("metagross-nottingham", "nottingham", "Nottingham",
           {"LSTM": 3.25, "GRU": 3.13, "METAGROSS": 2.88}),
    _music("metagross-piano", "piano", "Piano-midi.de",
           {"LSTM": 7.99, "GRU": 8.82, "METAGROSS": 7.49}),
    # ------------------------------------------------------------------ CARNN
    _paper_only(
        "carnn-switchboard", "carnn",
        "Contextual LM on Switchboard, the previous utterance as context (table 2)",
        "carnn-lm", "perplexity",
        (Arm("LSTM LM (no context)", "lstm", {}, paper=56.0),
         Arm("nCARNN", "carnn", {"variant": "n"}, paper=30.17),
         Arm("iCARNN", "carnn", {"variant": "i"}, paper=32.49),
         Arm("sCARNN", "carnn", {"variant": "s"}, paper=31.50),
         *(Arm(f"{v}CARNN (with latent)", "carnn", {"variant": v},
               {"latent_weight": 0.5, "latent_label": "previous"}, paper=p)
           for v, p in (("n", 29.72), ("i", 32.16), ("s", 31.49)))),
        (*(Claim(f"{v}CARNN", "LSTM LM (no context)", "table 2") for v in "nis"),
         Claim("nCARNN (with latent)", "nCARNN", "table 2: 29.72 vs 30.17")),
        replace(scale.CARNN_LM, needs=scale.needs("switchboard"), extra=(), claims=(),
                source="CARNN sections 4.2 and 5.2, table 2"),
        "Switchboard test perplexity", higher=False),
    _paper_only(
        "carnn-trecqa", "carnn", "TrecQA answer selection: IWAN with cross-context CARNN "
        "encoders vs its BiLSTM (table 3)", "ranking", "map",
        (Arm("IWAN", "lstm", {"bidirectional": True}, paper=0.794, paper_also={"mrr": 0.879}),
         *(Arm(f"IWAN + {v}CARNN", "carnn", {"variant": v, "bidirectional": True}, paper=m,
               paper_also={"mrr": r})
           for v, m, r in (("n", 0.827, 0.889), ("i", 0.826, 0.907), ("s", 0.829, 0.875)))),
        tuple(Claim(f"IWAN + {v}CARNN", "IWAN", "table 3 (significant, t-test)")
              for v in "nis"),
        PaperScale(
            source="CARNN sections 4.3 and 5.3, table 3", task="ranking",
            overrides={"optimizer": "adam", "lr": 1e-3, "batch_size": 32,
                       "model.hidden_size": 300, "task.format": "trecqa",
                       "task.scorer": "iwan", "task.margin": 0.1, "task.negatives": 6,
                       "task.freeze_embeddings": True, "epochs": 20, "patience": 3,
                       "eval_every": 0, "eval_batches": 0},
            needs=scale.needs("trecqa", "glove840b"),
            unstated="Neither the CARNN paper nor IWAN's gives a recipe this machine could "
                     "read (ours: 300-d states over the user's frozen 300-d GloVe, Adam at "
                     "1e-3, 32 questions a batch with 6 sampled wrong answers each in a hinge "
                     "of margin 0.1, at most 20 epochs, patience 3). The scorer follows "
                     "IWAN's description (models/iwan.py), not its unpublished code."),
        "TrecQA (clean) test MAP and MRR", also=("mrr",)),
)
