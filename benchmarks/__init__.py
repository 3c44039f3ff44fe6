"""Experiments and measurements beside the product: each module a tool run from the repository root as
``python -m benchmarks.<tool>`` (BENCHMARKS.md gives the commands). They use fucina's public modules;
fucina never imports them (an import-linter contract), and they are not part of the installed package.
"""
