"""The data sets only the user can supply: the papers' data that cannot be had here.

Each :class:`DataNeed` names the files, in the format the task's loader reads, and the task
option their path goes to. ``ctrlrnn data add NAME PATH`` registers a copy
(:mod:`ctrlrnn.data.user_files`); ``ctrlrnn reproduce --scale paper`` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["USER_DATA_SETS", "DataNeed"]


@dataclass(frozen=True)
class DataNeed:
    """Data a paper used that cannot be had here: the files the user supplies, in the format
    the task's loader reads, and the task option their path goes to.

    ``ctrlrnn data add NAME PATH`` (or ``ctrlrnn reproduce --scale paper --data NAME=PATH``)
    sets ``task.OPTION=PATH`` for every experiment that needs ``NAME``."""

    name: str  # the --data name: imdb, snli, sst, ...
    option: str  # the task option the path goes to (without ``task.``)
    files: str  # the exact files, as their distribution names them
    origin: str  # where they come from, in words
    subpath: str = ""  # joined to the given path (one data set of a folder of several)

    def value(self, path: str) -> str:
        """The task option's value for the user's ``path``."""
        return f"{path.rstrip('/')}/{self.subpath}" if self.subpath else path

    def line(self) -> str:
        """The page's sentence: what to supply and how."""
        return (f"needs the data: register it once with `ctrlrnn data add {self.name} PATH` "
                f"(or give `--data {self.name}=PATH`): {self.files}; {self.origin}")


#: every data set a paper-scale experiment reads from the user's files, by its name
USER_DATA_SETS: dict[str, DataNeed] = {need.name: need for need in (
    DataNeed("glove840b", "glove", "`glove.840B.300d.txt`, GloVe's text format",
             "nlp.stanford.edu/projects/glove"),
    DataNeed("sst", "sst", "a folder of `train.txt`, `dev.txt`, `test.txt`: SST's PTB-format "
             "trees (`trainDevTestTrees_PTB/trees`)", "nlp.stanford.edu/sentiment"),
    DataNeed("imdb", "imdb", "the `aclImdb` folder: `{train,test}/{pos,neg}/*.txt`",
             "ai.stanford.edu/~amaas/data/sentiment, `aclImdb_v1.tar.gz` unpacked"),
    DataNeed("trec", "trec", "a folder of `train_5500.label` and `TREC_10.label`",
             "cogcomp.seas.upenn.edu/Data/QA/QC"),
    DataNeed("snli", "path", "a folder of `snli_1.0_train.jsonl`, `snli_1.0_dev.jsonl`, "
             "`snli_1.0_test.jsonl`", "nlp.stanford.edu/projects/snli"),
    DataNeed("multinli", "path", "a folder of `multinli_1.0_train.jsonl`, "
             "`multinli_1.0_dev_matched.jsonl`, `multinli_1.0_dev_mismatched.jsonl`",
             "cims.nyu.edu/~sbowman/multinli"),
    DataNeed("scitail", "path", "the `SciTailV1.1/snli_format` folder: "
             "`scitail_1.0_train.txt`, `scitail_1.0_dev.txt`, `scitail_1.0_test.txt` (jsonl)",
             "allenai.org/data/scitail"),
    DataNeed("quora", "path", "a folder of `train.tsv`, `dev.tsv`, `test.tsv` "
             "(`label<TAB>question 1<TAB>question 2<TAB>id`, Wang et al. 2017's split)",
             "zhiguowang/BiMPM's Quora_question_pair_partition"),
    DataNeed("wikiqa", "path", "a folder of `WikiQA-train.tsv`, `WikiQA-dev.tsv`, "
             "`WikiQA-test.tsv`", "Microsoft's WikiQACorpus"),
    DataNeed("trecqa", "path", "a folder of `train.tsv`, `dev.tsv`, `test.tsv` "
             "(`question<TAB>answer<TAB>label`, the clean version of Rao et al. 2016)",
             "castorini's TrecQA"),
    DataNeed("mnist", "idx", "a folder of `train-images-idx3-ubyte.gz`, "
             "`train-labels-idx1-ubyte.gz`, `t10k-images-idx3-ubyte.gz`, "
             "`t10k-labels-idx1-ubyte.gz`", "yann.lecun.com/exdb/mnist"),
    DataNeed("cifar10", "cifar", "the `cifar-10-batches-bin` folder: `data_batch_1.bin` .. "
             "`data_batch_5.bin`, `test_batch.bin`", "cs.toronto.edu/~kriz/cifar.html, the "
             "binary version"),
    DataNeed("jsb", "pickle", "`JSB Chorales.pickle`", "Boulanger-Lewandowski et al. 2012"),
    DataNeed("nottingham", "pickle", "`Nottingham.pickle`", "Boulanger-Lewandowski et al. 2012"),
    DataNeed("piano", "pickle", "`Piano-midi.de.pickle`", "Boulanger-Lewandowski et al. 2012"),
    DataNeed("iwslt-de-en", "iwslt", "the `de-en` folder of IWSLT 2016: `train.tags.de-en.de`, "
             "`train.tags.de-en.en`, `IWSLT16.TED.tst2013.de-en.{de,en}.xml`, "
             "`IWSLT16.TED.tst2014.de-en.{de,en}.xml`", "wit3.fbk.eu, 2016-01"),
    DataNeed("iwslt14-de-en", "iwslt", "the `de-en` folder of IWSLT 2014: "
             "`train.tags.de-en.{de,en}`, `IWSLT14.TED.dev2010.de-en.{de,en}.xml`, "
             "`IWSLT14.TED.tst2012.de-en.{de,en}.xml`", "wit3.fbk.eu, 2014-01"),
    DataNeed("iwslt15-en-vi", "iwslt", "a folder of `train.{en,vi}`, `tst2012.{en,vi}`, "
             "`tst2013.{en,vi}`", "nlp.stanford.edu/projects/nmt (IWSLT'15 English-Vietnamese)"),
    DataNeed("babi-dialog", "path", "`dialog-babi-task6-dstc2-trn.txt` (with `-dev` and `-tst` "
             "beside it)", "fb.ai/babi, bAbI dialog tasks"),
    DataNeed("pdtb", "source", "a folder of `train.txt`, `valid.txt`, `test.txt` (one "
             "tokenised sentence a line, in document order) and `train.labels`, `valid.labels`, "
             "`test.labels` (each sentence's relation to the one before it)",
             "Ji et al. 2016b's preprocessing of the Penn Discourse Treebank"),
    DataNeed("switchboard", "source", "a folder of `train.txt`, `valid.txt`, `test.txt` (one "
             "tokenised utterance a line, in conversation order) and `train.labels`, "
             "`valid.labels`, `test.labels` (each utterance's dialog act)",
             "the Switchboard Dialog Act corpus as split by Ji et al. 2016a"),
    DataNeed("mtl", "mtl", "a folder of Liu et al.'s `<name>.task.train` and `<name>.task.test` "
             "(`label<TAB>text`) of their 16 sets: apparel, baby, books, camera_photo, dvd, "
             "electronics, health_personal_care, imdb, kitchen_housewares, magazines, MR, "
             "music, software, sports_outdoors, toys_games, video",
             "Liu et al. 2017 (adversarial multi-task learning), mtl-dataset"),
)}
