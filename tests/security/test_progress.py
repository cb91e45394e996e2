"""The security matrix's progress (issue 31, "stay quiet in pipes"): a bar redrawn in place only
on a terminal; elsewhere (CI logs, pipes) one plain line per finished run, with no bar and no
cursor escapes, that says which run, its outcome and how far the matrix is.

    python3 -m unittest discover -s tests/security -p 'test_*.py'
"""
from __future__ import annotations

import io
import os
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from matrix import Progress  # noqa: E402

RUNS = [
    ("t0 germline C1", {"variant": "trojan", "detected": [], "refused": "", "seconds": 2.5}),
    ("t0 unprotected C1", {"variant": "trojan", "detected": [{"canary": "x"}], "refused": "", "seconds": 1.0}),
    ("t0 runc C2", {"variant": "benign", "detected": [{"canary": "y"}], "refused": "", "seconds": 0.4}),
    ("t0 germline C3", {"variant": "trojan", "detected": [], "refused": "release refused: bad signature",
                        "seconds": 0.1}),
]


def drive(p: Progress) -> None:
    for label, rec in RUNS:
        p.show(label)
        p.finished(label, rec)
    p.end()


class ProgressOutput(unittest.TestCase):
    def test_a_pipe_gets_one_plain_line_per_run_and_a_summary(self) -> None:
        out = io.StringIO()  # not a terminal: isatty() is False
        drive(Progress(len(RUNS), out=out))
        text = out.getvalue()
        self.assertNotIn("\r", text)
        self.assertNotIn("\x1b", text)
        self.assertNotIn("[#", text)
        self.assertNotIn("[.", text)
        lines = text.splitlines()
        self.assertEqual(len(lines), len(RUNS) + 1, text)
        self.assertTrue(lines[0].startswith("matrix: 1/4 t0 germline C1 (trojan): no disclosure, 2.5s;"), lines[0])
        self.assertIn("DISCLOSED (1)", lines[1])
        self.assertIn("disclosing runs 1;", lines[1])
        # A benign run's disclosure is not counted as a Trojan's.
        self.assertIn("disclosing runs 1;", lines[2])
        self.assertIn("refused: release refused: bad signature", lines[3])
        self.assertEqual(lines[4].split(" runs in ")[0], "matrix: 4/4")
        self.assertTrue(lines[4].endswith("disclosing runs 1"), lines[4])

    def test_a_terminal_gets_the_bar_redrawn_in_place(self) -> None:
        out = io.StringIO()
        drive(Progress(len(RUNS), tty=True, out=out))
        text = out.getvalue()
        self.assertIn("\r[" + "." * 30 + "] 0/4 t0 germline C1", text)
        self.assertIn("\r[" + "#" * 30 + "] 4/4 done", text)
        self.assertIn("\x1b[K", text)
        self.assertNotIn("matrix: 1/4", text)
        self.assertEqual(text.count("\n"), 1, "one newline, at the end")

    def test_the_default_follows_stderr(self) -> None:
        r, w = os.pipe()
        with os.fdopen(w, "w") as pipe:
            self.assertFalse(Progress(1, out=pipe).tty)
        os.close(r)


if __name__ == "__main__":
    unittest.main()
