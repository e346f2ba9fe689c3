"""CpuMeter: the process's CPU time split into the inference thread's and the rest."""

from __future__ import annotations

import threading
import time

from blockplan.runtime.cpu import CpuMeter


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_cpu_of_the_inference_thread_is_split_from_the_rest() -> None:
    started, go, done, finish = (threading.Event() for _ in range(4))

    def worker() -> None:  # the thread must still run when sampled (its CPU clock)
        started.set()
        go.wait()
        _spin(0.2)
        done.set()
        finish.wait()

    thread = threading.Thread(target=worker)
    thread.start()
    started.wait()
    meter = CpuMeter(thread.ident)
    meter.sample(ticks=0)
    go.set()
    done.wait()
    _spin(0.1)  # this thread: "besides inference"
    sample = meter.sample(ticks=10)
    finish.set()
    thread.join()
    values = sample.values()
    assert sample.inference_percent > 0 and sample.other_percent > 0
    # 0.2 s in the worker, 0.1 s here (other threads of the test process may add a little).
    inference_s = sample.inference_percent / 100 * sample.wall_s
    other_s = sample.other_percent / 100 * sample.wall_s
    assert 0.18 < inference_s < 0.3 and 0.09 < other_s < 0.3
    assert sample.other_ms_per_tick is not None and sample.other_ms_per_tick > 9
    assert set(values) >= {"cpu_percent", "inference_cpu_percent", "other_cpu_percent"}


def test_without_an_inference_thread_everything_is_besides_inference() -> None:
    meter = CpuMeter(None)
    _spin(0.05)
    sample = meter.sample()
    assert sample.inference_percent == 0 and sample.other_percent > 0
    assert sample.other_ms_per_tick is None
