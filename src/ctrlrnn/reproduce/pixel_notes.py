"""What the pages of the pixel-by-pixel experiments say about their recipe and the probe that
chose it (``metagross-mnist``, ``metagross-fashion``; :mod:`ctrlrnn.tasks.forget_bias`)."""

from __future__ import annotations

#: the recipe every arm of both pixel experiments trains under, and what it replaced
PIXEL_RECIPE_NOTE = (
    " Every arm trains under one pixel-level recipe. Its forget gates start 3 higher "
    "(`task.forget_bias=3`). For the LSTM that is the forget gate's bias. A METAGROSS unit "
    "keeps 1 - f of its state, so its F maps' biases start 3 lower. Every unit also writes "
    "as much less as it keeps more (`task.couple_gates=true`): the LSTM's input gates start "
    "3 lower, so that it keeps sigmoid(3) of its cell and writes sigmoid(-3) of its "
    "candidate, as METAGROSS's c = (1 - f) h + f z does by construction (the fixed-value "
    "form of Tallec & Ollivier's chrono initialisation). Gradients are clipped to norm 1 "
    "(`clip_norm=1`), and the learning rate is searched in [0.0001, 0.003]. Until "
    "2026-12-03, every arm kept torch's initial biases, and the search reached a learning "
    "rate of 0.01; one MNIST LSTM seed diverged at 0.0042. Later that day the forget gates "
    "alone were raised, and the LSTM's gradient exploded (the cause below).")

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
    "initial forget bias explains the missing gradient, but not the whole plateau; the "
    "cause of the rest follows.")

#: the probe of the Fashion-MNIST baseline's spread: measured on 2026-12-03
FASHION_PROBE_NOTE = (
    " Probe of the LSTM's spread (2026-12-03, the MNIST probe's machine and sizes). On "
    "average 42 blank steps follow a Fashion-MNIST image's last inked pixel. At "
    "initialisation the LSTM's gradient at that pixel is 5.6e-6 with torch's biases, 1.7e-5 "
    "with forget gates 1 higher and 4.4e-5 with 3 higher. At the centre pixel it is 0, "
    "1.4e-27 and 4.9e-4. So with torch's biases the LSTM got gradient from the bottom rows "
    "only. With forget gates 3 higher alone its initial gradient explodes here too (norm "
    "7,000-16,000 over three batches of 64 of the first 4,000 training images, against "
    "0.08-0.16 with torch's biases and 0.09-0.16 with the input gates 3 lower as well; "
    "2026-12-03, the MNIST cause probe's machine); the MNIST page's cause probe has the "
    "rest.")

#: the cause of the plateau under forget gates 3 higher: measured on 2026-12-03 (see the text)
MNIST_CAUSE_NOTE = (
    " Cause of the plateau (probe of 2026-12-03, the same machine under a load of about 8 "
    "from other jobs, one thread; `scripts/pixel_lstm_probe.py`: the task's own model, "
    "batches and loss, Adam, gradients clipped to 1, batch 64, width 128, seed 0, no dropout, "
    "the whole validation split). The pipeline is sound: the steps are the pixels in [0, 1] "
    "(a batch's mean 0.130), the labels match the images (a logistic regression on the same "
    "flattened steps reaches 88.0% validation accuracy in 30 epochs, under a second), the "
    "classifier reads the LSTM's output at the last step (equal to its h_n), the loss is the "
    "batch mean, and there is no warm-up, schedule or weight decay. Read row by row (28 steps "
    "of 28 pixels), the same LSTM with forget gates 3 higher reaches 84.2% after 250 steps. "
    "Over 784 steps, though, forget gates 3 higher with the input gates left at torch's "
    "(writing half the candidate every step) make the cell sum about 20 steps of input: at "
    "the last step |c| is 1.76, against 0.06 with torch's biases. Its initial gradient "
    "explodes: the norm is 2,600-9,800 over three batches of 64 (7,000-16,000 on "
    "Fashion-MNIST), against 0.13-0.18 with torch's biases; on the first batch the recurrent "
    "weights' share is 8,100 of 9,800. The first clipped Adam steps (learning rate 0.001) "
    "leave that start within 10 steps: the gradient norm is 9,810 at step 1, 673 at step 2, "
    "205 at step 4, 5-41 at steps 5-10 and 0.66-0.86 at steps 25, 50 and 75, where the "
    "validation loss is 2.314, 2.309 and 2.308 at 10% accuracy: the LSTM lands on a flat "
    "region at chance, where the runs above stayed (what makes it flat was not measured "
    "further). With the input gates 3 lower as well (`task.couple_gates=true`), the cell "
    "stays at |c| 0.06, the initial gradient norm is 0.13-0.18, the mean gradient at the last "
    "inked pixel is 2.6e-7 (3.7e-11 with torch's biases, 1.1e-4 with the forget gates alone: "
    "measured here as |dL/dx|), and the LSTM leaves chance within 100 steps: {coupled} Tallec "
    "& Ollivier's chrono initialisation (forget biases log U(1, 783), input biases their "
    "negatives) also left chance: validation loss 2.233 and 16.2% accuracy after 100 steps, "
    "2.049 and 17.0% after 300."
)

