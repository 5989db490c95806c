from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(__file__))  # builders.py


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """Build each small SavedModel once per session, on first use: `models("relu")`."""
    import builders

    root = tmp_path_factory.mktemp("numeric-models")
    built: dict[str, str] = {}
    recipes = {
        "mlp": lambda p: builders.custom_mlp(p, 0.0),
        "mlp_1e-4": lambda p: builders.custom_mlp(p, 1e-4),
        "mlp_1e-6": lambda p: builders.custom_mlp(p, 1e-6),
        "mlp_2x": lambda p: builders.custom_mlp(p, 1.0),
        "relu": builders.relu_abs_mlp,
        "while": builders.while_model,
        "ste": builders.ste_model,
        "fake_quant": builders.fake_quant_model,
        "dropout": builders.dropout_model,
        "many": lambda p: builders.many_variables(p, bad=17),
        "many_ok": lambda p: builders.many_variables(p, bad=None),
        "cnn": builders.keras_cnn,
        "fused": builders.fused_bn_model,
        "fused_1e-4": lambda p: builders.fused_bn_model(p, 1e-4),
        "stopped": builders.stopped_model,
        "sqrt": builders.sqrt_model,
        "unknown_rank": builders.unknown_rank_model,
        "no_gradient": builders.no_gradient_model,
        "embedding": builders.embedding_model,
        "scalar": builders.scalar_variable_model,
        "above_two": builders.wrong_above_two,
        "above_two_ok": lambda p: builders.wrong_above_two(p, 1.0),
        "keras_log1pexp": builders.keras_log1pexp,
        "text_masked": lambda p: builders.keras_text(p, True),
        "text": lambda p: builders.keras_text(p, False),
        "xent": builders.softmax_xent,
        "xent_smoothed": lambda p: builders.softmax_xent(p, True),
    }

    def get(name: str) -> str:
        if name not in built:
            built[name] = recipes[name](str(root / name))
        return built[name]

    return get
