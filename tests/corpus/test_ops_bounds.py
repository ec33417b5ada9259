"""An OPS page is read with a bound: a gzip file that decompresses past what a page can be (a few kilobytes of
gzip holding gigabytes of whitespace) is refused naming the file, in little memory; a page made here is read."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

from evalctl.corpus.import_formats.ops import read_page
from evalctl.corpus.import_formats.problems import ProblemLog

PAGE = {"ops:world-patent-data": {"exchange-documents": [{"exchange-document": {
    "@country": "EP", "@doc-number": "1000001", "@kind": "A1", "@family-id": "1",
    "bibliographic-data": {"invention-title": {"@lang": "en", "$": "A folding pizza box"}}}}]}}


def test_a_page_is_read_and_a_gzip_bomb_is_refused_in_little_memory(tmp_path):
    good = tmp_path / "p01.json.gz"
    good.write_bytes(gzip.compress(json.dumps(PAGE).encode()))
    log = ProblemLog()
    assert len(read_page(good, log)) == 1 and not log.problems

    bomb = tmp_path / "p02.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        f.write(b"[" + b" " * (300 << 20) + b"]")  # 300 MB of whitespace: valid JSON, about 300 kB of gzip
    # read in a process of its own, whose peak memory is the reading's
    # (its VmHWM: ru_maxrss would carry the forking parent's peak across exec)
    code = ("import re, sys; from pathlib import Path; from evalctl.corpus.import_formats.ops import read_page\n"
            "from evalctl.corpus.import_formats.problems import ProblemLog\n"
            "log = ProblemLog(); got = read_page(Path(sys.argv[1]), log)\n"
            "peak = int(re.search(r'VmHWM:\\s+(\\d+)', Path('/proc/self/status').read_text())[1]) // 1024\n"
            "print(got is None, peak, str(log.problems[0]))")
    out = subprocess.run([sys.executable, "-c", code, str(bomb)], capture_output=True, text=True, check=True).stdout
    refused, peak_mb, problem = out.split(" ", 2)
    assert refused == "True" and int(peak_mb) < 250, out  # was 741 MB: the whole text, then its decoded copy
    assert "p02.json.gz" in problem and "not an OPS page" in problem
