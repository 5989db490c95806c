"""Regenerate op_classes.py: every op registered in the installed TensorFlow with its safety class.

    python -m gradaudit.safety.generate        # rewrites src/gradaudit/safety/op_classes.py

An op's class comes from the reviewed decisions below: first the per-op decisions (EXPLICIT), then the
generated Python module that defines it (PURE_MODULES, CLASS_OF_MODULE), else "unproven". A name that
looks like I/O (SUSPICIOUS) inside a pure module is never pure unless EXPLICIT says so: a new TensorFlow
op such as `FooWriter` in gen_math_ops is not allowed by accident. Review the diff of op_classes.py after
each TensorFlow upgrade; tests/safety/test_op_classes.py fails on any registered op not in the file.
"""

from __future__ import annotations

import glob
import os
import re
from collections import defaultdict

CLASSES = ("pure", "io", "network", "process", "python", "unproven")

# Modules whose every op computes on tensors in memory (math, nn, arrays, strings, images, random,
# variables, lookup tables, tensor lists, control flow and function calls, whose functions the gate
# walks as well).
PURE_MODULES = {
    "gen_array_ops", "gen_audio_ops", "gen_bitwise_ops", "gen_boosted_trees_ops", "gen_candidate_sampling_ops",
    "gen_clustering_ops", "gen_composite_tensor_ops", "gen_control_flow_ops", "gen_count_ops", "gen_ctc_ops",
    "gen_cudnn_rnn_ops", "gen_functional_ops", "gen_image_ops", "gen_linalg_ops", "gen_list_ops",
    "gen_logging_ops", "gen_lookup_ops", "gen_manip_ops", "gen_map_ops", "gen_math_ops", "gen_nn_ops",
    "gen_optional_ops", "gen_parsing_ops", "gen_ragged_array_ops", "gen_ragged_conversion_ops",
    "gen_ragged_math_ops", "gen_random_index_shuffle_ops", "gen_random_ops", "gen_resource_variable_ops",
    "gen_rnn_ops", "gen_sdca_ops", "gen_set_ops", "gen_sparse_csr_matrix_ops", "gen_sparse_ops",
    "gen_special_math_ops", "gen_spectral_ops", "gen_state_ops", "gen_stateful_random_ops",
    "gen_stateless_random_ops", "gen_stateless_random_ops_v2", "gen_string_ops", "gen_training_ops",
    "gen_uniform_quant_ops", "gen_user_ops",
}
CLASS_OF_MODULE = {
    "gen_io_ops": "io", "gen_summary_ops": "io", "gen_debug_ops": "io", "gen_checkpoint_ops": "io",
    "gen_filesystem_ops": "io", "gen_decode_proto_ops": "io", "gen_encode_proto_ops": "io",
    "gen_rpc_ops": "network", "gen_collective_ops": "network", "gen_nccl_ops": "network",
    "gen_sendrecv_ops": "network", "gen_dtensor_ops": "network",
    "gen_script_ops": "python",
}
SUSPICIOUS = re.compile(r"File|Reader|Writer|Record|Save|Restore|Checkpoint|Summary|Dump|Snapshot|Rpc|Send|Recv|"
                        r"Collective|Nccl|PyFunc|Vocab|Queue|Barrier|Stage|Session|Mutex|Host|Remote|Sleep|Abort")

