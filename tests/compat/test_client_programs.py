"""Programs shaped like the two public clients ctrlrnn was tried in, written here from their
descriptions, run for a few steps with a ctrlrnn layer swapped in:

* PyTorch's word-language-model example (its ``model.py`` RNNModel and ``main.py`` loop):
  embedding, dropout, a time-major ``nn.LSTM(ninp, nhid, nlayers, dropout=dropout)`` replaced by
  a ctrlrnn layer, dropout, a decoder over ``output.view(T * B, nhid)``, ``init_hidden``,
  truncated BPTT with the hidden state carried and detached between batches, gradient clipping,
  plain SGD, and ``torch.save(model)`` / ``torch.load`` of the whole model;
* AWD-LSTM's QRNN language model (its ``model.py`` with ``rnn_type == 'QRNN'``), whose only
  change is the import of ``QRNNLayer`` from ``ctrlrnn.compat.torchqrnn``: per-layer
  ``QRNNLayer(save_prev_x=True, window=2 if l == 0 else 1)``, weight drop wrapping each layer's
  ``.linear``, locked and embedding dropout, ``reset()`` at each epoch, ``(1, B, H)`` states
  per layer, activation regularisation, SGD with gradient clipping.
"""

from __future__ import annotations

import io
import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import ctrlrnn
from ctrlrnn.compat import torchqrnn

NTOKEN = 12


def markov_corpus(length: int, seed: int = 0) -> Tensor:
    """Token ids from a chain that mostly steps to the next id: learnable in a few steps."""
    g = torch.Generator().manual_seed(seed)
    ids = [0]
    for _ in range(length - 1):
        jump = torch.rand((), generator=g) < 0.15
        nxt = int(torch.randint(0, NTOKEN, (), generator=g)) if jump else (ids[-1] + 1) % NTOKEN
        ids.append(nxt)
    return torch.tensor(ids)


def batchify(data: Tensor, bsz: int) -> Tensor:
    nbatch = data.size(0) // bsz
    return data[: nbatch * bsz].view(bsz, -1).t().contiguous()


def get_batch(source: Tensor, i: int, bptt: int) -> tuple[Tensor, Tensor]:
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].reshape(-1)


def repackage_hidden(h):
    """Detach hidden states from their history (truncated BPTT)."""
    if isinstance(h, Tensor):
        return h.detach()
    return type(h)(repackage_hidden(v) for v in h)


# ------------------------------------------------------------------ the word-language-model example

RNN_TYPES = ["LSTM", "QRNN", "CASLSTM", "RCRN", "METAGROSS", "METAGROSS_STATE", "TORCHQRNN"]


class RNNModel(nn.Module):
    """Encoder, recurrent module, decoder: the example's model with ctrlrnn layers added."""

    def __init__(self, rnn_type: str, ntoken: int, ninp: int, nhid: int, nlayers: int,
                 dropout: float = 0.5) -> None:
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type == "LSTM":
            self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        elif rnn_type == "QRNN":
            self.rnn = ctrlrnn.QRNN(ninp, nhid, nlayers, dropout=dropout)
        elif rnn_type == "CASLSTM":
            self.rnn = ctrlrnn.CASLSTM(ninp, nhid, nlayers, dropout=dropout)
        elif rnn_type == "RCRN":
            self.rnn = ctrlrnn.RCRN(ninp, nhid, nlayers, dropout=dropout)
        elif rnn_type == "METAGROSS":
            self.rnn = ctrlrnn.Metagross(ninp, nhid, nlayers, dropout=dropout)
        elif rnn_type == "METAGROSS_STATE":
            self.rnn = ctrlrnn.Metagross(ninp, nhid, nlayers, dropout=dropout, gates="state")
        else:
            self.rnn = torchqrnn.QRNN(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)
        self.rnn_type, self.nhid, self.nlayers = rnn_type, nhid, nlayers

    def forward(self, input: Tensor, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output.view(output.size(0) * output.size(1), output.size(2)))
        return decoded.view(output.size(0), output.size(1), decoded.size(1)), hidden

    def init_hidden(self, bsz: int):
        weight = next(self.parameters())
        if self.rnn_type in ("LSTM", "CASLSTM"):
            return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                    weight.new_zeros(self.nlayers, bsz, self.nhid))
        if self.rnn_type == "RCRN":  # the three LSTMs' (h, c), then the listener's c4
            return tuple(weight.new_zeros(self.nlayers, bsz, self.nhid) for _ in range(7))
        width = self.nhid * (3 if self.rnn_type == "METAGROSS" else 1)  # depth 2: 3 units
        return weight.new_zeros(self.nlayers, bsz, width)


