"""What `blockplan bench` and `blockplan bench-sim` measure, and the inputs they measure on:
the decoding strategies (`decoding.py`, with the compute floor of `compute_floor.py`),
backends against each other (`backends.py`), streamed vs recomputed prefill (`streaming.py`,
`streaming_cost.py` over the frame stream of `stream_sequence.py`) and the simulator
(`sim.py`). Results and their commands are in docs/BENCHMARKS.md."""
