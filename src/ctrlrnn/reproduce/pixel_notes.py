"""What the pages of the pixel-by-pixel experiments say about their recipe and the probe that
chose it (``metagross-mnist``, ``metagross-fashion``; :mod:`ctrlrnn.tasks.forget_bias`)."""

from __future__ import annotations

#: the recipe every arm of both pixel experiments trains under, and what it replaced
PIXEL_RECIPE_NOTE = (
    " Every arm trains under one pixel-level recipe. Its forget gates start 3 higher "
    "(`task.forget_bias=3`). For the LSTM that is the forget gate's bias. A METAGROSS unit "
    "keeps 1 - f of its state, so its F maps' biases start 3 lower. Gradients are clipped to "
    "norm 1 (`clip_norm=1`), and the learning rate is searched in [0.0001, 0.003]. Until "
    "2026-12-03, every arm kept torch's initial biases, and the search reached a learning "
    "rate of 0.01; one MNIST LSTM seed diverged at 0.0042.")

#: the probe of the MNIST-5k baseline's cause: measured on 2026-12-03 (see the text)
MNIST_PROBE_NOTE = (
    " Probe of the cause (2026-12-03, AMD EPYC family 25 model 17, one thread; width 128, "
    "64 training images a draw, 3 draws). On average 110 blank steps follow an image's last "
    "inked pixel. At initialisation, the LSTM's gradient of the loss at that pixel is "
    "4.6e-9, against 7.9e-5 at the last step. With forget gates 1 higher it is 8.9e-8; 2 "
    "higher, 1.4e-5; 3 higher, 6.4e-5. At the image's centre it is 0 (below float32's "
    "range), 9.2e-28, 5.5e-6 and 3.9e-4. So with torch's biases no gradient reached the "
    "digit, and the usual forget bias of 1 does not carry one across these blank rows. "
    "Training curves of the LSTM (seed 0, batch 64, dropout 0.144): with torch's biases at "
    "learning rate 0.0042, the validation loss was 2.3027 after 250 steps, at chance. With "
    "forget gates 1 higher at 0.001, it was 2.3036 after 150 steps, at chance. {trained} "
    "METAGROSS under the same rule still gets almost no gradient at the last inked pixel: "
    "3.0e-11 with its initial biases, 4.7e-9 with its F maps 3 lower. It runs the printed "
    "recurrence h_t = o_t c_t, whose output gate, near 0.5 at initialisation, halves the "
    "carried state every step. The forget-gate rule does not reach that gate.")

#: the recipe's own training curve in the MNIST probe
MNIST_PROBE_TRAINED = (
    "With forget gates 3 higher at 0.001, it stayed at chance through 1,200 steps (19 "
    "epochs): validation accuracy 10% at all 48 evaluations, validation loss 2.3030 at best "
    "and 2.3053 at the end. At 0.003, the top of the new range, it also stayed at chance "
    "through 1,200 steps: validation loss 2.3031 at best and 2.3061 at the end. So the "
    "initial forget bias explains the missing gradient, but not "
    "the whole plateau; its other cause was not found here.")

#: the probe of the Fashion-MNIST baseline's spread: measured on 2026-12-03
FASHION_PROBE_NOTE = (
    " Probe of the LSTM's spread (2026-12-03, the MNIST probe's machine and sizes). On "
    "average 42 blank steps follow a Fashion-MNIST image's last inked pixel. At "
    "initialisation the LSTM's gradient at that pixel is 5.6e-6 with torch's biases, 1.7e-5 "
    "with forget gates 1 higher and 4.4e-5 with 3 higher. At the centre pixel it is 0, "
    "1.4e-27 and 4.9e-4. So with torch's biases the LSTM got gradient from the bottom rows "
    "only.")
