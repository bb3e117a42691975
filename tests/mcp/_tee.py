"""``python _tee.py COPY COMMAND...``: run COMMAND with this process's stdin and stderr, and
copy every byte it writes to stdout both to our stdout and to the file COPY, so a test can
check afterwards exactly what an MCP client read from a server."""

from __future__ import annotations

import subprocess
import sys


def main() -> int:
    copy_path, *command = sys.argv[1:]
    with open(copy_path, "wb") as copy:
        child = subprocess.Popen(command, stdout=subprocess.PIPE)
        assert child.stdout is not None
        while chunk := child.stdout.read1(65536):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            copy.write(chunk)
            copy.flush()
        return child.wait()


if __name__ == "__main__":
    sys.exit(main())
