"""CARNN tasks: the contextual LM (CARNN paper 4.2) and the dialog model (4.1), at tiny sizes,
with in-memory data or tiny files written by the tests (no real data)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from task_helpers import check_device_routing

from ctrlrnn.data.loaders.babi_dialog import Dialog
from ctrlrnn.data.synthetic.restaurant_dialogs import (
    ASK,
    CUISINES,
    LOCATIONS,
    PARTY_SIZES,
    PRICES,
    dialog_splits,
    make_dialog,
)
from ctrlrnn.models.carnn_models import CARNNDialog, ContextualLM, SentenceLM
from ctrlrnn.tasks import task_class
from ctrlrnn.tasks.carnn_tasks import dialog_examples
from ctrlrnn.train.config import TrainConfig, check_options
from ctrlrnn.train.trainer import Trainer


def _story(seed: int, n: int) -> list[list[str]]:
    """Sentences whose first word repeats the previous sentence's last word: the context helps."""
    rng = random.Random(seed)
    words = ["red", "blue", "green", "cat", "dog", "runs", "sleeps", "here", "there"]
    out, last = [], "here"
    for _ in range(n):
        s = [last, *(rng.choice(words) for _ in range(rng.randint(2, 4)))]
        out.append(s)
        last = s[-1]
    return out


SENTENCES = {"train": _story(0, 48), "valid": _story(1, 8), "test": _story(2, 8)}


def _make(name: str, data_kw: str, data: Any, **options: Any):
    cls = task_class(name)
    task = cls(check_options("task", name, options, cls.options), seed=0, **{data_kw: data})
    task.setup()
    return task


def _train(task, encoder: str, model_args: dict[str, Any], out: Path, steps: int = 10,
           lr: float = 1e-2) -> tuple[dict[str, Any], list[float]]:
    torch.manual_seed(0)
    cfg = TrainConfig(task=task.name, model=encoder, out=str(out), epochs=20, max_steps=steps,
                      batch_size=8, lr=lr, log_every=1, checkpoint_every=100,
                      model_args=model_args, task_args=task.opts)
    model = task.build_model(encoder, model_args)
    routed = check_device_routing(task, model)
    result = Trainer(cfg, task, model, out, show_progress=False).fit()
    assert routed["forwards"] > 0
    rows = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    return result, [r["loss"] for r in rows if r.get("split") == "train"]


def _check_run(result: dict[str, Any], losses: list[float], out: Path) -> None:
    assert len(losses) == result["step"] > 0
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3, losses  # the loss falls
    for split in ("valid", "test"):
        assert all(math.isfinite(v) for v in result[split].values()), result[split]
    for name in ("checkpoint.safetensors", "best.safetensors", "log.jsonl"):
        assert (out / name).is_file(), name


# ---------------------------------------------------------------------------- contextual LM
@pytest.mark.parametrize(
    ("encoder", "args"),
    [("carnn", {"variant": "n"}), ("carnn", {"variant": "i"}), ("carnn", {"variant": "s"}),
     ("lstm", {})],
)
def test_carnn_lm_trains_end_to_end(tmp_path, encoder, args):
    task = _make("carnn-lm", "sentences", SENTENCES)
    result, losses = _train(task, encoder, {"hidden_size": 16, **args}, tmp_path)
    _check_run(result, losses, tmp_path)
    assert result["test"]["perplexity"] == pytest.approx(math.exp(result["test"]["loss"]))
    assert result["test"]["perplexity"] < len(task.vocab)  # better than uniform


