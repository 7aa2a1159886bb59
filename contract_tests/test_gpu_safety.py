"""The contract suite is safe on a GPU machine (issue 51): no test forks a process that may hold CUDA or
autograd threads, and every test that needs CUDA says so when it skips."""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).parent
FORK = re.compile(r"""get_context\(\s*["']fork["']|os\.fork\(|set_start_method\(\s*["']fork["']""")
CUDA_SKIP = re.compile(r"skipif\(\s*not torch\.cuda\.is_available\(\)\s*,\s*reason=(['\"])(.*?)\1", re.S)


def test_no_test_forks_a_process():
    # "Unable to handle autograd's threading in combination with fork-based multiprocessing": a forked
    # child of a worker that ran CUDA or autograd dies; spawn or a subprocess is safe everywhere
    offenders = [p.name for p in sorted(HERE.glob("*.py")) if p.name != Path(__file__).name and FORK.search(p.read_text())]
    assert offenders == []


def test_tests_that_need_cuda_say_so_when_they_skip():
    for path in sorted(HERE.glob("*.py")):
        text = path.read_text()
        for match in CUDA_SKIP.finditer(text):
            assert "CUDA" in match.group(2) or "GPU" in match.group(2), (path.name, match.group(2))
    assert CUDA_SKIP.search((HERE / "test_cuda_paths.py").read_text())  # the pattern still finds them
