"""The reviewed op classes cover every op registered in the installed TensorFlow, and are what the generator
makes of its reviewed decisions (no hand edits, no op left out after a TensorFlow upgrade)."""

from __future__ import annotations

import tensorflow as tf

from gradaudit.safety import generate
from gradaudit.safety.op_classes import CLASSES, TF_VERSION


def test_every_registered_op_is_classified():
    missing = [op for op in generate.registered_ops() if op not in CLASSES]
    assert not missing, (f"{len(missing)} ops of TensorFlow {tf.__version__} are not classified (first: "
                         f"{missing[:10]}); review them in safety/generate.py and rerun it")


def test_classes_are_the_generators_output():
    assert set(CLASSES.values()) <= set(generate.CLASSES)
    if tf.__version__ != TF_VERSION:
        return  # the test above says what is new
    modules = generate._modules()
    assert {op: generate.classify(op, modules.get(op)) for op in generate.registered_ops()} == CLASSES


def test_known_file_network_process_and_python_ops_are_not_pure():
    for op in ("WriteFile", "ReadFile", "MatchingFiles", "SaveV2", "RestoreV2", "MergeV2Checkpoints",
               "ImmutableConst", "CacheDatasetV2", "SnapshotDatasetV2", "DatasetToTFRecord", "DumpTensor",
               "CalibrationStatisticsSaver", "FixedUnigramCandidateSampler", "DecodeProtoV2",
               "InitializeTableFromTextFileV2", "CreateSummaryFileWriter", "DebugIdentityV3", "RecordInput"):
        assert CLASSES[op] == "io", op
    for op in ("RpcCall", "CollectiveReduceV2", "_Send", "RemoteCall", "DataServiceDatasetV4"):
        assert CLASSES[op] == "network", op
    assert {CLASSES[op] for op in ("PyFunc", "PyFuncStateless", "EagerPyFunc")} == {"python"}
    assert CLASSES["Abort"] == "process"
    for op in ("FIFOQueueV2", "QueueDequeueV2", "MutexLock", "BatchFunction", "Stage", "GeneratorDataset"):
        assert CLASSES[op] == "unproven", op


def test_everyday_model_ops_are_pure():
    for op in ("MatMul", "Conv2D", "BiasAdd", "Relu", "Softmax", "FusedBatchNormV3", "ReadVariableOp",
               "AssignVariableOp", "VarHandleOp", "StatefulPartitionedCall", "While", "If", "Const", "IdentityN",
               "HashTableV2", "LookupTableFindV2", "TensorListReserve", "StatelessRandomUniformV2", "PrintV2",
               "StringJoin", "DecodeJpeg", "MapDataset", "XlaCallModule"):
        assert CLASSES[op] == "pure", op
