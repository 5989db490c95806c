"""The point where gradients are checked, built from signature specs."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from gradaudit.numeric import NumericOptions
from gradaudit.numeric.inputs import InputError, synthesise

SPECS = {"x": tf.TensorSpec([None, None, 3], tf.float32), "ids": tf.TensorSpec([None, 5], tf.int32),
         "mask": tf.TensorSpec([None], tf.bool)}


def make(**kw):
    domains = kw.pop("domains", None)
    return synthesise(SPECS, NumericOptions(**{"seed": 0, "batch_size": 2, "dim": 4} | kw), domains)


def test_unknown_dimensions_take_batch_size_then_dim():
    arrays = make()
    assert arrays["x"].shape == (2, 4, 3) and arrays["x"].dtype == np.float32
    assert arrays["ids"].shape == (2, 5) and not arrays["ids"].any()
    assert arrays["mask"].shape == (2,) and not arrays["mask"].any()
    assert 0.3 < arrays["x"].std() < 2.0  # N(0, 1)


def test_seeded():
    assert np.array_equal(make(seed=1)["x"], make(seed=1)["x"])
    assert not np.array_equal(make(seed=1)["x"], make(seed=2)["x"])


def test_shape_option_overrides_and_must_fit():
    assert make(shapes={"x": (1, 7, 3)})["x"].shape == (1, 7, 3)
    with pytest.raises(InputError, match="does not fit"):
        make(shapes={"x": (1, 7, 2)})


def test_inputs_file_gives_values_and_batch_size(tmp_path):
    npz = tmp_path / "in.npz"
    np.savez(npz, x=np.ones((5, 2, 3)))
    arrays = make(inputs_file=str(npz))
    assert arrays["x"].dtype == np.float32 and np.all(arrays["x"] == 1)
    assert arrays["ids"].shape == (5, 5)  # the real batch size, not --batch-size
    np.savez(npz, y=np.ones(3))
    with pytest.raises(InputError, match="not signature inputs"):
        make(inputs_file=str(npz))
    np.savez(npz, x=np.ones((5, 2, 4)))
    with pytest.raises(InputError, match="shape"):
        make(inputs_file=str(npz))
