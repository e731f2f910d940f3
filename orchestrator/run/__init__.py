"""Layer 5, run: a submission end to end: Ray started or joined, the stages overlapped with Ray Tune's trials through
the ready gate, every result recorded as it finishes, the outputs written at the end."""