def test_carnn_lm_pairs_each_sentence_with_the_previous_one():
    task = _make("carnn-lm", "sentences", SENTENCES, train_size=5)
    assert len(task.pairs["train"]) == 5
    prev, cur = task.pairs["train"][3]
    assert prev == SENTENCES["train"][2] and cur == SENTENCES["train"][3]
    assert task.encoded["train"][0][0] == [task.vocab.eos_id]  # the first has no context
    # the CARNN LM reads the previous sentence; the baseline does not
    carnn = task.build_model("carnn", {"hidden_size": 8, "variant": "i"})
    base = task.build_model("lstm", {"hidden_size": 8})
    assert isinstance(carnn, ContextualLM) and isinstance(base, SentenceLM)
    batch = task._batch(task.encoded["valid"][:4])
    other = dict(batch, prev=batch["prev"].roll(1, dims=0),
                 prev_lengths=batch["prev_lengths"].roll(1, dims=0))
    for model, depends in ((carnn, True), (base, False)):
        a, b = (model(x["tokens"], x["prev"], x["lengths"], x["prev_lengths"])
                for x in (batch, other))
        assert (not torch.allclose(a, b)) == depends


@pytest.mark.parametrize("encoder,args", [("carnn", {"variant": "n"}), ("carnn", {"variant": "s"}),
                                          ("lstm", {})])
def test_carnn_lm_loss_runs_the_softmax_at_target_words_only(encoder, args):
    """The task's loss computes the logits at the valid positions only: the same sum of word
    log-losses and the same gradients as over the whole padded batch (pad targets ignored),
    with the same dropout draws."""
    import torch.nn.functional as F

    task = _make("carnn-lm", "sentences", SENTENCES)
    torch.manual_seed(0)
    model = task.build_model(encoder, {"hidden_size": 8, "dropout": 0.3, **args})
    model.train()
    batch = task._batch(task.encoded["train"][:6])
    assert int(batch["lengths"].min()) < batch["tokens"].shape[1]  # there is padding
    torch.manual_seed(5)
    got = task._nll(model, batch)
    got_grads = torch.autograd.grad(got, list(model.parameters()), allow_unused=True)
    torch.manual_seed(5)
    logits = model(batch["tokens"], batch["prev"], batch["lengths"], batch["prev_lengths"])
    assert logits.shape[:2] == batch["tokens"].shape
    want = F.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten(),
                           ignore_index=task.vocab.pad_id, reduction="sum")
    want_grads = torch.autograd.grad(want, list(model.parameters()), allow_unused=True)
    torch.testing.assert_close(got, want)
    for a, b in zip(got_grads, want_grads, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b)


def test_contextual_carnn_lm_loss_skips_the_padding():
    """ContextualCARNNLM.loss (eq 13) with lengths: the mean log-loss over the valid words, as
    over the whole padded batch with the padded targets ignored."""
    import torch.nn.functional as F

    from ctrlrnn import ContextualCARNNLM

    torch.manual_seed(1)
    lm = ContextualCARNNLM(vocab_size=20, embedding_dim=8, hidden_size=8, variant="i",
                           num_latent_labels=3)
    tokens, targets = torch.randint(0, 20, (3, 6)), torch.randint(0, 20, (3, 6))
    prev, lengths = torch.randint(0, 20, (3, 4)), torch.tensor([6, 2, 4])
    labels = torch.tensor([0, 2, 1])
    got = lm.loss(tokens, targets, prev, lengths=lengths, latent_labels=labels)
    logits, latent = lm(tokens, prev, lengths)
    valid = torch.arange(6) < lengths[:, None]
    loss_w = F.cross_entropy(logits.flatten(0, 1), targets.masked_fill(~valid, -100).flatten(),
                             ignore_index=-100)
    torch.testing.assert_close(got, 0.5 * loss_w + 0.5 * F.cross_entropy(latent, labels))
    picked, _ = lm(tokens, prev, lengths, positions=valid)
    torch.testing.assert_close(picked, logits[valid])


