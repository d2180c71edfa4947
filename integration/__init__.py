"""Model zoo, suites and benchmarks (run from the repository root)."""
