"""Every table of the five papers, and the experiments that reproduce it
(``ctrlrnn reproduce --list``).

A table is reproduced by one or more experiments (a table of several data sets by one an
experiment), each at our scale where its data, or a stand-in for it, can be had here, and at
the paper's scale. A table no experiment reproduces says why (:attr:`PaperTable.missing`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ctrlrnn.reproduce.experiment_spec import PAPER, Experiment


@dataclass(frozen=True)
class PaperTable:
    page: str  # the results page: qrnn, rcrn, cas-lstm, metagross, carnn
    table: str  # as the paper numbers it: "table 2", "appendix"
    what: str
    experiments: tuple[str, ...] = ()
    missing: str = ""  # why no experiment reproduces it (or a part of it)


#: the data sets of the RCRN paper's table 1 (Liu et al. 2017's 16: 14 Amazon review sets, IMDB
#: and MR) other than MR (``rcrn-mr``'s paper scale): our short name -> the name of its files,
#: and the paper's BiLSTM, 3L-BiLSTM and RCRN accuracies
MTL: dict[str, tuple[str, tuple[float, float, float]]] = {
    "camera": ("camera_photo", (87.3, 89.7, 90.5)), "video": ("video", (87.5, 87.8, 88.5)),
    "health": ("health_personal_care", (85.5, 89.0, 90.5)),
    "music": ("music", (83.5, 85.7, 86.0)), "kitchen": ("kitchen_housewares", (81.7, 84.5, 86.0)),
    "dvd": ("dvd", (84.0, 86.0, 86.8)), "toys": ("toys_games", (87.5, 90.5, 90.8)),
    "baby": ("baby", (85.0, 88.5, 89.0)), "books": ("books", (86.0, 87.2, 88.0)),
    "imdb": ("imdb", (86.5, 88.0, 89.8)), "apparel": ("apparel", (88.0, 89.2, 90.5)),
    "magazines": ("magazines", (93.7, 92.5, 94.8)),
    "electronics": ("electronics", (83.5, 87.0, 89.0)),
    "sports": ("sports_outdoors", (85.5, 86.5, 88.0)),
    "software": ("software", (88.5, 90.3, 90.8)),
}

TREE_SIZES = (3, 4, 5, 8, 10)

TABLES: tuple[PaperTable, ...] = (
    PaperTable("qrnn", "table 1", "IMDB sentiment: densely connected 4-layer QRNN and LSTM",
               ("qrnn-imdb",)),
    PaperTable("qrnn", "table 2", "PTB word-level language model", ("qrnn-ptb-lm",)),
    PaperTable("qrnn", "table 3", "IWSLT De-En character-level translation",
               ("translation-char-qrnn",)),
    PaperTable("qrnn", "appendix", "copy and addition of decimal numbers",
               ("qrnn-copy", "qrnn-addition")),
    PaperTable("rcrn", "table 1", "16 Amazon review sets, IMDB and MR",
               ("rcrn-mr", *(f"rcrn-mtl-{d}" for d in MTL))),
    PaperTable("rcrn", "table 2", "SST-5", ("rcrn-sst5",)),
    PaperTable("rcrn", "table 3", "SST-2", ("rcrn-sst2",)),
    PaperTable("rcrn", "table 4", "IMDb", ("rcrn-imdb",)),
    PaperTable("rcrn", "table 5", "TREC question classification", ("rcrn-trec",)),
    PaperTable("rcrn", "table 6", "SNLI, encoder-only entailment model", ("rcrn-entailment",)),
    PaperTable("rcrn", "table 7", "SciTail", ("rcrn-scitail",)),
    PaperTable("rcrn", "table 8", "WikiQA and TrecQA answer selection, with and without "
               "attentive pooling", ("rcrn-wikiqa", "rcrn-trecqa")),
    PaperTable("rcrn", "table 9", "NarrativeQA reading comprehension with R-NET",
               missing="R-NET (Wang et al. 2017) is not built here. It needs a gated "
               "self-matching attention network, pointer networks over the summaries and "
               "NarrativeQA's BLEU, METEOR and ROUGE-L scoring, none of which any other table "
               "uses; the data (NarrativeQA summaries) cannot be had here either."),
    PaperTable("rcrn", "table 10", "training and inference time against sequence length",
               missing="a speed table: the speed section of this page measures it "
               "(`ctrlrnn reproduce --rerun speed`), not a training experiment"),
    PaperTable("cas-lstm", "table 1", "SNLI", ("cas-logic",)),
    PaperTable("cas-lstm", "table 2", "MultiNLI, matched and mismatched", ("cas-multinli",)),
    PaperTable("cas-lstm", "table 3", "Quora Question Pairs", ("cas-quora",)),
    PaperTable("cas-lstm", "table 4", "SST-5 and SST-2", ("cas-sst5", "cas-sst2")),
    PaperTable("cas-lstm", "table 5", "IWSLT 2014 De-En translation", ("translation-cas",)),
    PaperTable("cas-lstm", "table 6", "model variants on SNLI: lambda, no lambda, peepholes",
               ("cas-ablations",)),
    PaperTable("metagross", "table 1", "tree traversal and sorting",
               (*(("metagross-tree3", "metagross-tree") +
                  tuple(f"metagross-tree{n}" for n in TREE_SIZES[2:])),
                "metagross-sort5", "metagross-sort")),
    PaperTable("metagross", "table 2", "logical inference", ("metagross-logic",)),
    PaperTable("metagross", "table 3", "pixel-wise MNIST and CIFAR-10",
               ("metagross-mnist", "metagross-fashion")),
    PaperTable("metagross", "table 4", "semantic parsing and code generation with TranX",
               missing="TranX (Yin and Neubig 2018) is not built here: a grammar-guided "
               "decoder of abstract syntax trees with its own transition system per language, "
               "and GEO, ATIS, JOBS and DJANGO cannot be had here."),
    PaperTable("metagross", "table 5", "IWSLT 2014 De-En translation, Transformer",
               ("translation-transformer-metagross",)),
    PaperTable("metagross", "table 6", "IWSLT 2015 En-Vi translation, Transformer base",
               ("metagross-envi",)),
    PaperTable("metagross", "table 7", "polyphonic music: Nottingham, JSB, Piano-midi",
               ("metagross-chorales", "metagross-nottingham", "metagross-piano")),
    PaperTable("metagross", "table 8", "depth and base ablations on ATIS and DJANGO",
               missing="TranX is not built here (table 4)."),
    PaperTable("metagross", "table 9", "the best depth and base of each task",
               missing="a summary of the other tables, not an experiment: each experiment "
               "here takes its depth and base from it"),
    PaperTable("carnn", "table 1", "end-to-end dialog, bAbI task 6", ("carnn-dialog",),
               missing="the 'Babi reduced' and Frame columns: the paper's 75 response templates "
               "and its grouping of Frames' dialog acts are not published (its footnotes 2 "
               "and 3), so neither data set can be rebuilt; CARNN voting (a majority of the "
               "three variants' answers) is not built."),
    PaperTable("carnn", "table 2", "contextual language models on PDTB and Switchboard, with "
               "and without the latent variable", ("carnn-lm", "carnn-switchboard")),
    PaperTable("carnn", "table 3", "TrecQA answer selection, IWAN with CARNN encoders",
               ("carnn-trecqa",)),
    PaperTable("carnn", "table 4", "examples of ranked answers",
               missing="a qualitative table, not an experiment"),
)


def scale_cell(exp: Experiment | None, scale: str) -> str:
    """Whether ``exp`` trains at ``scale`` (ours, or the paper's) and on what."""
    if exp is None:
        return "–"
    if scale == PAPER:
        if exp.paper_scale is None:
            return "–"
        needs = ", ".join(n.name for n in exp.paper_scale.needs)
        return f"yes, needs `--data {needs}`" if needs else "yes, data here"
    if "ours" not in exp.scales:
        return "–"
    return f"yes, stand-in: {exp.stand_in}" if exp.stand_in else "yes"