# In-memory datasets: their functions are walked like any other; file, network and cache datasets are not here.
PURE_DATASETS = {
    "TensorDataset", "TensorSliceDataset", "SparseTensorSliceDataset", "RangeDataset", "MapDataset",
    "ParallelMapDataset", "ParallelMapDatasetV2", "FilterDataset", "ParallelFilterDataset", "BatchDataset",
    "BatchDatasetV2", "PaddedBatchDataset", "PaddedBatchDatasetV2", "ParallelBatchDataset", "TakeDataset",
    "SkipDataset", "RepeatDataset", "ZipDataset", "ConcatenateDataset", "FlatMapDataset", "InterleaveDataset",
    "ParallelInterleaveDatasetV2", "ParallelInterleaveDatasetV3", "ParallelInterleaveDatasetV4",
    "ShuffleDataset", "ShuffleDatasetV2", "ShuffleDatasetV3", "PrefetchDataset", "ReduceDataset",
    "DatasetToSingleElement", "WindowDataset", "OptionsDataset", "ModelDataset", "FinalizeDataset",
    "DatasetCardinality", "AnonymousIterator", "AnonymousIteratorV2", "AnonymousIteratorV3", "MakeIterator",
    "IteratorGetNext", "IteratorGetNextAsOptional", "IteratorGetNextSync", "DeleteIterator", "ScanDataset",
    "TakeWhileDataset", "UnbatchDataset", "UniqueDataset", "AnonymousSeedGenerator", "DeleteSeedGenerator",
    "AnonymousRandomSeedGenerator", "DeleteRandomSeedGenerator", "DummySeedGenerator",
    "AnonymousMemoryCache", "DeleteMemoryCache", "DummyMemoryCache",
}

# Reviewed per-op decisions; they win over the module. Each group says why.
EXPLICIT: dict[str, str] = {}
EXPLICIT.update(dict.fromkeys(PURE_DATASETS, "pure"))
EXPLICIT.update(dict.fromkeys([  # pure in-memory ops whose names match SUSPICIOUS
    "ScalarSummary", "HistogramSummary", "ImageSummary", "AudioSummary", "AudioSummaryV2", "MergeSummary",
    "TensorSummary", "TensorSummaryV2",  # build a Summary proto string, write nothing
    "StackPush", "StackPushV2", "StackPop", "StackPopV2",
    "ShardedFilename", "ShardedFilespec",  # string formatting only
    "Snapshot",  # a copy of a tensor
    "BoostedTreesMakeStatsSummary",  # tensor statistics
    "Print", "PrintV2",  # stderr; PrintV2 to a file:// stream is io, decided per node by the gate
    "TensorArray", "TensorArrayV2", "TensorArrayV3", "TensorArrayRead", "TensorArrayReadV2",
    "TensorArrayReadV3", "TensorArrayWrite", "TensorArrayWriteV2", "TensorArrayWriteV3",
], "pure"))
EXPLICIT.update(dict.fromkeys([  # in-memory data structures of gen_data_flow_ops
    "DynamicPartition", "DynamicStitch", "ParallelDynamicStitch", "Stack", "StackV2", "StackClose",
    "StackCloseV2",
], "pure"))
EXPLICIT.update(dict.fromkeys([  # read or write files
    "ImmutableConst",  # memory-maps a file named by an attribute
    "InitializeTableFromTextFile", "InitializeTableFromTextFileV2",  # vocabulary file (asset exemption in the gate)
    "FixedUnigramCandidateSampler",  # vocab_file attribute (empty: decided per node by the gate)
    "RecordInput", "Skipgram", "DumpTensor", "CalibrationStatisticsSaver",
    "CacheDataset", "CacheDatasetV2", "TFRecordDataset", "TFRecordDatasetV2", "TextLineDataset",
    "FixedLengthRecordDataset", "FixedLengthRecordDatasetV2", "CSVDataset", "CSVDatasetV2",
    "ExperimentalCSVDataset", "LMDBDataset", "ExperimentalLMDBDataset", "SqlDataset", "ExperimentalSqlDataset",
    "SnapshotDataset", "SnapshotDatasetV2", "SnapshotDatasetReader", "SnapshotNestedDatasetReader",
    "SnapshotChunkDataset", "ListSnapshotChunksDataset", "SaveDataset", "SaveDatasetV2",
    "LoadDataset", "DatasetToTFRecord", "ExperimentalDatasetToTFRecord", "DistributedSave",
    "MatchingFilesDataset", "ExperimentalMatchingFilesDataset", "StatsAggregatorSetSummaryWriter",
    "DatasetFromGraph", "DeserializeIterator",
], "io"))
EXPLICIT.update(dict.fromkeys([
    "RemoteCall", "DataServiceDataset", "DataServiceDatasetV2", "DataServiceDatasetV3", "DataServiceDatasetV4",
    "RegisterDataset", "RegisterDatasetV2", "_Send", "_Recv", "_HostSend", "_HostRecv", "_NcclBroadcastRecv",
    "_NcclBroadcastSend", "_NcclReduceRecv", "_NcclReduceSend", "DTensorAllGather", "DTensorAllReduce",
    "DTensorAllScatter", "DTensorAllToAll", "DTensorReduceScatter", "XlaSendToHost", "XlaRecvFromHost",
    "_XlaSendFromHost", "_XlaSendFromHostV2", "_XlaRecvAtHost", "_XlaRecvAtHostV2",
], "network"))
# A compiled StableHLO module (jax2tf): it reaches TensorFlow only through the functions of its function_list
# attribute, which the gate walks; one with token inputs (ordered host side effects) is decided per node.
EXPLICIT["XlaCallModule"] = "pure"
EXPLICIT.update({"Abort": "process"})  # ends the process
EXPLICIT.update(dict.fromkeys([  # may block forever or share state across sessions: not proven harmless
    "MutexLock", "ConsumeMutexLock", "MutexV2",
], "unproven"))


