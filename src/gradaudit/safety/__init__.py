"""The safety gate: what TensorFlow would run and read for a model, proven harmless before anything runs.
`gate` walks every op it would run against the reviewed op classes (`op_classes`, made by `generate`);
`assets` checks the files the loader would open."""
