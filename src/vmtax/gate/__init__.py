"""The gate of ``vmtax compare``: which rows of a comparison fail a CI job.

- ``rule``: what fails (``--fail-on slower|faster|any``, ``--max-overhead R``), checked when
  parsed, and the exit code a failed gate gives (light: the command's options import it);
- ``judge``: a comparison's rows judged against a rule: the rows that trip it, and the rows
  that could not be judged (no verdict is possible, or the interval is too wide to place
  against the tolerance), which never trip it.
"""