def test_carnn_lm_whole_vocab_keeps_the_vocabulary_of_every_training_sentence():
    sentences = {**SENTENCES, "train": [*SENTENCES["train"][:4], ["zebra", "quietly", "here"]]}
    sliced = _make("carnn-lm", "sentences", sentences, train_size=4)
    whole = _make("carnn-lm", "sentences", sentences, train_size=4, whole_vocab=True)
    assert len(sliced.pairs["train"]) == len(whole.pairs["train"]) == 4
    assert "zebra" not in sliced.vocab.stoi and "zebra" in whole.vocab.stoi
    in_slice = {w for s in sentences["train"][:4] for w in s}
    assert {w for w in sliced.vocab.stoi if w in in_slice} == in_slice
    assert set(whole.vocab.stoi) == set(sliced.vocab.stoi) | {"zebra", "quietly"}
    # the unseen word is its own token under the whole vocabulary, the unknown one otherwise
    assert whole.vocab.encode(["zebra"]) != [whole.vocab.unk_id]
    assert sliced.vocab.encode(["zebra"]) == [sliced.vocab.unk_id]


def test_carnn_lm_reads_a_source_directory(tmp_path):
    for split, sentences in SENTENCES.items():
        (tmp_path / f"{split}.txt").write_text("".join(" ".join(s) + "\n" for s in sentences))
    cls = task_class("carnn-lm")
    task = cls(check_options("task", "carnn-lm", {"source": str(tmp_path)}, cls.options), 0)
    task.setup()
    assert [c for _, c in task.pairs["valid"]] == SENTENCES["valid"]
    (tmp_path / "valid.txt").unlink()
    with pytest.raises(ValueError, match="valid.txt"):
        cls(task.opts, 0).setup()


# ---------------------------------------------------------------------------- dialog
def _user_values(dialog: Dialog, upto: int) -> dict[str, str]:
    """The slot values the user has given before turn ``upto`` (an independent reading)."""
    found: dict[str, str] = {}
    for user, _ in dialog.turns[:upto]:
        for slot, values in (("cuisine", CUISINES), ("location", LOCATIONS),
                             ("party", PARTY_SIZES), ("price", PRICES)):
            for word in user.split():
                if word in values:
                    found[slot] = word
    return found


def test_synthetic_dialogs_follow_the_babi_structure():
    rng = random.Random(0)
    for _ in range(50):
        dialog = make_dialog(rng, update_prob=0.5)
        assert dialog.turns[0][1] == "hello what can i help you with today"
        calls = [i for i, (_, bot) in enumerate(dialog.turns) if bot.startswith("api_call")]
        assert 1 <= len(calls) <= 2
        for i in calls:  # every API call books exactly what the user asked for so far
            v = _user_values(dialog, i + 1)
            assert dialog.turns[i][1].split()[1:] == [v["cuisine"], v["location"], v["party"],
                                                      v["price"]]
        asked = [bot for _, bot in dialog.turns if bot in ASK.values()]
        assert len(asked) == len(set(asked))  # never asks for a slot twice
    splits = dialog_splits({"train": 30, "valid": 5, "test": 5}, seed=1)
    keys = {s: {tuple(d.turns) for d in v} for s, v in splits.items()}
    assert not (keys["train"] & keys["valid"]) and not (keys["train"] & keys["test"])


