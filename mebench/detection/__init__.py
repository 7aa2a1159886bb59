"""Detection of extraction from the answer stream: benign traffic, rates at a false-positive budget,
the detection benchmark. See docs/defenses/detection_benchmark.md."""