def evaluate(model: RNNModel, data: Tensor, bsz: int, bptt: int) -> float:
    model.eval()
    total, hidden = 0.0, model.init_hidden(bsz)
    with torch.no_grad():
        for i in range(0, data.size(0) - 1, bptt):
            inputs, targets = get_batch(data, i, bptt)
            output, hidden = model(inputs, hidden)
            total += len(inputs) * F.cross_entropy(output.view(-1, NTOKEN), targets).item()
            hidden = repackage_hidden(hidden)
    return total / (len(data) - 1)


@pytest.mark.parametrize("rnn_type", RNN_TYPES)
def test_word_language_model(rnn_type, tmp_path):
    torch.manual_seed(0)
    train_data = batchify(markov_corpus(4000), 8)  # (500, 8), time-major
    val_data = batchify(markov_corpus(200, seed=1), 4)
    # the RCRN paper's model is one layer (three LSTMs already); two learn too slowly here
    nlayers = 1 if rnn_type == "RCRN" else 2
    model = RNNModel(rnn_type, NTOKEN, 16, 16, nlayers, dropout=0.1)
    lr, clip, bptt = 20.0, 0.25, 20
    losses = []
    for _epoch in range(3):
        model.train()
        hidden = model.init_hidden(8)
        for i in range(0, train_data.size(0) - 1, bptt):
            data, targets = get_batch(train_data, i, bptt)
            hidden = repackage_hidden(hidden)
            model.zero_grad()
            output, hidden = model(data, hidden)
            loss = F.cross_entropy(output.view(-1, NTOKEN), targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
            losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses)
    assert sum(losses[-5:]) / 5 < 0.75 * sum(losses[:5]) / 5
    before = evaluate(model, val_data, 4, bptt)
    assert before < math.log(NTOKEN)
    path = tmp_path / "model.pt"
    with open(path, "wb") as f:
        torch.save(model, f)
    allowed = [*ctrlrnn.safe_globals(), RNNModel, nn.LSTM, nn.Embedding, nn.Dropout, nn.Linear]
    if not hasattr(torch.serialization, "safe_globals"):
        pytest.skip("torch.serialization.safe_globals (the context manager) needs torch >= 2.5")
    with open(path, "rb") as f, torch.serialization.safe_globals(allowed):
        loaded = torch.load(f, weights_only=True)
        loaded.rnn.flatten_parameters()
    assert evaluate(loaded, val_data, 4, bptt) == before


# ------------------------------------------------------------------ AWD-LSTM's QRNN model


def embedded_dropout(embed: nn.Embedding, words: Tensor, dropout: float) -> Tensor:
    """Drop whole words: rows of the embedding matrix, the rest scaled by 1 / (1 - p)."""
    weight = embed.weight
    if dropout:
        mask = weight.new_empty(weight.size(0), 1).bernoulli_(1 - dropout) / (1 - dropout)
        weight = weight * mask
    return F.embedding(words, weight)


class LockedDropout(nn.Module):
    """One dropout mask per sequence, the same at every time step."""

    def forward(self, x: Tensor, dropout: float = 0.5) -> Tensor:
        if not self.training or not dropout:
            return x
        mask = x.new_empty(1, x.size(1), x.size(2)).bernoulli_(1 - dropout) / (1 - dropout)
        return mask * x


class WeightDrop(nn.Module):
    """DropConnect on a wrapped module's named weights: each leaves the module's parameters and
    comes back as ``<name>_raw``; before every call the module gets ``dropout(<name>_raw)`` as a
    plain attribute."""

    def __init__(self, module: nn.Module, weights: list[str], dropout: float = 0.0) -> None:
        super().__init__()
        self.module, self.weights, self.dropout = module, weights, dropout
        for name_w in self.weights:
            w = getattr(self.module, name_w)
            del self.module._parameters[name_w]
            self.module.register_parameter(name_w + "_raw", nn.Parameter(w.data))

    def _setweights(self) -> None:
        for name_w in self.weights:
            raw_w = getattr(self.module, name_w + "_raw")
            w = F.dropout(raw_w, p=self.dropout, training=self.training)
            setattr(self.module, name_w, w)

    def forward(self, *args: Tensor) -> Tensor:
        self._setweights()
        return self.module.forward(*args)


