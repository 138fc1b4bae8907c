"""Run a command and write its own peak resident memory, CPU and exit code, from ``wait4``, to a file.

``bench_record`` starts each process it measures through this small one. At ``exec`` the kernel
records the high-water mark of the address space being left into the new program's ``maxrss``: a
process the benchmark started directly, once the benchmark had grown, reported the benchmark's peak as
its own (the 50,000-pod run's export said 2,006 MiB; the same export alone peaks at 176 MiB). Started
from here, a process's peak is its own. The command's pid goes to ``FILE.pid`` (for its resident
memory while it runs); SIGTERM and SIGINT are passed on to it.

Usage: ``python -m bench.peak_of FILE COMMAND [ARG...]``
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path


def main() -> None:
    out = Path(sys.argv[1])
    proc = subprocess.Popen(sys.argv[2:])
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda received, _frame: proc.send_signal(received))
    out.with_name(out.name + ".pid").write_text(str(proc.pid))
    _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    cpu_s = usage.ru_utime + usage.ru_stime
    out.write_text(json.dumps({"maxrss_kib": usage.ru_maxrss, "cpu_s": cpu_s, "exit_code": code}))
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
