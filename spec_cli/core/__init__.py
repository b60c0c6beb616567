"""The math: sampling, the acceptance rules, the cost model, statistics.  Pure numpy, no I/O."""
