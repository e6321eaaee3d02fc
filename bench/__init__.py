"""vRT benchmarks: vrt against the bare WebSocket floor, side by side in one run.

Run from the repository root: ``python -m bench [--smoke|--quick|--full]``. See
``docs/performance.md`` for the method and the last full run's table.
"""