def _kb_reading(knowledge: list[str]) -> dict[str, dict[str, str]]:
    """The knowledge-base lines read back: restaurant -> attribute -> value."""
    table: dict[str, dict[str, str]] = {}
    for line in knowledge:
        name, attribute, value = line.split()
        table.setdefault(name, {})[attribute] = value
    return table


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_full_dialogs_propose_by_rating_and_answer_from_the_knowledge_base(seed):
    rng = random.Random(seed)
    accepted_positions = set()
    first_by_call: dict[str, set[str]] = {}
    for _ in range(300):
        dialog = make_dialog(rng, update_prob=0.5, kind="full")
        calls = [i for i, (_, bot) in enumerate(dialog.turns) if bot.startswith("api_call")]
        # the results follow the last call
        assert dialog.knowledge_turns == [calls[-1] + 1] * len(dialog.knowledge)
        goal = dict(zip(("cuisine", "location", "party", "price"),
                        dialog.turns[calls[-1]][1].split()[1:], strict=True))
        table = _kb_reading(dialog.knowledge)
        assert table and all(set(v) == {"R_phone", "R_address", "R_rating"}
                             for v in table.values())
        for name in table:  # every result matches the last call's cuisine, location, price
            assert name.split("_")[1:4] == [goal["location"], goal["price"], goal["cuisine"]]
        ranked = sorted(table, key=lambda n: -int(table[n]["R_rating"]))
        proposed = [bot.split(": ")[1] for _, bot in dialog.turns if bot.startswith("what do")]
        assert proposed == ranked[: len(proposed)]  # highest rated first, none skipped
        accepted_positions.add(len(proposed) - 1)
        call = " ".join(dialog.turns[calls[-1]][1].split()[1:])
        first_by_call.setdefault(call, set()).add(proposed[0])
        chosen = proposed[-1]
        assert dialog.turns[-1] == ("thank you", "you're welcome")
        for _, bot in dialog.turns:
            if bot.startswith("here it is"):
                value = bot.split()[-1]
                assert value in (table[chosen]["R_phone"], table[chosen]["R_address"])
    assert len(accepted_positions) > 1  # users accept the first option and later ones
    # the free restaurants vary, so the same call can lead to different first proposals
    assert any(len(firsts) > 1 for firsts in first_by_call.values())


def test_full_dialogs_knowledge_base_is_fixed_and_examples_see_it():
    one = dialog_splits({"train": 40, "valid": 5, "test": 5}, seed=3, kind="full")
    two = dialog_splits({"train": 40, "valid": 5, "test": 5}, seed=4, kind="full")
    facts: dict[str, str] = {}
    for dialog in [*one["train"], *two["train"]]:
        for line in dialog.knowledge:  # one restaurant's details never change between seeds
            name, attribute, value = line.split()
            assert facts.setdefault(f"{name} {attribute}", value) == value
    examples = dialog_examples(one["train"][:1])
    dialog = one["train"][0]
    first = dialog.knowledge_turns[0]
    kb = [line.split() for line in dialog.knowledge]
    assert all(kb[0] not in e.history for e in examples[:first])
    assert all(e.history[-len(kb):] == kb for e in examples[first: first + 1])
    keys = {s: {(tuple(d.turns), tuple(d.knowledge)) for d in v} for s, v in one.items()}
    assert not (keys["train"] & keys["test"]) and not (keys["valid"] & keys["test"])
    with pytest.raises(ValueError, match="kind"):
        make_dialog(random.Random(0), kind="task6")


def test_carnn_dialog_option_picks_the_dialog_kind():
    cls = task_class("carnn-dialog")
    opts = check_options("task", "carnn-dialog", {"dialogs": "full", "train_size": 20,
                                                   "valid_size": 4, "test_size": 4},
                         cls.options)
    task = cls(opts, 0)
    task.setup()
    assert any(r.startswith("what do you think") for r in task.responses)
    assert any(len(d.knowledge) for d in task.dialogs["train"])
    with pytest.raises(ValueError, match="task.dialogs"):
        cls(dict(opts, dialogs="task6"), 0).setup()


def test_carnn_dialog_scores_each_kind_of_memory_response(monkeypatch):
    cls = task_class("carnn-dialog")
    task = cls(check_options("task", "carnn-dialog", {"dialogs": "full", "train_size": 30,
                                                      "valid_size": 6, "test_size": 6},
                             cls.options), 0)
    task.setup()
    proposal = {i for i, r in enumerate(task.responses) if r.startswith("what do you think")}

    def right_on_proposals(model, b):  # scores the target first exactly on proposals
        scores = torch.zeros(len(b["targets"]), len(task.responses))
        for row, target in enumerate(b["targets"].tolist()):
            scores[row, target if target in proposal else (target + 1) % len(task.responses)] = 1
        return scores

    monkeypatch.setattr(task, "_scores", right_on_proposals)
    metrics = task.evaluate(torch.nn.Identity(), "test")
    rows = task.examples["test"]
    share = sum(e.response.startswith("what do you think") for e in rows) / len(rows)
    assert metrics["proposal_accuracy"] == 1.0
    assert metrics["information_accuracy"] == metrics["api_call_accuracy"] == 0.0
    assert metrics["accuracy"] == pytest.approx(share)
    assert metrics["dialog_accuracy"] == 0.0