class AWDModel(nn.Module):
    """AWD-LSTM's RNNModel, QRNN branch."""

    def __init__(self, ntoken: int, ninp: int, nhid: int, nlayers: int, dropout: float = 0.4,
                 dropouth: float = 0.3, dropouti: float = 0.4, dropoute: float = 0.1,
                 wdrop: float = 0.1, tie_weights: bool = True) -> None:
        super().__init__()
        self.lockdrop = LockedDropout()
        self.encoder = nn.Embedding(ntoken, ninp)
        from ctrlrnn.compat.torchqrnn import QRNNLayer  # was: from torchqrnn import QRNNLayer

        self.rnns = [QRNNLayer(input_size=ninp if l == 0 else nhid,
                               hidden_size=nhid if l != nlayers - 1 else (
                                   ninp if tie_weights else nhid),
                               save_prev_x=True, zoneout=0, window=2 if l == 0 else 1,
                               output_gate=True) for l in range(nlayers)]
        for rnn in self.rnns:
            rnn.linear = WeightDrop(rnn.linear, ["weight"], dropout=wdrop)
        self.rnns = nn.ModuleList(self.rnns)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            self.decoder.weight = self.encoder.weight
        initrange = 0.1
        self.encoder.weight.data.uniform_(-initrange, initrange)
        self.decoder.bias.data.fill_(0)
        self.ninp, self.nhid, self.nlayers, self.tie_weights = ninp, nhid, nlayers, tie_weights
        self.dropout, self.dropouti, self.dropouth, self.dropoute = (
            dropout, dropouti, dropouth, dropoute)

    def reset(self) -> None:
        for r in self.rnns:
            r.reset()

    def forward(self, input: Tensor, hidden: list[Tensor], return_h: bool = False):
        emb = embedded_dropout(self.encoder, input, self.dropoute if self.training else 0)
        emb = self.lockdrop(emb, self.dropouti)
        raw_output = emb
        new_hidden, raw_outputs, outputs = [], [], []
        for l, rnn in enumerate(self.rnns):
            raw_output, new_h = rnn(raw_output, hidden[l])
            new_hidden.append(new_h)
            raw_outputs.append(raw_output)
            if l != self.nlayers - 1:
                raw_output = self.lockdrop(raw_output, self.dropouth)
                outputs.append(raw_output)
        output = self.lockdrop(raw_output, self.dropout)
        outputs.append(output)
        result = output.view(output.size(0) * output.size(1), output.size(2))
        if return_h:
            return result, new_hidden, raw_outputs, outputs
        return result, new_hidden

    def init_hidden(self, bsz: int) -> list[Tensor]:
        weight = next(self.parameters()).data
        return [weight.new(1, bsz, self.nhid if l != self.nlayers - 1 else (
            self.ninp if self.tie_weights else self.nhid)).zero_() for l in range(self.nlayers)]


def awd_evaluate(model: AWDModel, data: Tensor, bsz: int, bptt: int) -> float:
    model.eval()
    model.reset()
    total, hidden = 0.0, model.init_hidden(bsz)
    with torch.no_grad():
        for i in range(0, data.size(0) - 1, bptt):
            inputs, targets = get_batch(data, i, bptt)
            output, hidden = model(inputs, hidden)
            total += len(inputs) * F.cross_entropy(model.decoder(output), targets).item()
            hidden = repackage_hidden(hidden)
    return total / (len(data) - 1)


def test_awd_lstm_qrnn():
    torch.manual_seed(0)
    train_data = batchify(markov_corpus(4000), 8)
    val_data = batchify(markov_corpus(300, seed=1), 3)  # another batch size: reset() needed
    model = AWDModel(NTOKEN, 16, 24, 2)
    assert all(isinstance(r.linear, WeightDrop) for r in model.rnns)
    assert [r.window for r in model.rnns] == [2, 1]
    params = list(model.parameters())
    optimizer = torch.optim.SGD(params, lr=20.0, weight_decay=1.2e-6)
    alpha, beta, clip, bptt = 2.0, 1.0, 0.25, 20
    losses = []
    for _epoch in range(3):
        model.train()
        model.reset()
        hidden = model.init_hidden(8)
        i = 0
        while i < train_data.size(0) - 2:
            seq_len = bptt if torch.rand(()) < 0.95 else bptt // 2
            data, targets = get_batch(train_data, i, seq_len)
            hidden = repackage_hidden(hidden)
            optimizer.zero_grad()
            output, hidden, rnn_hs, dropped_rnn_hs = model(data, hidden, return_h=True)
            assert [h.shape for h in hidden] == [(1, 8, 24), (1, 8, 16)]
            raw_loss = F.cross_entropy(model.decoder(output), targets)
            loss = raw_loss + alpha * dropped_rnn_hs[-1].pow(2).mean()  # AR
            loss = loss + beta * (rnn_hs[-1][1:] - rnn_hs[-1][:-1]).pow(2).mean()  # TAR
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, clip)
            optimizer.step()
            losses.append(raw_loss.item())
            i += len(data)
        assert model.rnns[0].prevX is not None and model.rnns[0].prevX.shape == (1, 8, 16)
    assert all(math.isfinite(v) for v in losses)
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5
    for r in model.rnns:  # the weight drop's raw weights were trained
        assert r.linear.module.weight_raw.grad is not None
    assert awd_evaluate(model, val_data, 3, bptt) < math.log(NTOKEN)
    buf = io.BytesIO()
    torch.save(model, buf)  # AWD-LSTM saves the whole model between epochs
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert awd_evaluate(loaded, val_data, 3, bptt) == awd_evaluate(model, val_data, 3, bptt)
