"""The static graph: function library, each function's dataflow graph and summary, their composition, and
TensorFlow's gradient registry."""