def test_dialog_examples_history_context_and_knowledge():
    dialog = Dialog(turns=[("hi", "hello"), ("book", "api_call x y"), ("the first", "ok")],
                    knowledge=["resto_1 r_phone 123"])
    ex = dialog_examples([dialog])
    assert [e.response for e in ex] == ["hello", "api_call x y", "ok"]
    assert ex[0].history == [["<start>"]] and ex[0].context == ["hi"]
    assert ex[1].history == [["<start>"], ["hi"], ["hello"]]
    assert ex[2].history[-1] == ["resto_1", "r_phone", "123"]  # after the API call
    assert dialog_examples([dialog], max_history=1)[2].history == [["<start>"],
                                                                   ["resto_1", "r_phone", "123"]]
    first = Dialog(turns=dialog.turns, knowledge=dialog.knowledge, knowledge_turns=[0])
    assert dialog_examples([first])[0].history == [["<start>"], ["resto_1", "r_phone", "123"]]
    two = Dialog(turns=dialog.turns, knowledge=["a r_x 1", "b r_x 2"], knowledge_turns=[1, 2])
    ex = dialog_examples([two])  # each line enters where it was printed
    assert ex[1].history == [["<start>"], ["hi"], ["hello"], ["a", "r_x", "1"]]
    assert ex[2].history == [["<start>"], ["hi"], ["hello"], ["a", "r_x", "1"], ["book"],
                             ["api_call", "x", "y"], ["b", "r_x", "2"]]
    with pytest.raises(ValueError, match="knowledge_turns"):
        dialog_examples([Dialog(turns=dialog.turns, knowledge=["a r_x 1"], knowledge_turns=[])])


@pytest.mark.parametrize(("encoder", "args"), [("carnn", {"variant": "i"}),
                                               ("carnn", {"variant": "n"}), ("lstm", {})])
def test_carnn_dialog_trains_end_to_end(tmp_path, encoder, args):
    dialogs = dialog_splits({"train": 12, "valid": 3, "test": 3}, seed=0)
    task = _make("carnn-dialog", "dialogs", dialogs)
    model = task.build_model(encoder, {"hidden_size": 16, **args})
    assert isinstance(model, CARNNDialog)
    assert model.candidates.shape[0] == len(task.responses)
    result, losses = _train(task, encoder, {"hidden_size": 16, **args}, tmp_path)
    _check_run(result, losses, tmp_path)
    for split in ("valid", "test"):
        assert 0.0 <= result[split]["dialog_accuracy"] <= result[split]["accuracy"] <= 1.0


def test_carnn_dialog_reads_babi_files(tmp_path):
    text = ("1 hello\thello what can i help you with today\n"
            "2 italian in rome\tapi_call italian rome\n"
            "3 resto_a R_phone phone_a\n"
            "4 thanks\tyou're welcome\n\n")
    for tag in ("trn", "dev", "tst"):
        (tmp_path / f"dialog-babi-task1-API-calls-{tag}.txt").write_text(text)
    path = tmp_path / "dialog-babi-task1-API-calls-trn.txt"
    task = task_class("carnn-dialog")(
        check_options("task", "carnn-dialog", {"path": str(path)},
                      task_class("carnn-dialog").options), 0)
    task.setup()
    assert len(task.responses) == 3 and len(task.examples["test"]) == 3
    assert task.examples["train"][2].history[-1] == ["resto_a", "R_phone", "phone_a"]
    with pytest.raises(ValueError, match="-trn"):
        task_class("carnn-dialog")(dict(task.opts, path=str(tmp_path / "x.txt")), 0).setup()
    # the file decides the task: the generated dialogs' kind does not change what is read
    full = task_class("carnn-dialog")(dict(task.opts, dialogs="full"), 0)
    full.setup()
    assert full.responses == task.responses
