"""GA4xx: safety. Ops that touch the file system, the network, the process or Python, found before
anything of the model is executed."""

from __future__ import annotations

from ..model import Finding, Severity
from .base import Rule, rule

FILE_OPS = {
    "ReadFile", "WriteFile", "MatchingFiles", "Save", "SaveV2", "SaveSlices", "Restore", "RestoreV2",
    "RestoreSlice", "MergeV2Checkpoints", "ImmutableConst", "LoadAndRemapMatrix", "GenerateVocabRemapping",
    "WholeFileReader", "WholeFileReaderV2", "TextLineReader", "TextLineReaderV2", "TFRecordReader",
    "TFRecordReaderV2", "FixedLengthRecordReader", "FixedLengthRecordReaderV2", "LMDBReader",
    "TFRecordDataset", "TFRecordDatasetV2", "TextLineDataset", "FixedLengthRecordDataset",
    "FixedLengthRecordDatasetV2", "CSVDataset", "CSVDatasetV2", "ExperimentalCSVDataset", "LMDBDataset",
    "ExperimentalLMDBDataset", "SqlDataset", "ExperimentalSqlDataset", "SnapshotDataset", "SnapshotDatasetV2",
    "SaveDataset", "SaveDatasetV2", "ExperimentalSaveDataset", "LoadDataset", "ExperimentalLoadDataset",
    "CreateSummaryFileWriter", "CreateSummaryDbWriter", "WriteSummary", "WriteScalarSummary",
    "WriteHistogramSummary", "WriteImageSummary", "WriteAudioSummary", "WriteRawProtoSummary",
    "WriteGraphSummary", "ImportEvent", "DebugIdentity", "DebugIdentityV2", "DebugIdentityV3",
    "DebugNanCount", "DebugNumericSummary", "DebugNumericSummaryV2",
}
# Reading a vocabulary file is how lookup tables are initialised; it is safe when the file is one of
# the model's own assets (the loader points it inside the model folder).
TABLE_FILE_OPS = {"InitializeTableFromTextFile", "InitializeTableFromTextFileV2"}
NETWORK_OPS = {"RpcClient", "RpcCall", "RpcServer", "Rpc", "TryRpc", "DataServiceDataset",
               "DataServiceDatasetV2", "DataServiceDatasetV3", "DataServiceDatasetV4", "RegisterDataset",
               "RegisterDatasetV2", "GcsConfigureCredentials", "GcsConfigureBlockCache"}
PYTHON_OPS = {"PyFunc", "PyFuncStateless", "EagerPyFunc"}


@rule("GA401", "unsafe-op", Severity.ERROR,
      fix="Only run this model if you trust where it came from (--allow-unsafe-ops); remove file, "
          "network and Python ops from serving signatures and initializers.")
class UnsafeOp:
    """An op that touches files, the network or Python runs when the model is loaded or called.

    ## What it does
    Walks the audited signature, the model initializer (`__saved_model_init_op`) and the resource
    initializers (lookup tables) for ops such as `ReadFile`, `WriteFile`, `MatchingFiles`, dataset
    readers, summary writers, `PrintV2` to a file, `Save`/`Restore` outside the saver's own functions,
    RPC ops and `PyFunc`. The saver's `_traced_save`/`_traced_restore` functions are not findings.

    ## Why is this bad?
    A SavedModel is a program: loading or calling it runs these ops with your permissions. When one is
    present gradaudit executes nothing of the model (no load, no numeric checks, no probes) unless you
    pass `--allow-unsafe-ops`.

    ## Example
    ```python
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.string)])
    def serve(x, path):
        tf.io.write_file(path, tf.strings.as_string(tf.reduce_sum(x)))
        return 2 * x
    ```

    ## Use instead
    Keep I/O outside the model: log and save from the Python code that calls it.
    """


RULES: tuple[Rule, ...] = (UnsafeOp,)


def _why(node, has_assets: bool) -> str | None:
    op = node.op
    if op in FILE_OPS:
        return "reads or writes files"
    if op in TABLE_FILE_OPS and not has_assets:
        return "reads a file that is not one of the model's assets"
    if op in NETWORK_OPS:
        return "talks to the network"
    if op in PYTHON_OPS:
        return "runs Python code"
    if op in ("PrintV2", "Print") and "output_stream" in node.attr:
        stream = node.attr["output_stream"].s.decode(errors="replace")
        if stream.startswith("file://"):
            return f"prints to a file ({stream})"
    return None


def unsafe_findings(model, signature_nodes, signature_function, signature_label: str) -> list[Finding]:
    """unsafe-op findings for a SavedModel: the signature, the init op and resource initializers."""
    from ..graph.walk import walk_ops

    roots = [(signature_label, signature_nodes, signature_function)] + model.initializer_roots()
    has_assets = model.has_assets()
    findings, seen = [], set()
    for label, nodes, where in roots:
        for ref, node in walk_ops(model.library, nodes, where):
            why = _why(node, has_assets)
            if why and ref not in seen:
                seen.add(ref)
                findings.append(UnsafeOp.finding(
                    f"{ref.op_type} '{ref.op_name}' in {ref.function} {why}; it is reachable from {label}",
                    op=ref))
    return findings


def check(analysis) -> list[Finding]:
    sig = analysis.signature
    if sig.nodes is not None:
        nodes, where = sig.nodes, sig.where
    else:
        nodes, where = analysis.model.library.functions[sig.function].node_def, sig.function
    return unsafe_findings(analysis.model, nodes, where, f"signature {sig.key!r}")