#: the coupled recipe's training curves in the cause probe
MNIST_CAUSE_TRAINED = (
    "validation loss 2.220 and 27.6% accuracy after 100 steps, 2.009 and 20.6% after 200, "
    "2.185 and 15.8% after 250, 1.755 and 33.6% after 300 (against 2.3030 at best in the "
    "1,200 steps under the forget gates alone).")

#: one seed of the LSTM arm under the coupled recipe, through the trainer: a probe (2026-12-03)
MNIST_RECIPE_RUN_NOTE = (
    " Probe of the new recipe through the trainer (2026-12-03, the same machine under a load "
    "of about 10, one thread; not this experiment's result, whose search was not run again by "
    "then): `ctrlrnn train --task mnist-5k --model lstm --seed 0 --epochs 10 --max-steps 620 "
    "task.forget_bias=3 task.couple_gates=true task.dropout=0.144 clip_norm=1 lr=0.001 "
    "batch_size=64 model.hidden_size=128 threads=1`. Validation accuracy after each of its 10 "
    "epochs: 9.8%, 23.0%, 34.0%, 39.2%, 38.4%, 42.4%, 47.8%, 51.2%, 55.2% and 45.2% "
    "(validation loss 2.301 after the first, 1.228 at best); test accuracy 53.6% at the best "
    "step (558), after 1,457 s of training. The LSTM learns under this recipe and was still "
    "improving when the probe's 620 steps ended; the experiment's budget is 100 epochs with a "
    "patience of 10."
)

#: why METAGROSS's output gates start 5 higher in both pixel experiments (the probe behind it)
METAGROSS_OUTPUT_NOTE = (
    " METAGROSS's own part of the recipe: its output gates start 5 higher "
    "(`task.output_bias=5`, a task argument of its arm alone). A METAGROSS unit multiplies the "
    "state it carries by its output gate every step (h_t = o_t c_t, c_t = (1 - f_t) h_{t-1} + "
    "f_t z_t, eq 2-1), and at initialisation o is near 0.5; the forget-gate rule does not "
    "reach that gate. Probe (2026-12-05, AMD EPYC family 25 model 17, one thread beside two "
    "training jobs; `scripts/pixel_metagross_probe.py`; MNIST-5k, width 128, depth 2, the "
    "linear base, under the pixel recipe; the mean |dL/dx| at each image's last pixel above 0, "
    "3 draws of 64 training images). At initialisation the LSTM's gradient there is 7.6e-8. "
    "METAGROSS's is 1.1e-34 with its output gates as initialised, 1.9e-9 with them 3 higher, "
    "9.1e-8 with 5 higher and 6.7e-8 with 8 higher; at the last step it is 2.5e-3 in every "
    "case. 5 is the smallest of these offsets at which the digit gets a gradient of the "
    "LSTM's order. Training METAGROSS (seed 0, Adam, gradients clipped to 1, batch 64, no "
    "dropout, the whole validation split): with its output gates as initialised, at "
    "learning rate 0.001, the validation loss was 2.3026 (ln 10) and the accuracy 10.0% at "
    "each of the 5 epochs of 310 steps, as all 7 trials of an earlier start of this search "
    "stayed at chance. With them 5 higher, at 0.001 the validation accuracy was 13.8% after "
    "310 steps and 27.4% after 620; at 0.003, 36.2% and 47.8% (validation loss 1.386). The "
    "gradients this probe measures are not comparable to the figures of the earlier probes "
    "above, whose code was not kept: for the LSTM with the forget gates alone 3 higher it "
    "gives 6.6e-5 (above, 1.1e-4), with torch's biases 3.2e-24 (above, 3.7e-11).")
