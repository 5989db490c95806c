"""The static graph: function library, the inlined dataflow graph, and TensorFlow's gradient registry."""
