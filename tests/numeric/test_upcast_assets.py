"""The float64 copy reads the model's assets in place: an asset that links to a device (/dev/zero) is not
followed into the temporary folder (a copy that followed links wrote gigabytes)."""

from __future__ import annotations

import os

import tensorflow as tf
from helpers import save_module

from gradaudit.numeric.savedmodel import read_saved_model
from gradaudit.numeric.upcast import write_float64_copy


class WithAsset(tf.Module):
    def __init__(self, vocab: str):
        self.vocab = tf.saved_model.Asset(vocab)

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": x * 2.0}


def test_assets_are_linked_not_copied(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("a\nb\n")
    path = save_module(WithAsset(str(vocab)), str(tmp_path / "model"))
    os.symlink("/dev/zero", os.path.join(path, "assets", "zeros"))  # what a hostile model ships
    dest = tmp_path / "copy"
    write_float64_copy(read_saved_model(path, ("serve",), "serving_default"), str(dest))
    assert os.path.islink(dest / "assets")
    assert sorted(os.listdir(dest / "assets")) == ["vocab.txt", "zeros"]
    written = sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(dest) for f in files)
    assert written < 10 << 20  # the rewritten saved_model.pb only
