"""Reviewed ops of the op packages `--load-ops` names: each by its definition (inputs and attributes) and its
kernel as the package's source implements it, with the reason it is harmless. Hand-written, unlike
op_classes.py: TensorFlow's registry does not hold these ops unless their package is imported.

The gate uses an entry only for an op registered under the reviewed definition: the same input and attribute
names as the reviewed version registers (another library registering an op of that name is not reviewed).
An op of a reviewed package that is not registered cannot run in this process: the gate does not block it as
unproven; the audit says which package it needs (GA109) and runs nothing.

Classes: `pure` (computes on its input tensors in memory) and `assets` (reads files under a folder given by an
input; safe only where that input is proven to be the model's own assets folder and the file names it builds
stay inside it, decided per node by the gate).

Not on this list, so still refused (GA402) when registered: every other op of these packages. Among them, ops
that read a path from an attribute or input without the gate's check (TF-DF's `SimpleMLLoadModelFromPath`,
its training ops, which write files) must stay so.

The package ops are not `is_pure` for the static pass (gate.is_pure: a kernel run on synthetic values, outside
the sandbox): FastWordpieceTokenizeWithOffsets reads its `wp_model` flatbuffer without verifying it and
UnicodeScriptTokenizeWithOffsets trusts its splits, so a hostile tensor can make them read out of bounds;
a crash inside the sandbox is the model's failure, in gradaudit's own process it would be gradaudit's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PackageOp:
    package: str  # what --load-ops takes (the import name)
    dist: str  # the distribution pip installs
    version: str  # the version whose op definition and kernel were reviewed
    cls: str  # "pure" or "assets"
    inputs: tuple[str, ...]  # the reviewed OpDef's input names, in order
    attrs: tuple[str, ...]  # and its attribute names, in order
    why: str  # what the kernel does, as reviewed
    path_input: str = ""  # assets: the input naming the folder the kernel reads under
    prefix_attr: str = ""  # assets: the attribute the kernel prepends to the file names it reads

    @property
    def load(self) -> str:
        return f"--load-ops {self.package}"


_TEXT = ("tensorflow_text", "tensorflow-text", "2.21.1")
_TFDF = ("tensorflow_decision_forests", "tensorflow-decision-forests", "1.12.0")

PACKAGE_OPS: dict[str, PackageOp] = {
    # tensorflow-text 2.21.1 (core/kernels/*, registered by python/ops/_*.so). None opens a file, a resource or
    # the network; their only state is the call's own tensors.
    "TFText>WhitespaceTokenizeWithOffsetsV2": PackageOp(
        *_TEXT, "pure", ("input_values", "input_config"), (),
        "pure string computation: splits each UTF-8 string at the code points the input_config bitmap marks as "
        "whitespace (bounds-checked against the bitmap's length); tokens and offsets out "
        "(whitespace_tokenizer_kernel_template.h, whitespace_tokenizer.cc)"),
    "FastWordpieceTokenizeWithOffsets": PackageOp(
        *_TEXT, "pure", ("input_values", "wp_model"), (),
        "pure string computation: WordPiece on each string with the vocabulary trie given in memory as the "
        "wp_model uint8 tensor (a flatbuffer built at export, a constant of the model); subwords, ids and offsets "
        "out (fast_wordpiece_tokenizer_kernel_template.h, fast_wordpiece_tokenizer.cc)"),
    "UnicodeScriptTokenizeWithOffsets": PackageOp(
        *_TEXT, "pure", ("input_values", "input_splits"),
        ("Tsplits", "keep_whitespace"),
        "pure string computation: splits int32 code points (row-split) where ICU's script of the code point "
        "changes, dropping whitespace unless keep_whitespace (unicode_script_tokenize_kernel.cc)"),
    "MaxSpanningTree": PackageOp(
        *_TEXT, "pure", ("num_nodes", "scores"), ("T", "forest"),
        "pure computation: a batch of maximum spanning tree problems (Chu-Liu-Edmonds, mst_solver.h) on the "
        "[B, M, M] scores; maximum score and argmax sources out (mst_op_kernels.cc)"),
    "ConstrainedSequence": PackageOp(
        *_TEXT, "pure",
        ("scores", "sequence_lengths", "allowed_transitions", "transition_weights"),
        ("Tin", "Tsplits", "use_viterbi", "use_log_space", "use_start_and_end_states"),
        "pure computation: Viterbi or greedy decoding of the scores under the transition weights and allowed "
        "transitions (validated shapes); decoded states out (constrained_sequence_kernel.cc, "
        "constrained_sequence.cc)"),

    # tensorflow-decision-forests 1.12.0 (tensorflow/ops/inference/kernel.cc, op.cc; the model library is
    # Yggdrasil Decision Forests' model_library.cc).
    "SimpleMLCreateModelResource": PackageOp(
        *_TFDF, "pure", (), ("container", "shared_name"),
        "in-memory state: looks up or creates an empty YggdrasilModelResource in the resource manager under "
        "container/shared_name and returns its handle, as a lookup table's creator does (kernel.cc)"),
    "SimpleMLInferenceOpWithHandle": PackageOp(
        *_TFDF, "pure",
        ("numerical_features", "boolean_features", "categorical_int_features", "categorical_set_int_features_values",
         "categorical_set_int_features_row_splits_dim_1", "categorical_set_int_features_row_splits_dim_2",
         "model_handle"), ("dense_output_dim",),
        "pure computation: runs the decision forest already loaded in the model_handle resource on the feature "
        "tensors; predictions out; no gradient registered (kernel.cc, SimpleMLInferenceOp)"),
    "SimpleMLLoadModelFromPathWithHandle": PackageOp(
        *_TFDF, "assets", ("model_handle", "path"),
        ("output_types", "file_prefix", "allow_slow_inference"),
        "reads only the model's own assets: LoadModel(path, file_prefix) opens JoinPath(path, file_prefix + a "
        "fixed name) (header.pb, data_spec.pb, the model type's header, nodes-NNNNN-of-NNNNN; a saved_model.pb "
        "probe) and builds the model in the model_handle resource; the model type is one compiled into the "
        "library, no code is loaded (kernel.cc, model_library.cc, gradient_boosted_trees.cc)",
        path_input="path", prefix_attr="file_prefix"),
}


def reviewed(op_type: str, op_def) -> PackageOp | None:
    """The reviewed entry of a registered op whose definition is the reviewed one, else None."""
    entry = PACKAGE_OPS.get(op_type)
    if entry is None or op_def is None:
        return None
    if (tuple(a.name for a in op_def.input_arg) != entry.inputs
            or tuple(a.name for a in op_def.attr) != entry.attrs):
        return None
    return entry