def registered_ops() -> list[str]:
    """Every op type registered in this process (import tensorflow first)."""
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session

    ops = op_def_pb2.OpList()
    ops.ParseFromString(pywrap_tf_session.TF_GetBuffer(pywrap_tf_session.TF_GetAllOpList()))
    return sorted(o.name for o in ops.op)


def _modules() -> dict[str, str]:
    """op type -> name of the generated Python module that wraps it."""
    import tensorflow as tf

    root = os.path.dirname(tf.__file__)
    found: dict[str, str] = {}
    for path in sorted(glob.glob(os.path.join(root, "**", "gen_*ops*.py"), recursive=True)):
        module = os.path.basename(path)[:-3]
        if f"{os.sep}tpu{os.sep}" in path:
            module = "tpu_" + module
        with open(path, encoding="utf-8") as f:
            src = f.read()
        for op in re.findall(r'_apply_op_helper\(\s*"(\w+)"', src) + re.findall(r'execute\(b"(\w+)"', src):
            found.setdefault(op, module)
    return found


def classify(op: str, module: str | None) -> str:
    if op in EXPLICIT:
        return EXPLICIT[op]
    if module in CLASS_OF_MODULE:
        return CLASS_OF_MODULE[module]
    if module in PURE_MODULES and not SUSPICIOUS.search(op):
        return "pure"
    return "unproven"


def main() -> None:
    import tensorflow as tf

    modules = _modules()
    by_class: dict[str, list[str]] = defaultdict(list)
    for op in registered_ops():
        by_class[classify(op, modules.get(op))].append(op)
    lines = [f'"""Safety class of every op registered in TensorFlow {tf.__version__}. Generated by',
             "`python -m gradaudit.safety.generate`; do not edit by hand (change generate.py and rerun).",
             "", "pure: computes on tensors in memory; io: files; network; process; python: runs Python code;",
             'unproven: not shown harmless (blocks, shares state across sessions, or not reviewed)."""', "",
             f'TF_VERSION = "{tf.__version__}"', "", "CLASSES: dict[str, str] = {"]
    for cls in CLASSES:
        lines.append(f"    # {cls} ({len(by_class[cls])})")
        lines.extend(f'    "{op}": "{cls}",' for op in by_class[cls])
    lines.append("}")
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "op_classes.py")
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(out, {c: len(by_class[c]) for c in CLASSES})


if __name__ == "__main__":
    main()
